package dispatch

import (
	"context"
	"sync"
	"time"
)

// circuit is the circuit breaker of one subscription. After threshold
// consecutive failed attempts it opens for cooldown: it refuses attempts,
// and a refused attempt is no attempt at all: its caller waits and asks
// again with the same attempt number. Once cooldown has passed one probe
// goes; its success closes the circuit, its failure opens it again.
//
// The probe goes to the highest attempt number refused while the circuit
// was open (the others wait a little longer): the event nearest its dead
// letter gets the first chance, and a subscriber that fails the early
// tries of every event is not judged on early tries alone.
type circuit struct {
	threshold int
	cooldown  time.Duration

	mu        sync.Mutex
	failures  int       // consecutive failed attempts
	openUntil time.Time // zero while closed
	probing   bool
	claim     int           // highest attempt refused since the last probe
	closed    chan struct{} // closed when the circuit closes
}

// claimGrace bounds how long the highest refused attempt keeps the probe
// for itself before any attempt may take it.
func (c *circuit) claimGrace() time.Duration { return min(c.cooldown/2, time.Second) }

func newCircuit(threshold int, cooldown time.Duration) *circuit {
	c := &circuit{threshold: threshold, cooldown: cooldown, closed: make(chan struct{})}
	close(c.closed)
	return c
}

// admit reports whether attempt n may go now, and whether it is the probe
// of an open circuit. When refused, retryAt is when to ask again.
func (c *circuit) admit(now time.Time, n int) (ok, probe bool, retryAt time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.openUntil.IsZero():
		return true, false, time.Time{}
	case c.probing:
		c.claim = max(c.claim, n)
		return false, false, now.Add(c.cooldown)
	case now.Before(c.openUntil):
		c.claim = max(c.claim, n)
		return false, false, c.openUntil
	case n < c.claim && now.Before(c.openUntil.Add(c.claimGrace())):
		return false, false, c.openUntil.Add(c.claimGrace())
	}
	c.probing, c.claim = true, 0
	return true, true, time.Time{}
}

// report records the outcome of an admitted attempt and says whether the
// circuit opened or closed because of it. A probe that fails after another
// attempt's success closed the circuit counts as any failure.
func (c *circuit) report(now time.Time, probe, ok bool) (opened, closed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if probe {
		c.probing = false
	}
	if ok {
		c.failures = 0
		return false, c.closeLocked()
	}
	c.failures++
	switch {
	case probe && !c.openUntil.IsZero():
		c.openUntil = now.Add(c.cooldown)
	case c.openUntil.IsZero() && c.failures >= c.threshold:
		c.openUntil = now.Add(c.cooldown)
		c.closed = make(chan struct{})
		return true, false
	}
	return false, false
}

// abandon gives back an admitted attempt that ended with no outcome (the
// dispatcher is stopping): it says nothing of the subscriber.
func (c *circuit) abandon(probe bool) {
	if !probe {
		return
	}
	c.mu.Lock()
	c.probing = false
	c.mu.Unlock()
}

// setCooldown changes the cooldown of the next opening (the
// subscription's schedule changed).
func (c *circuit) setCooldown(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cooldown = d
}

// reset closes the circuit and forgets its failures (an operator enabled
// the subscription again). It reports whether the circuit was open.
func (c *circuit) reset() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures = 0
	return c.closeLocked()
}

func (c *circuit) closeLocked() bool {
	if c.openUntil.IsZero() {
		return false
	}
	c.openUntil, c.probing, c.claim = time.Time{}, false, 0
	close(c.closed)
	return true
}

// isOpen reports whether the circuit refuses attempts.
func (c *circuit) isOpen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.openUntil.IsZero()
}

// wait returns at retryAt, when the circuit closes, or when ctx ends
// (false).
func (c *circuit) wait(ctx context.Context, retryAt time.Time) bool {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	t := time.NewTimer(time.Until(retryAt))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-closed:
	case <-t.C:
	}
	return true
}
