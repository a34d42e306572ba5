// Package backoff paces the tries of an operation that keeps failing: the
// wait doubles after each try, up to a cap. It owns no retry policy (what
// is worth trying again, how often): callers loop and decide.
package backoff

import (
	"context"
	"time"
)

// Backoff is the wait before the next try. Build it with New; it is not
// safe for concurrent use.
type Backoff struct {
	initial, next, max time.Duration
}

// New returns a Backoff that first waits initial, then twice as long each
// time, never more than max.
func New(initial, max time.Duration) *Backoff {
	return &Backoff{initial: initial, next: initial, max: max}
}

// Reset makes the next wait the initial one again: the operation worked
// for a while before it failed.
func (b *Backoff) Reset() { b.next = b.initial }

// Next is how long the next Wait waits.
func (b *Backoff) Next() time.Duration { return b.next }

// Wait waits Next, then doubles it up to the cap. It returns false, at
// once, when ctx ends first.
func (b *Backoff) Wait(ctx context.Context) bool {
	t := time.NewTimer(b.next)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	b.next = min(2*b.next, b.max)
	return true
}
