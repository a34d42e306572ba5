package dispatch

import (
	"fmt"
	"slices"
	"testing"
)

// TestInTurn: with more subscriptions moved than the budget, each turn
// commits the next ones after where the last ended, wrapping around, so
// every cursor is committed within ⌈moved/budget⌉ turns; with fewer,
// every one at once.
func TestInTurn(t *testing.T) {
	var ids []string
	for i := range 250 {
		ids = append(ids, fmt.Sprintf("sub_%03d", i))
	}
	seen := make(map[string]int)
	after := ""
	for turn := range 3 {
		var picked []string
		picked, after = inTurn(ids, after, 100)
		if len(picked) != 100 {
			t.Fatalf("turn %d: %d picked, want 100", turn, len(picked))
		}
		for _, id := range picked {
			seen[id]++
		}
	}
	for _, id := range ids {
		if n := seen[id]; n < 1 || n > 2 {
			t.Errorf("%s committed %d times in 3 turns of 100 among 250, want 1 or 2", id, n)
		}
	}
	// A subscription gone since (the last one picked deleted): the next
	// turn goes on after where it was.
	picked, _ := inTurn(slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == after }), after, 100)
	if picked[0] <= after && picked[0] != ids[0] {
		t.Errorf("after %s gone, the turn starts at %s, want the next after it", after, picked[0])
	}
	if few, last := inTurn(ids[:10], "sub_005", 100); len(few) != 10 || last != "sub_005" {
		t.Errorf("10 moved, budget 100: %d picked, last %q; want all 10 and the turn where it was", len(few), last)
	}
}
