package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/events"
	"github.com/hookstream/hookstream/statestore"
	"github.com/hookstream/hookstream/topics"
)

// An event's story: /ui/events/{source}:{event-id} shows what
// hookstream events get prints (events.StoryQuery.Story, asked of the
// instance whose processor holds the event), its envelope, and per
// subscription its attempts and a Resend (events.Service.Resend, as POST
// /api/events/{key}/resend and hookstream events resend).
//
// Bound: the story query's own (the ledger entry, and at most 10,000
// records scanned for the events record), then that one record read.

// storyData is the story page.
type storyData struct {
	Story events.Story
	Steps []events.Step
	// Envelope is the event's latest record on the events topic, empty
	// when the topic no longer holds it (or it failed processing).
	Envelope []byte
	// Resends are the subscriptions a Resend may go to: those of the
	// story's deliveries.
	Resends []string
	// Payloads: the reader may see the envelope (not a viewer).
	Payloads bool
}

// resendSuffix ends the path of a resend.
const resendSuffix = "/resend"

// eventKey is the <source>:<event-id> a page's path names after
// /ui/events/, decoded once.
func eventKey(r *Request) (string, error) {
	key := strings.TrimPrefix(r.Request().URL.Path, admin.UIPrefix+"/events/")
	if source, id, ok := strings.Cut(key, ":"); !ok || source == "" || id == "" {
		return "", echo.NewHTTPError(http.StatusNotFound, "no such page: an event's page is /ui/events/<source>:<event-id>")
	}
	return key, nil
}

func (u *Console) eventStory(r *Request) error {
	key, err := eventKey(r)
	if err != nil {
		return err
	}
	ctx, cancel := admin.Timeout(r.Context)
	defer cancel()
	s, err := u.story(ctx, key, r.Who)
	if err != nil {
		return err
	}
	data := storyData{Story: s, Steps: s.Timeline(), Payloads: r.Who.Role != admin.Viewer}
	for _, d := range s.Deliveries {
		data.Resends = append(data.Resends, d.Subscription)
	}
	if s.Events != nil && data.Payloads {
		if data.Envelope, err = u.eventsRecord(ctx, *s.Events); err != nil {
			return err
		}
	}
	return r.Render(http.StatusOK, "event.html", "Event "+key, "events", data)
}

// story asks for the story of key as who may read it, its errors given their status.
func (u *Console) story(ctx context.Context, key string, who admin.Identity) (events.Story, error) {
	s, err := u.cfg.Events.Story(ctx, key, who)
	switch {
	case errors.Is(err, events.ErrUnknownEvent):
		return s, echo.NewHTTPError(http.StatusNotFound, "no event "+key+" in the ledger (never received, or forgotten after HOOKSTREAM_DEDUP_TTL)")
	case errors.Is(err, statestore.ErrRestoring):
		return s, echo.NewHTTPError(http.StatusServiceUnavailable, "the ledger partition of "+key+" is restoring; try again shortly")
	}
	return s, err
}

// eventsRecord reads the value of the events record at p: one record.
func (u *Console) eventsRecord(ctx context.Context, p events.Position) ([]byte, error) {
	var value []byte
	ranges := topics.Ranges{p.Partition: {From: p.Offset, To: p.Offset + 1}}
	err := u.cfg.Cluster.ReadRanges(ctx, u.cfg.Cluster.Names.Events, ranges, func(r *kgo.Record) bool {
		if r.Offset == p.Offset {
			value = bytes.Clone(r.Value)
		}
		return false
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("console: events record %d/%d: %w", p.Partition, p.Offset, err)
	}
	return value, nil
}

// eventResend resends the event to the subscription of the form, as
// hookstream events resend does without --force: refused (409) when the
// subscription would not receive the event or is disabled.
func (u *Console) eventResend(r *Request) error {
	path, ok := strings.CutSuffix(r.Request().URL.Path, resendSuffix)
	if !ok {
		return echo.NewHTTPError(http.StatusNotFound, "no such page")
	}
	key := strings.TrimPrefix(path, admin.UIPrefix+"/events/")
	r.SetTarget(key)
	ctx, cancel := admin.Timeout(r.Context)
	defer cancel()
	res, err := u.cfg.Events.Resend(ctx, key, events.ResendRequest{Subscription: r.FormValue("subscription")}, r.Who)
	if err != nil {
		return err
	}
	return r.Redirect(admin.UIPrefix+"/events/"+url.PathEscape(key),
		fmt.Sprintf("Resent %s to %s: due now (events record %d/%d).", res.Event, res.Subscription, res.Partition, res.Offset))
}
