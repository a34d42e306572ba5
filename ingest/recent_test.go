package ingest

import (
	"fmt"
	"testing"
	"time"
)

// held is how many keys r holds in memory.
func (r *recentIDs) held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.cur) + len(r.prev)
}

// TestRecentIDsWindow: an accepted id is remembered for the window and
// forgotten past it.
func TestRecentIDsWindow(t *testing.T) {
	start := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	r := newRecentIDs(100, 10*time.Minute)
	if r.seen("github:1", start) {
		t.Fatal("seen before it was added")
	}
	r.add("github:1", start)
	for _, c := range []struct {
		after time.Duration
		want  bool
	}{{0, true}, {10*time.Minute - time.Nanosecond, true}, {10 * time.Minute, false}, {25 * time.Minute, false}} {
		if got := r.seen("github:1", start.Add(c.after)); got != c.want {
			t.Errorf("%v after: seen %v, want %v", c.after, got, c.want)
		}
	}
	// Adding newer ids moves generations on; an id stays remembered for
	// its whole window whatever comes after it.
	r.add("github:2", start.Add(9*time.Minute))
	r.add("github:3", start.Add(15*time.Minute))
	if !r.seen("github:2", start.Add(18*time.Minute)) {
		t.Error("github:2 forgotten within its window")
	}
	if r.seen("github:1", start.Add(15*time.Minute)) {
		t.Error("github:1 remembered past its window")
	}
}

// TestRecentIDsCapacity: at most the capacity is held, and the newest
// half of it is always remembered.
func TestRecentIDsCapacity(t *testing.T) {
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	const capacity = 100
	r := newRecentIDs(capacity, time.Hour)
	for i := range 1000 {
		r.add(fmt.Sprintf("s:%d", i), now)
		if held := r.held(); held > capacity {
			t.Fatalf("after %d adds: %d ids held, want at most %d", i+1, held, capacity)
		}
	}
	for i := 1000 - capacity/2; i < 1000; i++ {
		if !r.seen(fmt.Sprintf("s:%d", i), now) {
			t.Errorf("s:%d, among the newest %d, forgotten", i, capacity/2)
		}
	}
	if r.seen("s:0", now) {
		t.Error("s:0 remembered beyond the capacity")
	}
}
