package events

import (
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/attempts"
	"github.com/hookstream/hookstream/statestore"
	"github.com/hookstream/hookstream/topics"
)

// Story is a ledger entry as the API and `hookstream events get` show it.
type Story struct {
	ID          string     `json:"id"`
	Status      string     `json:"status"` // done or failed
	Partition   int32      `json:"partition"`
	Offset      int64      `json:"offset"` // in the ingest topic; the events record is in the same partition
	ReceivedAt  *time.Time `json:"received_at,omitempty"`
	ProcessedAt time.Time  `json:"processed_at"` // first processed
	ExpiresAt   time.Time  `json:"expires_at"`
	// Events is the event's latest record on the events topic; none when
	// it failed, or when that record is no longer retained.
	Events     *Position `json:"events,omitempty"`
	Duplicates Count     `json:"duplicates"`
	Replays    Count     `json:"replays"`
	Failure    *Failure  `json:"failure,omitempty"`
	// Deliveries are the deliveries of the most recently attempted
	// subscriptions, at most statestore.MaxDeliveries, the least recent
	// first; Omitted counts the others.
	Deliveries []Delivery `json:"deliveries"`
	Omitted    uint32     `json:"omitted"`
	// TraceID is the event's trace, the one of the processing that
	// claimed it (its replays link to that span); empty when the ledger
	// has none.
	TraceID string `json:"trace_id,omitempty"`
	// TraceURL links to the trace when HOOKSTREAM_TRACE_URL is set and
	// the trace was sampled (tracing.Link).
	TraceURL string `json:"trace_url,omitempty"`
}

// Position is a record's place in a topic.
type Position struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

// Count is how often something happened, and when last.
type Count struct {
	Count  uint32     `json:"count"`
	LastAt *time.Time `json:"last_at,omitempty"`
}

// Failure is why processing failed.
type Failure struct {
	Stage string `json:"stage"`
	Error string `json:"error"`
}

// Delivery is the event's delivery to one subscription.
type Delivery struct {
	Subscription string `json:"subscription"`
	// State is where the event is now: delivered, retrying (at DueAt),
	// failed (retried in place by an ordered subscription),
	// dead_lettered, or waiting_disabled (the subscription is disabled).
	State          string     `json:"state"`
	Attempts       uint32     `json:"attempts"`
	Status         int        `json:"last_status"`
	DueAt          *time.Time `json:"due_at,omitempty"`
	DeliveredAt    *time.Time `json:"delivered_at,omitempty"`
	DeadLetteredAt *time.Time `json:"dead_lettered_at,omitempty"`
	// Recent are the last real attempts, oldest first, without the event
	// and subscription they share with the story and the delivery.
	Recent []attempts.Attempt `json:"recent_attempts"`
}

// StoryOf is the story of key told by its state; disabled reports whether
// a subscription is disabled now.
func StoryOf(key string, st statestore.State, disabled func(id string) bool) Story {
	s := Story{
		ID:          key,
		Status:      st.Status.String(),
		Partition:   st.Partition,
		Offset:      st.Offset,
		ReceivedAt:  optTime(st.ReceivedAt),
		ProcessedAt: st.FirstSeen,
		ExpiresAt:   st.Expires,
		Duplicates:  Count{st.Duplicates, optTime(st.LastDuplicateAt)},
		Replays:     Count{st.Replays, optTime(st.LastReplayAt)},
		Deliveries:  make([]Delivery, 0, len(st.Deliveries)),
		Omitted:     st.Omitted,
	}
	if id := trace.TraceID(st.Trace.TraceID); id.IsValid() {
		s.TraceID = id.String()
	}
	if st.FailStage != "" || st.Status == statestore.Failed {
		s.Failure = &Failure{Stage: st.FailStage, Error: st.FailError}
	}
	for _, d := range st.Deliveries {
		out := Delivery{
			Subscription:   d.Subscription,
			State:          d.Outcome,
			Attempts:       d.Attempts,
			Status:         d.Status,
			DueAt:          optTime(d.DueAt),
			DeliveredAt:    optTime(d.DeliveredAt),
			DeadLetteredAt: optTime(d.DeadLetteredAt),
			Recent:         make([]attempts.Attempt, 0, len(d.Recent)),
		}
		if d.Outcome != topics.OutcomeDelivered && d.Outcome != topics.OutcomeDeadLettered && disabled(d.Subscription) {
			out.State = "waiting_disabled"
		}
		for _, t := range d.Recent {
			out.Recent = append(out.Recent, attempts.FromRecord(&topics.Attempt{N: int(t.N), Outcome: t.Outcome, Status: t.Status, Latency: t.Latency, Error: t.Error, At: t.At, Resend: t.Resend}))
		}
		s.Deliveries = append(s.Deliveries, out)
	}
	return s
}

// scoped is the story as who may read it (DESIGN, Access): whole for
// admins and operators; for a viewer without the errors of its failure and
// its attempts, which may quote a payload or a subscriber's answer; for a
// team only the deliveries of its team's subscriptions (teamOf names a
// subscription's team, "" for one it does not know), without the count of
// the others omitted. It reports false when who may read nothing of it: a
// team none of whose subscriptions has a part in the event. s is not
// changed.
func (s Story) scoped(who admin.Identity, teamOf func(sub string) string) (Story, bool) {
	switch who.Role {
	case admin.Admin, admin.Operator:
		return s, true
	case admin.Viewer:
		if s.Failure != nil {
			s.Failure = &Failure{Stage: s.Failure.Stage}
		}
		deliveries := make([]Delivery, len(s.Deliveries))
		for i, d := range s.Deliveries {
			d.Recent = slices.Clone(d.Recent)
			for j := range d.Recent {
				d.Recent[j].Error = ""
			}
			deliveries[i] = d
		}
		s.Deliveries = deliveries
		return s, true
	case admin.Team:
		s.Deliveries = slices.DeleteFunc(slices.Clone(s.Deliveries), func(d Delivery) bool { return teamOf(d.Subscription) != who.Team })
		s.Omitted = 0
		return s, len(s.Deliveries) > 0
	}
	return Story{}, false
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
