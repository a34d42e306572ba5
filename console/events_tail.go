package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/events"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// The live tail: /ui/events/tail is a page whose script (static/tail.js)
// follows /ui/events/tail/stream, server-sent events of the events that
// commit while it is open, filtered by source and type as
// hookstream events tail filters them.
//
// Bound: each stream is one consumer of the events topic from its last
// stable offsets when the stream opened; it ends after tailMaxEvents
// events or tailMaxAge, whichever comes first, when the browser goes, or
// when the console stops (Run returns); at most tailMaxStreams are open at
// once per instance (503 beyond).
const (
	tailMaxEvents  = 1_000
	tailMaxAge     = 10 * time.Minute
	tailMaxStreams = 8
	// tailPing is how often an idle stream writes a comment: a browser
	// that went away is noticed at the latest then.
	tailPing = 15 * time.Second
)

// tailData is the tail page.
type tailData struct {
	Source, Type string
	Error        string
	MaxEvents    int
	MaxAge       time.Duration
}

// eventTail serves the tail page.
func (u *Console) eventTail(r *Request) error {
	q := events.Query{Source: strings.TrimSpace(r.QueryParam("source")), Type: strings.TrimSpace(r.QueryParam("type"))}
	data := tailData{Source: q.Source, Type: q.Type, MaxEvents: tailMaxEvents, MaxAge: tailMaxAge}
	if err := q.Check(); err != nil {
		data.Error = err.Error()
		return r.Render(http.StatusBadRequest, "events_tail.html", "Live events", "events", data)
	}
	return r.Render(http.StatusOK, "events_tail.html", "Live events", "events", data)
}

// tailEvent is one event of the stream.
type tailEvent struct {
	Key        string    `json:"key"`
	Source     string    `json:"source"`
	Type       string    `json:"type"`
	ReceivedAt time.Time `json:"received_at"`
	// URL is the event's story page.
	URL string `json:"url"`
}

// eventStream serves the server-sent events of the tail.
func (u *Console) eventStream(r *Request) error {
	q := events.Query{Source: strings.TrimSpace(r.QueryParam("source")), Type: strings.TrimSpace(r.QueryParam("type"))}
	if err := q.Check(); err != nil {
		return echo.NewHTTPError(http.StatusBadRequest, err.Error())
	}
	if u.tails.Add(1) > tailMaxStreams {
		u.tails.Add(-1)
		r.Response().Header().Set("Retry-After", "30")
		return echo.NewHTTPError(http.StatusServiceUnavailable, fmt.Sprintf("%d live tails are open on this instance, the most it serves: close one", tailMaxStreams))
	}
	defer u.tails.Add(-1)
	ctx, cancel := context.WithTimeout(r.Request().Context(), tailMaxAge)
	defer cancel()
	go func() { // the process stops: the stream ends, not holding the listener's shutdown
		select {
		case <-u.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()

	// Start where a read_committed reader would read next, so every event
	// committed after "ready" is seen.
	start, err := u.tailStart(ctx)
	if err != nil {
		return err
	}
	cl, err := u.cfg.Cluster.NewClient(
		kgo.ConsumePartitions(start),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		return fmt.Errorf("console: tail client: %w", err)
	}
	defer cl.Close()

	w := r.Response()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(event, data string) error {
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data); err != nil {
			return err
		}
		return http.NewResponseController(w).Flush()
	}
	if err := send("ready", "following"); err != nil {
		return nil // the browser went
	}
	filter := subscriptions.Subscription{}
	if q.Source != "" {
		filter.Sources = []string{q.Source}
	}
	if q.Type != "" {
		filter.EventTypes = []string{q.Type}
	}
	sent := 0
	for sent < tailMaxEvents {
		pollCtx, pollCancel := context.WithTimeout(ctx, tailPing)
		fs := cl.PollRecords(pollCtx, tailMaxEvents-sent)
		pollCancel()
		if ctx.Err() != nil {
			break
		}
		if err := fs.Err0(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			_ = send("end", "The tail stopped: "+err.Error())
			return nil
		}
		if fs.Empty() {
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil || http.NewResponseController(w).Flush() != nil {
				return nil // the browser went
			}
			continue
		}
		var werr error
		fs.EachRecord(func(rec *kgo.Record) {
			if werr != nil || sent >= tailMaxEvents || !filter.Matches(topics.EventSourceType(rec)) {
				return
			}
			b, err := json.Marshal(tailEventOf(rec))
			if err != nil {
				werr = err
				return
			}
			werr = send("event", string(b))
			sent++
		})
		if werr != nil {
			return nil // the browser went
		}
	}
	select {
	case <-r.Request().Context().Done(): // the browser went
	case <-u.stopped:
		_ = send("end", "This instance is stopping: reload to follow again.")
	default:
		_ = send("end", fmt.Sprintf("Stopped after %d events or %v, the most one page follows: reload to follow again.", tailMaxEvents, tailMaxAge))
	}
	return nil
}

// tailStart is the last stable offset of each partition of the events
// topic.
func (u *Console) tailStart(ctx context.Context) (map[string]map[int32]kgo.Offset, error) {
	topic := string(u.cfg.Cluster.Names.Events)
	listed, err := u.cfg.Cluster.Admin().ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("console: offsets of %s: %w", topic, err)
	}
	start := map[string]map[int32]kgo.Offset{topic: {}}
	listed.Each(func(o kadm.ListedOffset) { start[topic][o.Partition] = kgo.NewOffset().At(o.Offset) })
	return start, nil
}

// tailEventOf is what the tail shows of an events record.
func tailEventOf(rec *kgo.Record) tailEvent {
	e := tailEvent{Key: string(rec.Key), ReceivedAt: rec.Timestamp.UTC()}
	e.Source, e.Type = topics.EventSourceType(rec)
	if env, err := topics.ParseEnvelope(rec.Value); err == nil {
		e.ReceivedAt = env.ReceivedAt.UTC()
	}
	e.URL = admin.UIPrefix + "/events/" + url.PathEscape(e.Key)
	return e
}
