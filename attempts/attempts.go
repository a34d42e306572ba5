// Package attempts reads <prefix>.delivery-attempts, the durable history
// of every delivery attempt the dispatchers made: a subscription's
// attempts, newest first, by a bounded scan (List), and each
// subscription's totals, followed from the topic's start (Tally).
//
// The topic keeps attempts as long as an event id is remembered
// (HOOKSTREAM_DEDUP_TTL), so what this package answers survives restarts
// of every process but covers that window only. It refuses to write
// attempts (the dispatcher does) or to judge them.
package attempts

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// Attempt is one record of the attempts topic as the API shows it, in a
// subscription's attempts and in an event's story, where EventID and
// Subscription are left empty (the story and its delivery name them).
type Attempt struct {
	EventID      string `json:"event_id,omitempty"`
	Subscription string `json:"subscription,omitempty"`
	Attempt      int    `json:"attempt"`
	// Outcome is delivered, failed, retrying or dead_lettered.
	Outcome   string     `json:"outcome"`
	Status    int        `json:"status"`
	LatencyMS float64    `json:"latency_ms"`
	Error     string     `json:"error,omitempty"`
	At        time.Time  `json:"at"`
	DueAt     *time.Time `json:"due_at,omitempty"`
	// Resend says the attempt is of a delivery an operator asked for
	// again (events resend).
	Resend bool `json:"resend,omitempty"`
}

// FromRecord is the API form of an attempts record.
func FromRecord(a *topics.Attempt) Attempt {
	out := Attempt{
		EventID:      a.EventID,
		Subscription: a.Subscription,
		Attempt:      a.N,
		Outcome:      a.Outcome,
		Status:       a.Status,
		LatencyMS:    float64(a.Latency.Microseconds()) / 1000,
		Error:        a.Error,
		At:           a.At,
		Resend:       a.Resend,
	}
	if !a.DueAt.IsZero() {
		due := a.DueAt
		out.DueAt = &due
	}
	return out
}

// Query selects attempts.
type Query struct {
	Subscription string
	// EventID keeps the attempts of one event key; only its partition is
	// read.
	EventID string
	// Status keeps an outcome (delivered, failed, retrying,
	// dead_lettered) or, given as a number, an HTTP status.
	Status string
	// Since starts the scan at the first record written at or after it
	// (ListOffsets by time).
	Since time.Time
	// Limit keeps the newest Limit attempts; 0 means 50.
	Limit int
}

// MaxScan bounds the records List reads per partition, counted back from
// the end: narrow a query on a busy topic with Since or EventID.
const MaxScan = 100_000

// ValidStatus reports whether s can be a Query's Status.
func ValidStatus(s string) bool {
	switch s {
	case "", topics.OutcomeDelivered, topics.OutcomeFailed, topics.OutcomeRetrying, topics.OutcomeDeadLettered:
		return true
	}
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0 && n < 1000
}

func (q Query) match(a *topics.Attempt) bool {
	switch {
	case q.Subscription != "" && a.Subscription != q.Subscription,
		q.EventID != "" && a.EventID != q.EventID,
		!q.Since.IsZero() && a.At.Before(q.Since):
		return false
	case q.Status == "":
		return true
	case q.Status == a.Outcome:
		return true
	}
	n, err := strconv.Atoi(q.Status)
	return err == nil && n == a.Status && (a.Outcome == topics.OutcomeDelivered || a.Outcome == topics.OutcomeFailed)
}

// List returns the newest attempts q selects on c, newest first: the
// shared client answers offset queries; the reader is a client of c's
// own, closed before List returns.
func List(ctx context.Context, c topics.Cluster, q Query) ([]Attempt, error) {
	if q.Limit <= 0 {
		q.Limit = 50
	}
	// From Since (or the start), at most MaxScan records back from each
	// partition's end, of the event's partition only when q names one.
	span := topics.Span{From: topics.At(q.Since), Last: MaxScan}
	if q.EventID != "" {
		span.Key = []byte(q.EventID)
	}
	var out []Attempt
	err := c.Read(ctx, c.Names.DeliveryAttempts, span, func(r *kgo.Record) bool {
		a, err := topics.ParseAttempt(r)
		if err == nil && q.match(a) {
			out = append(out, FromRecord(a))
		}
		return true
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("attempts: %w", err)
	}
	slices.SortStableFunc(out, func(a, b Attempt) int {
		return cmp.Or(b.At.Compare(a.At), cmp.Compare(b.Attempt, a.Attempt))
	})
	if len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, nil
}
