package events

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// A resend delivers one event to one subscription again, now, with fresh
// attempts: the event's record is found where its story says it is on the
// events topic (one record read), and handed to the dispatcher through
// the delivery-retry topic, due now, as attempt 0 with the resend mark
// (topics.Retry.Resend). The retry consumer delivers it as attempt 1 with
// the event's webhook-id, retries it on the subscription's schedule and
// dead-letters it at the end like any delivery; its attempt records carry
// the mark, so the event's story shows the resend.

// Errors of Resend, besides ErrInvalid, that a caller branches on: the
// admin API answers them 404 and 409 (admin.Error).
var (
	// ErrNotFound is an event the ledger does not hold or whose record
	// the events topic no longer holds, or a subscription that does not
	// exist.
	ErrNotFound = admin.NotFound("events: not found")
	// ErrRefused is a resend that is not made without force: the
	// subscription would not receive the event, or is disabled; or not
	// made at all: a pull subscription is sent nothing.
	ErrRefused = admin.Refused("events: resend refused")
)

// ResendRequest is the body of POST /api/events/{source}:{event-id}/resend.
type ResendRequest struct {
	Subscription string `json:"subscription"`
	// Force resends to a subscription that would not receive the event
	// (its sources, event_types or filter), or that is disabled (the
	// resend then waits until it is enabled).
	Force bool `json:"force"`
}

// Resent is what a resend did.
type Resent struct {
	Event        string `json:"event"`
	Subscription string `json:"subscription"`
	// Partition and Offset are the event's record on the events topic.
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
	// DueAt is when the resend is due: at once.
	DueAt time.Time `json:"due_at"`
	// Forced says what force overrode, if anything: why the subscription
	// would not receive the event, and that it is disabled.
	Forced []string `json:"forced,omitempty"`
	// Waiting says the resend waits for the subscription to be enabled.
	Waiting bool `json:"waiting,omitempty"`
}

// Resend delivers event key (<source>:<event-id>) to subscription
// req.Subscription again, now (see above). It refuses, unless req.Force,
// a subscription that would not receive the event (its globs or filter)
// and a disabled one; it refuses an event the ledger does not hold (the
// resend could not be recorded in its story), one that failed processing
// (it never reached the events topic: redrive it from the DLQ), and one
// whose record the events topic no longer holds. A team (who) resends
// only to its team's subscriptions, and only events in which one of them
// has a part: another team's subscription or event is not found, as an
// unknown one.
func (s *Service) Resend(ctx context.Context, key string, req ResendRequest, who admin.Identity) (Resent, error) {
	if source, id, ok := strings.Cut(key, ":"); !ok || source == "" || id == "" {
		return Resent{}, invalidf("event %q: want <source>:<event-id>", key)
	}
	if req.Subscription == "" {
		return Resent{}, invalidf("subscription: required (the id of the subscription to resend to)")
	}
	sub, err := s.registry.Get(ctx, req.Subscription)
	if err == nil && who.Role == admin.Team && sub.Team != who.Team {
		err = subscriptions.ErrNotFound
	}
	if errors.Is(err, subscriptions.ErrNotFound) {
		return Resent{}, admin.Of(ErrNotFound, fmt.Errorf("no subscription %s (hookstream subscriptions list shows them)", req.Subscription))
	}
	if err != nil {
		return Resent{}, err
	}
	if sub.Kind() == subscriptions.KindPull {
		return Resent{}, admin.Of(ErrRefused, fmt.Errorf("subscription %s is a pull subscription: its consumer reads the events at its cursor, and nothing is sent to it; replay it (hookstream replay --group sub:%s) to serve events again", sub.ID, sub.ID))
	}
	rec, err := s.record(ctx, key, who)
	if err != nil {
		return Resent{}, err
	}
	out := Resent{Event: key, Subscription: sub.ID, Partition: rec.Partition, Offset: rec.Offset}
	if d := subscriptions.Compile(sub).Match(subscriptions.NewEvent(rec)); !d.Match {
		if !req.Force {
			return Resent{}, admin.Of(ErrRefused, fmt.Errorf("subscription %s would not receive %s: %s; resend with --force to send it anyway", sub.ID, key, d.Reason()))
		}
		out.Forced = append(out.Forced, d.Reason())
	}
	if !sub.Enabled {
		why := "disabled"
		if sub.DisabledReason != "" {
			why += " (" + sub.DisabledReason + ")"
		}
		if !req.Force {
			return Resent{}, admin.Of(ErrRefused, fmt.Errorf("subscription %s is %s: enable it first, or resend with --force to send it when it is enabled", sub.ID, why))
		}
		out.Forced, out.Waiting = append(out.Forced, "subscription "+why), true
	}
	out.DueAt = time.Now().UTC()
	retry := &topics.Retry{Subscription: sub.ID, EventID: key, DueAt: out.DueAt, Resend: true, Body: rec.Value}
	w := retry.Record(s.c.Names.DeliveryRetry)
	// Its attempts are spans of the event's trace, as a retry's are.
	for _, h := range rec.Headers {
		if h.Key == topics.HeaderTraceparent || h.Key == topics.HeaderTracestate {
			w.Headers = append(w.Headers, h)
		}
	}
	if err := s.write(ctx, w); err != nil {
		return Resent{}, err
	}
	return out, nil
}

// record returns the event's latest record on the events topic, where its
// story, as who may read it, says it is.
func (s *Service) record(ctx context.Context, key string, who admin.Identity) (*kgo.Record, error) {
	story, err := s.stories.Story(ctx, key, who)
	switch {
	case errors.Is(err, ErrUnknownEvent):
		return nil, admin.Of(ErrNotFound, fmt.Errorf("no event %s in the ledger (never received, or forgotten after HOOKSTREAM_DEDUP_TTL): nothing to resend", key))
	case err != nil:
		return nil, err
	case story.Failure != nil:
		return nil, admin.Of(ErrRefused, fmt.Errorf("event %s failed processing at stage %s (%s): it never reached the events topic; redrive it from the DLQ", key, story.Failure.Stage, story.Failure.Error))
	case story.Events == nil:
		return nil, errGone(key)
	}
	var found *kgo.Record
	span := topics.Span{From: topics.Offset(story.Events.Offset), To: topics.Offset(story.Events.Offset + 1), Stable: true, Partitions: []int32{story.Events.Partition}}
	err = s.c.Read(ctx, s.c.Names.Events, span, func(rec *kgo.Record) bool {
		if string(rec.Key) == key {
			found = rec
		}
		return false
	}, nil)
	if _, ok := errors.AsType[*topics.NoPartitionError](err); ok {
		return nil, errGone(key)
	}
	if err != nil {
		return nil, err
	}
	if found == nil {
		return nil, errGone(key)
	}
	return found, nil
}

// errGone is an event whose record the events topic no longer holds.
func errGone(key string) error {
	return admin.Of(ErrNotFound, fmt.Errorf("the record of event %s is no longer on the events topic (past its retention): nothing to resend", key))
}

// write writes the retry record, acknowledged by every in-sync replica.
func (s *Service) write(ctx context.Context, rec *kgo.Record) error {
	cl, err := s.c.NewClient(
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchMaxBytes(int32(max(topics.RecordBytes(rec)+1<<10, 1<<20))),
		kgo.ProducerLinger(0),
	)
	if err != nil {
		return fmt.Errorf("events: producer: %w", err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("events: write the resend to %s: %w", s.c.Names.DeliveryRetry, err)
	}
	return nil
}
