package ingest

import (
	"sync"
	"time"
)

// recentIDs remembers the keys of accepted events, for the duplicate fast
// path, in two generations of at most half the capacity each: keys go
// into the current one, which becomes the previous one (the previous one
// being dropped) once it is full or as old as the window. A key is found
// within its window, as long as fewer than half the capacity came after
// it. Two maps cost a map write per accepted event, where an LRU also
// moves list elements and expiry buckets.
type recentIDs struct {
	window time.Duration
	half   int

	mu      sync.Mutex
	cur     map[string]int64 // key → accepted at, Unix nanoseconds
	prev    map[string]int64
	started time.Time // of cur
}

func newRecentIDs(capacity int, window time.Duration) *recentIDs {
	half := max(1, capacity/2)
	return &recentIDs{window: window, half: half, cur: make(map[string]int64, half)}
}

// seen reports whether key was added less than the window before now.
func (r *recentIDs) seen(key string, now time.Time) bool {
	r.mu.Lock()
	at, ok := r.cur[key]
	if !ok {
		at, ok = r.prev[key]
	}
	r.mu.Unlock()
	return ok && now.UnixNano()-at < int64(r.window)
}

// add remembers key as accepted at now.
func (r *recentIDs) add(key string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.cur) >= r.half || now.Sub(r.started) >= r.window {
		r.prev, r.cur, r.started = r.cur, make(map[string]int64, r.half), now
	}
	r.cur[key] = now.UnixNano()
}
