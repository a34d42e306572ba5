package attempts

import (
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// Totals are a subscription's deliveries as the attempts topic holds them.
type Totals struct {
	// Delivered counts successful attempts; Failed failed real attempts;
	// DeadLettered deliveries that went to the delivery DLQ.
	Delivered     int64      `json:"delivered"`
	Failed        int64      `json:"failed"`
	DeadLettered  int64      `json:"dead_lettered"`
	LastSuccessAt *time.Time `json:"last_success_at,omitempty"`
	LastFailure   *Failure   `json:"last_failure,omitempty"`
}

// Failure is a subscription's last failed attempt.
type Failure struct {
	At      time.Time `json:"at"`
	EventID string    `json:"event_id"`
	Status  int       `json:"status"`
	Error   string    `json:"error,omitempty"`
}

func (t *Totals) add(a *topics.Attempt) {
	switch a.Outcome {
	case topics.OutcomeDelivered:
		t.Delivered++
		if t.LastSuccessAt == nil || a.At.After(*t.LastSuccessAt) {
			at := a.At
			t.LastSuccessAt = &at
		}
	case topics.OutcomeFailed:
		t.Failed++
		if t.LastFailure == nil || a.At.After(t.LastFailure.At) {
			t.LastFailure = &Failure{At: a.At, EventID: a.EventID, Status: a.Status, Error: a.Error}
		}
	case topics.OutcomeDeadLettered:
		t.DeadLettered++
	}
}

// Tally follows the attempts topic from its start and keeps every
// subscription's Totals in memory (a few dozen bytes each).
type Tally struct {
	*topics.Follower
	log  *slog.Logger
	subs map[string]*Totals // written by the follower's fold, read in its View
}

// NewTally builds a tally of c's attempts topic. It does no I/O. Run
// reads the topic until its context ends; CatchUp waits until it read
// what was written before.
func NewTally(c topics.Cluster, log *slog.Logger) *Tally {
	t := &Tally{log: log.With("component", "attempts"), subs: make(map[string]*Totals)}
	t.Follower = topics.NewFollower(c, t.log, t.add, c.Names.DeliveryAttempts)
	return t
}

func (t *Tally) add(r *kgo.Record) {
	a, err := topics.ParseAttempt(r)
	if err != nil {
		t.log.Warn("delivery attempt record skipped", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
		return
	}
	tot := t.subs[a.Subscription]
	if tot == nil {
		tot = new(Totals)
		t.subs[a.Subscription] = tot
	}
	tot.add(a)
}

// Totals returns the totals of subscription id.
func (t *Tally) Totals(id string) (out Totals) {
	t.View(func() {
		if tot := t.subs[id]; tot != nil {
			out = *tot
		}
	})
	return out
}

// Sum returns the totals of every subscription together, deleted ones
// included.
func (t *Tally) Sum() (sum Totals) {
	t.View(func() {
		for _, tot := range t.subs {
			sum.Delivered += tot.Delivered
			sum.Failed += tot.Failed
			sum.DeadLettered += tot.DeadLettered
		}
	})
	return sum
}
