package topics

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Outcomes of a delivery attempt record.
const (
	// OutcomeDelivered is a real attempt the subscriber answered 2xx.
	OutcomeDelivered = "delivered"
	// OutcomeFailed is a real attempt that failed; a retrying or
	// dead_lettered record follows once the dispatcher decided.
	OutcomeFailed = "failed"
	// OutcomeRetrying says the event waits in the retry topic until DueAt.
	OutcomeRetrying = "retrying"
	// OutcomeDeadLettered says the event went to the delivery DLQ after N
	// attempts.
	OutcomeDeadLettered = "dead_lettered"
)

// Attempt is a record of <prefix>.delivery-attempts: one real delivery
// attempt of an event to a subscription (Outcome delivered or failed), or
// what the dispatcher did after a failed one (retrying, dead_lettered).
// Its key is the event key <source>:<event-id>, so a producer's default
// partitioner puts it in the partition of the event's ingest and events
// records. The value is short-keyed JSON, about 100 bytes.
type Attempt struct {
	Subscription string
	EventID      string // the event key, <source>:<event-id>
	// N is the attempt number, from 1; for retrying and dead_lettered,
	// the number of the attempt that failed last.
	N       int
	Outcome string
	// Status is the subscriber's HTTP status, 0 without a response.
	Status  int
	Latency time.Duration
	Error   string
	// At is when the attempt ended, or when the decision was made.
	At time.Time
	// DueAt is when a retrying event is due again.
	DueAt time.Time
	// Resend says the attempt is of a delivery an operator asked for
	// again (events resend), its attempts numbered from 1 anew.
	Resend bool
}

// attemptJSON is the wire form of an Attempt.
type attemptJSON struct {
	Subscription string     `json:"sub"`
	N            int        `json:"n"`
	Outcome      string     `json:"o"`
	Status       int        `json:"st,omitempty"`
	Micros       int64      `json:"us,omitempty"`
	Error        string     `json:"err,omitempty"`
	At           time.Time  `json:"at"`
	DueAt        *time.Time `json:"due,omitempty"`
	Resend       bool       `json:"rs,omitempty"`
}

// Record encodes the attempt as a record of topic.
func (a *Attempt) Record(topic Topic) *kgo.Record {
	v := attemptJSON{
		Subscription: a.Subscription,
		N:            a.N,
		Outcome:      a.Outcome,
		Status:       a.Status,
		Micros:       a.Latency.Microseconds(),
		Error:        a.Error,
		At:           a.At.UTC(),
		Resend:       a.Resend,
	}
	if !a.DueAt.IsZero() {
		due := a.DueAt.UTC()
		v.DueAt = &due
	}
	value, _ := json.Marshal(v) // strings and times in range: cannot fail
	return &kgo.Record{Topic: string(topic), Key: []byte(a.EventID), Value: value}
}

// ParseAttempt decodes an attempts record. A record without a key,
// subscription, time or known outcome is an error.
func ParseAttempt(r *kgo.Record) (*Attempt, error) {
	var v attemptJSON
	if err := json.Unmarshal(r.Value, &v); err != nil {
		return nil, fmt.Errorf("decode attempt: %w", err)
	}
	switch {
	case len(r.Key) == 0:
		return nil, errors.New("decode attempt: no key")
	case v.Subscription == "":
		return nil, errors.New("decode attempt: no subscription")
	case v.At.IsZero():
		return nil, errors.New("decode attempt: no time")
	case v.N < 0 || v.Status < 0 || v.Micros < 0 || v.Micros > math.MaxInt64/int64(time.Microsecond):
		return nil, errors.New("decode attempt: number out of range")
	case !inRange(v.At) || v.DueAt != nil && !inRange(*v.DueAt):
		return nil, errors.New("decode attempt: time out of range")
	}
	switch v.Outcome {
	case OutcomeDelivered, OutcomeFailed, OutcomeRetrying, OutcomeDeadLettered:
	default:
		return nil, fmt.Errorf("decode attempt: unknown outcome %q", v.Outcome)
	}
	a := &Attempt{
		Subscription: v.Subscription,
		EventID:      string(r.Key),
		N:            v.N,
		Outcome:      v.Outcome,
		Status:       v.Status,
		Latency:      time.Duration(v.Micros) * time.Microsecond,
		Error:        v.Error,
		At:           v.At.UTC(),
		Resend:       v.Resend,
	}
	if v.DueAt != nil {
		a.DueAt = v.DueAt.UTC()
	}
	return a, nil
}

// inRange reports whether t, in UTC, has a year RFC 3339 can write.
func inRange(t time.Time) bool {
	y := t.UTC().Year()
	return y >= 0 && y <= 9999
}
