package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCheckRevocations checks invariant 9 on a timeline of revocations
// and probes: a revoked token may still be accepted within 5 s of its
// revocation, never after; an unanswered or refused probe is no
// acceptance.
func TestCheckRevocations(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	revoked := map[string]time.Time{"tok_a": t0, "tok_b": t0.Add(10 * time.Second)}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, c := range []struct {
		name         string
		probes       []probe
		late, tested int
		says         string
	}{
		{name: "no probes"},
		{name: "accepted within the bound, refused after", tested: 2, probes: []probe{
			{Token: "tok_a", Instance: "ingest-1", Sent: at(time.Second), Status: 200},
			{Token: "tok_a", Instance: "ingest-2", Sent: at(5 * time.Second), Status: 200},
			{Token: "tok_a", Instance: "processor-1", Sent: at(6 * time.Second), Status: 401},
			{Token: "tok_b", Instance: "processor-1", Sent: at(30 * time.Second), Status: 401},
		}},
		{name: "unanswered probes test nothing", probes: []probe{
			{Token: "tok_a", Instance: "processor-2", Sent: at(8 * time.Second), Status: 0},
			{Token: "tok_b", Instance: "processor-2", Sent: at(20 * time.Second), Status: 503},
		}},
		{name: "accepted past the bound", late: 1, tested: 2, says: "tok_b accepted by dispatcher-1 6.5s after its revocation", probes: []probe{
			{Token: "tok_a", Instance: "dispatcher-1", Sent: at(7 * time.Second), Status: 401},
			{Token: "tok_b", Instance: "dispatcher-1", Sent: at(16500 * time.Millisecond), Status: 200},
		}},
		{name: "a probe before its token's revocation", probes: []probe{
			{Token: "tok_b", Instance: "ingest-1", Sent: at(9 * time.Second), Status: 200},
			{Token: "tok_unknown", Instance: "ingest-1", Sent: at(time.Minute), Status: 200},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := checkRevocations(revoked, c.probes)
			if len(got.Late) != c.late || got.Tested != c.tested || got.Tokens != 2 || got.Probes != len(c.probes) {
				t.Errorf("got %+v, want %d late of %d tested, 2 tokens, %d probes", got, c.late, c.tested, len(c.probes))
			}
			if c.says != "" && !slices.ContainsFunc(got.Late, func(s string) bool { return strings.Contains(s, c.says) }) {
				t.Errorf("late: got %q, want one saying %q", got.Late, c.says)
			}
			failed := slices.ContainsFunc(outcome{Revocation: got}.failures(), func(f string) bool { return strings.HasPrefix(f, "invariant 9:") })
			if failed != (c.late > 0) {
				t.Errorf("failures of %+v: invariant 9 failed %v, want %v", got, failed, c.late > 0)
			}
		})
	}
}
