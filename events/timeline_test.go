package events

import (
	"testing"
	"time"

	"github.com/hookstream/hookstream/attempts"
)

// TestTimeline: a story's steps in time order, with the words events get
// prints, failures marked.
func TestTimeline(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }
	s := Story{
		ID: "github:e1", Partition: 3, Offset: 41, ReceivedAt: at(0), ProcessedAt: *at(time.Millisecond),
		Events:     &Position{Partition: 3, Offset: 17},
		Duplicates: Count{Count: 2, LastAt: at(time.Minute)},
		Deliveries: []Delivery{{
			Subscription: "sub_a", Attempts: 3, DeadLetteredAt: at(3 * time.Second),
			Recent: []attempts.Attempt{
				{Attempt: 1, Outcome: "failed", Status: 500, LatencyMS: 2.5, Error: "busy", At: *at(time.Second)},
				{Attempt: 1, Outcome: "delivered", Status: 204, LatencyMS: 1, At: *at(2 * time.Minute), Resend: true},
			},
		}},
	}
	want := []Step{
		{At: *at(0), What: "received by ingest (ingest partition 3, offset 41)"},
		{At: *at(time.Millisecond), What: "processed: emitted to the events topic (partition 3, offset 17)"},
		{At: *at(time.Second), What: "sub_a: attempt 1 failed, status 500, 2.5 ms: busy", Subscription: "sub_a", Failed: true},
		{At: *at(3 * time.Second), What: "sub_a: dead-lettered after 3 attempts", Subscription: "sub_a", Failed: true},
		{At: *at(time.Minute), What: "duplicate dropped (2 in all, this the last)"},
		{At: *at(2 * time.Minute), What: "sub_a: resend, attempt 1 delivered, status 204, 1.0 ms", Subscription: "sub_a"},
	}
	got := s.Timeline()
	if len(got) != len(want) {
		t.Fatalf("timeline: got %d steps %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("step %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	s.Failure, s.Deliveries, s.Duplicates = &Failure{Stage: "decode", Error: "not JSON"}, nil, Count{}
	if got := s.Timeline(); len(got) != 2 || got[1].What != "processing failed at stage decode: not JSON (dead-lettered to the DLQ)" || !got[1].Failed {
		t.Errorf("timeline of a failed event: got %+v", got)
	}
}
