package events

import (
	"fmt"
	"slices"
	"time"

	"github.com/hookstream/hookstream/topics"
)

// Step is one line of an event's story in time order: what hookstream
// events get prints in its table, and the console shows as a timeline.
type Step struct {
	At   time.Time `json:"at"`
	What string    `json:"what"`
	// Subscription is the subscription of a delivery's step, else empty.
	Subscription string `json:"subscription,omitempty"`
	// Failed marks a failure: processing failed, an attempt that did not
	// deliver, a dead letter.
	Failed bool `json:"failed,omitempty"`
}

// Timeline is the story's steps in time order (stable: steps of one
// instant keep the story's order): received, processed or failed, the
// last duplicate and replay, and each delivery's recent attempts and dead
// letter.
func (s Story) Timeline() []Step {
	var steps []Step
	add := func(at *time.Time, sub string, failed bool, format string, args ...any) {
		if at != nil {
			steps = append(steps, Step{At: *at, What: fmt.Sprintf(format, args...), Subscription: sub, Failed: failed})
		}
	}
	add(s.ReceivedAt, "", false, "received by ingest (ingest partition %d, offset %d)", s.Partition, s.Offset)
	if s.Failure != nil {
		add(&s.ProcessedAt, "", true, "processing failed at stage %s: %s (dead-lettered to the DLQ)", s.Failure.Stage, s.Failure.Error)
	} else {
		add(&s.ProcessedAt, "", false, "processed: emitted to the events topic (partition %d%s)", s.Partition, offsetOf(s.Events, s.Replays.LastAt == nil))
	}
	add(s.Duplicates.LastAt, "", false, "duplicate dropped (%d in all, this the last)", s.Duplicates.Count)
	add(s.Replays.LastAt, "", false, "replayed: emitted again after an offset reset (%d in all, this the last%s)", s.Replays.Count, offsetOf(s.Events, true))
	for _, d := range s.Deliveries {
		for _, a := range d.Recent {
			what := fmt.Sprintf("%s: attempt %d %s", d.Subscription, a.Attempt, a.Outcome)
			if a.Resend {
				what = fmt.Sprintf("%s: resend, attempt %d %s", d.Subscription, a.Attempt, a.Outcome)
			}
			if a.Status != 0 {
				what += fmt.Sprintf(", status %d", a.Status)
			}
			what += fmt.Sprintf(", %.1f ms", a.LatencyMS)
			if a.Error != "" {
				what += ": " + a.Error
			}
			steps = append(steps, Step{At: a.At, What: what, Subscription: d.Subscription, Failed: a.Outcome != topics.OutcomeDelivered})
		}
		add(d.DeadLetteredAt, d.Subscription, true, "%s: dead-lettered after %d attempts", d.Subscription, d.Attempts)
	}
	slices.SortStableFunc(steps, func(a, b Step) int { return a.At.Compare(b.At) })
	return steps
}

// offsetOf is ", offset O" of an events record, when known and wanted.
func offsetOf(p *Position, want bool) string {
	if p == nil || !want {
		return ""
	}
	return fmt.Sprintf(", offset %d", p.Offset)
}
