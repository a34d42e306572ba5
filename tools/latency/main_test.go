package main

import (
	"testing"
	"time"

	"github.com/hookstream/hookstream/internal/loadgen"
)

// TestStagesOf: a trace's stages come from its receiver span, its
// committed processing span and its first successful delivery; traces
// missing one of them are not counted.
func TestStagesOf(t *testing.T) {
	ms := func(n int) uint64 { return uint64(1_000_000_000_000 + n*int(time.Millisecond)) }
	spans := []span{
		{traceID: "a", kind: kindServer, ok: true, start: ms(0), end: ms(5)},
		{traceID: "a", kind: kindConsumer, ok: false, start: ms(10), end: ms(40)}, // aborted: its record came again
		{traceID: "a", kind: kindConsumer, ok: true, start: ms(50), end: ms(80)},
		{traceID: "a", kind: kindClient, ok: false, start: ms(81), end: ms(90)}, // a failed attempt
		{traceID: "a", kind: kindClient, ok: true, start: ms(95), end: ms(100)},
		{traceID: "b", kind: kindServer, ok: true, start: ms(0), end: ms(2)}, // not delivered yet
		{traceID: "b", kind: kindConsumer, ok: true, start: ms(3), end: ms(4)},
	}
	got := stagesOf(spans)
	want := map[string]time.Duration{"ack": 5 * time.Millisecond, "received→processed": 50 * time.Millisecond,
		"processed→committed": 30 * time.Millisecond, "committed→delivered": 20 * time.Millisecond, "end to end": 100 * time.Millisecond}
	if got.Traced != 1 || len(got.Stages) != len(want) {
		t.Fatalf("got %+v, want one trace with %d stages", got, len(want))
	}
	for _, s := range got.Stages {
		if s.P50 != want[s.Name] || s.P99 != want[s.Name] {
			t.Errorf("%s: got p50 %v p99 %v, want %v", s.Name, s.P50, s.P99, want[s.Name])
		}
	}
}

func TestQuantile(t *testing.T) {
	xs := make([]float64, 0, 200)
	for i := 200; i >= 1; i-- {
		xs = append(xs, float64(i))
	}
	if q := quantile(xs, 0.5); q != 100 {
		t.Errorf("p50 of 1..200: got %v, want 100", q)
	}
	if q := quantile(xs, 0.99); q != 198 {
		t.Errorf("p99 of 1..200: got %v, want 198", q)
	}
	if q := quantile(nil, 0.99); q != 0 {
		t.Errorf("p99 of none: got %v, want 0", q)
	}
}

// TestSummarizeAgainstCeiling: each round's end to end is set against the
// bare pipeline's of the same round, and the medians of those ratios are
// reported, not a ratio of medians taken from different rounds.
func TestSummarizeAgainstCeiling(t *testing.T) {
	m := func(e2e50, e2e99, c50, c99 time.Duration) Measurement {
		x := Measurement{Rate: 200, Ceiling: &Ceiling{EndToEnd: Stage{P50: c50, P99: c99}}}
		x.Bench.EndToEnd = &loadgen.Percentiles{P50: e2e50, P99: e2e99}
		return x
	}
	r := result{Measurements: []Measurement{
		m(100*time.Millisecond, 400*time.Millisecond, 100*time.Millisecond, 200*time.Millisecond), // 1×, 2×
		m(900*time.Millisecond, 900*time.Millisecond, 300*time.Millisecond, 900*time.Millisecond), // 3×, 1×
		m(200*time.Millisecond, 300*time.Millisecond, 100*time.Millisecond, 200*time.Millisecond), // 2×, 1.5×
	}}
	r.summarize([]float64{200})
	if s := r.Summary[0]; s.ToCeiling50 != 2 || s.ToCeiling99 != 1.5 {
		t.Errorf("against the ceiling: p50 %v×, p99 %v×; want the medians of each round's, 2× and 1.5×", s.ToCeiling50, s.ToCeiling99)
	}
}
