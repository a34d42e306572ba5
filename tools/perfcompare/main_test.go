package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookstream/hookstream/internal/loadgen"
	"github.com/hookstream/hookstream/tools/internal/harness"
)

func TestPipelineOf(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after harness.Offsets
		want          Pipeline
		sustained     float64
	}{
		{"kept up", harness.Offsets{End: 100, Committed: 100}, harness.Offsets{End: 10100, Committed: 10000},
			Pipeline{Accepted: 10000, Processed: 9900, AcceptedPerSecond: 1000, ProcessedPerSecond: 990, LagBefore: 0, LagAfter: 100, Flat: true}, 990},
		{"caught up a backlog", harness.Offsets{End: 5000, Committed: 1000}, harness.Offsets{End: 15000, Committed: 15000},
			Pipeline{Accepted: 10000, Processed: 14000, AcceptedPerSecond: 1000, ProcessedPerSecond: 1400, LagBefore: 4000, LagAfter: 0, Flat: true}, 1000},
		{"fell behind", harness.Offsets{End: 0, Committed: 0}, harness.Offsets{End: 10000, Committed: 6000},
			Pipeline{Accepted: 10000, Processed: 6000, AcceptedPerSecond: 1000, ProcessedPerSecond: 600, LagBefore: 0, LagAfter: 4000, Flat: false}, 600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := pipelineOf(tc.before, tc.after, 10*time.Second)
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if s := got.Sustained(); s != tc.sustained {
				t.Errorf("sustained: got %v, want %v", s, tc.sustained)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	c := comparison{servers: servers}
	for i, rate := range []float64{300, 100, 200} {
		c.Rounds = append(c.Rounds,
			Round{Server: "thin", Report: loadgen.Report{PerSecond: 2 * rate, Latency: loadgen.Percentiles{P99: time.Duration(rate) * time.Millisecond}}},
			Round{Server: "ingest", Report: loadgen.Report{PerSecond: rate, Errors: 1, Status: map[string]int64{"202": 5, "503": 2}}},
			Round{Server: "all", Report: loadgen.Report{PerSecond: 999},
				Pipeline: &Pipeline{AcceptedPerSecond: rate, ProcessedPerSecond: rate / 2, Flat: i != 1}},
		)
	}
	c.summarize()
	thin, ingest, all := c.server("thin"), c.server("ingest"), c.server("all")
	if thin.Rate != 400 || thin.P99 != 200*time.Millisecond || thin.Ratio != 1 {
		t.Errorf("thin: got rate %v, p99 %v, ratio %v, want the medians 400, 200ms and 1", thin.Rate, thin.P99, thin.Ratio)
	}
	if ingest.Ratio != 0.5 || ingest.Errors != 9 {
		t.Errorf("ingest: got ratio %v, errors %d, want 0.5 and 9 (3 transport errors, 6 503s)", ingest.Ratio, ingest.Errors)
	}
	if all.Rate != 100 || all.AcceptedPerSecond != 200 || all.ProcessedPerSecond != 100 || *all.Flat {
		t.Errorf("all: got rate %v, accepted %v, processed %v, flat %v; want the sustained median 100, 200, 100, not flat",
			all.Rate, all.AcceptedPerSecond, all.ProcessedPerSecond, *all.Flat)
	}
}

// TestSummarizeTraced: a traced server's ratio is to the same server
// with tracing off, and its spans are the median of its rounds'.
func TestSummarizeTraced(t *testing.T) {
	c := comparison{servers: append(slices.Clone(servers), tracedServers("http://127.0.0.1:4318")...)}
	for _, rate := range []float64{100, 300, 200} {
		c.Rounds = append(c.Rounds,
			Round{Server: "thin", Report: loadgen.Report{PerSecond: 4 * rate}},
			Round{Server: "ingest", Report: loadgen.Report{PerSecond: 2 * rate}, CPUPerRequest: 40 * time.Microsecond},
			Round{Server: "ingest-t100", Report: loadgen.Report{PerSecond: rate}, SpansPerSecond: 3 * rate, CPUPerRequest: time.Duration(rate) * 300 * time.Nanosecond},
			Round{Server: "all", Report: loadgen.Report{PerSecond: 999}, Pipeline: &Pipeline{AcceptedPerSecond: rate, ProcessedPerSecond: rate, Flat: true}},
		)
	}
	c.summarize()
	traced := c.server("ingest-t100")
	if traced.Off != "ingest" || traced.RatioToOff != 0.5 || traced.Ratio != 0.25 || traced.SpansPerSecond != 600 || traced.CPURatioToOff != 1.5 {
		t.Errorf("ingest-t100: got off %q, ratio to off %v, to thin %v, spans/s %v, CPU to off %v; want ingest, 0.5, 0.25, 600, 1.5",
			traced.Off, traced.RatioToOff, traced.Ratio, traced.SpansPerSecond, traced.CPURatioToOff)
	}
	if off := c.server("ingest"); off.RatioToOff != 0 || off.SpansPerSecond != 0 {
		t.Errorf("ingest: got ratio to off %v, spans/s %v; want neither", off.RatioToOff, off.SpansPerSecond)
	}
	var out strings.Builder
	if err := c.printTraced(&out); err != nil || !strings.Contains(out.String(), "ingest-t100") || strings.Contains(out.String(), "ingest: ") {
		t.Errorf("printTraced: got %v\n%s\nwant the traced servers only", err, out.String())
	}
}

// TestPerEvent: CPU time is shared out per event.
func TestPerEvent(t *testing.T) {
	if perEvent(time.Second, 0) != 0 || perEvent(time.Second, 4) != 250*time.Millisecond {
		t.Errorf("no events, 4 events: got %v, %v; want 0, 250ms", perEvent(time.Second, 0), perEvent(time.Second, 4))
	}
}
