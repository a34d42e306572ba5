package attempts

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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
	opts  []kgo.Opt
	topic topics.Topic
	log   *slog.Logger

	mu     sync.Mutex
	subs   map[string]*Totals
	next   map[int32]int64 // per partition, the offset after the last record read
	change chan struct{}   // closed and replaced whenever next moves
}

// NewTally builds a tally of names' attempts topic; opts are the client
// options of the process. It does no I/O.
func NewTally(opts []kgo.Opt, names topics.Names, log *slog.Logger) *Tally {
	return &Tally{
		opts:   opts,
		topic:  names.DeliveryAttempts,
		log:    log.With("component", "attempts"),
		subs:   make(map[string]*Totals),
		next:   make(map[int32]int64),
		change: make(chan struct{}),
	}
}

// Run reads the topic until ctx ends.
func (t *Tally) Run(ctx context.Context) error {
	cl, err := kgo.NewClient(append(slices.Clone(t.opts),
		kgo.ConsumeTopics(string(t.topic)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return fmt.Errorf("attempts: client: %w", err)
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(_ string, p int32, err error) {
			t.log.Warn("reading delivery attempts", "topic", t.topic, "partition", p, "err", err)
		})
		t.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			t.next[r.Partition] = r.Offset + 1
			if r.Attrs.IsControl() {
				return
			}
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
		})
		close(t.change)
		t.change = make(chan struct{})
		t.mu.Unlock()
	}
}

// Totals returns the totals of subscription id.
func (t *Tally) Totals(id string) Totals {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tot := t.subs[id]; tot != nil {
		return *tot
	}
	return Totals{}
}

// Sum returns the totals of every subscription together, deleted ones
// included.
func (t *Tally) Sum() Totals {
	t.mu.Lock()
	defer t.mu.Unlock()
	var sum Totals
	for _, tot := range t.subs {
		sum.Delivered += tot.Delivered
		sum.Failed += tot.Failed
		sum.DeadLettered += tot.DeadLettered
	}
	return sum
}

// CatchUp waits until the tally has read every attempt written before it
// was called, as cl's end offsets say, or ctx ends.
func (t *Tally) CatchUp(ctx context.Context, cl *kgo.Client) error {
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, string(t.topic))
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("attempts: end offsets of %s: %w", t.topic, err)
	}
	for {
		t.mu.Lock()
		behind, change := false, t.change
		ends.Each(func(o kadm.ListedOffset) { behind = behind || t.next[o.Partition] < o.Offset })
		t.mu.Unlock()
		if !behind {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("attempts: still reading %s: %w", t.topic, ctx.Err())
		case <-change:
		}
	}
}
