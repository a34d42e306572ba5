package main

import (
	"reflect"
	"testing"
	"time"
)

// TestPlannerSeeded checks that a seed fixes the fault schedule and that
// the first faults cover every kind.
func TestPlannerSeeded(t *testing.T) {
	procs := []string{"ingest-1", "processor-1", "dispatcher-1"}
	gap := [2]time.Duration{time.Second, 5 * time.Second}
	draw := func(seed uint64, broker string, nodes int) []fault {
		p := newPlanner(seed, broker, procs, []string{"processor-1"}, nodes, gap)
		var out []fault
		for range 30 {
			out = append(out, p.next())
		}
		return out
	}
	for _, tt := range []struct {
		broker string
		nodes  int
	}{{"kfake", 1}, {"kafka3", 3}} {
		t.Run(tt.broker, func(t *testing.T) {
			a, b := draw(42, tt.broker, tt.nodes), draw(42, tt.broker, tt.nodes)
			if !reflect.DeepEqual(a, b) {
				t.Errorf("seed 42 twice: got %v and %v, want the same schedule", a, b)
			}
			if c := draw(43, tt.broker, tt.nodes); reflect.DeepEqual(a, c) {
				t.Errorf("seeds 42 and 43: got the same schedule %v, want different ones", a)
			}
			base := len(newPlanner(42, tt.broker, procs, procs, tt.nodes, gap).base)
			seen := map[string]bool{}
			for _, f := range a[:base] {
				seen[f.Kind] = true
				if f.Gap < gap[0] || f.Gap > gap[1] {
					t.Errorf("fault %v: gap outside %v", f, gap)
				}
			}
			for _, k := range []string{faultKill, faultStop, faultRolling, faultBroker, faultPoison, faultToggle, faultReplay, faultReplayP, faultRedrive, faultStorm, faultDeep, faultRogue, faultHeavyExpr} {
				if !seen[k] {
					t.Errorf("first %d faults %v: no %s", base, a[:base], k)
				}
			}
		})
	}
}
