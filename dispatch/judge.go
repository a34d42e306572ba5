package dispatch

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/subscriptions"
)

// item is an events record as a subscription judged it: whether it is
// delivered, and what a delivery of it alone sends.
type item struct {
	rec   *kgo.Record
	match bool
	part  []byte // the envelope, or the transform's JSON
	err   error  // the transform failed: dead-lettered
}

// judgeOne decides whether c receives e and renders it when it does, no
// part larger than limit (0: no limit). A filter failure is no match,
// reported to filterFailed.
func judgeOne(c *subscriptions.Compiled, e *subscriptions.Event, limit int, filterFailed func(error)) item {
	it := item{rec: e.Record()}
	d := c.Match(e)
	if d.Err != nil && filterFailed != nil {
		filterFailed(d.Err)
	}
	if it.match = d.Match; it.match {
		it.part, it.err = c.Render(e, limit)
	}
	return it
}

// judgeQueue judges a lane's queue on the lane's own goroutine: the
// items the subscription receives, and the last record of each shared
// read so the cursor moves past the others (control records included).
// A subscription whose expressions have spent their budget waits here,
// throttled; the items end early when ctx ends meanwhile.
func (w *worker) judgeQueue(ctx context.Context, c *subscriptions.Compiled, q []shared) []item {
	limit := w.d.maxBodyBytes()
	failed := func(err error) { w.d.filterFailed(w.st, err) }
	// Only expressions are metered: globs cost nothing worth a clock read.
	var throttled, seconds prometheus.Counter
	if c.Evaluates() {
		throttled, seconds = w.d.metrics.exprThrottled.WithLabelValues(w.sub.ID), w.d.metrics.exprSeconds.WithLabelValues(w.sub.ID)
	}
	var items []item
	for _, sh := range q {
		last := sh.recs[len(sh.recs)-1]
		for i, r := range sh.recs {
			if r.Attrs.IsControl() {
				continue
			}
			var start time.Time
			if seconds != nil {
				if !w.st.budget.take(ctx, throttled) {
					return items
				}
				start = time.Now()
			}
			it := judgeOne(c, sh.evs[i], limit, failed)
			if seconds != nil {
				spent := time.Since(start)
				w.st.budget.release(spent)
				seconds.Add(spent.Seconds())
			}
			if it.match || r == last {
				items = append(items, it)
			}
		}
		if n := len(items); n == 0 || items[n-1].rec != last {
			items = append(items, item{rec: last}) // a control record
		}
	}
	return items
}

// budget bounds the time one subscription's filter and transform spend
// on a dispatcher, across its lanes: share of a core over window. It is
// a bucket of evaluation time holding at most share × window, refilled
// at share of a second every second. An evaluation spends what it took
// (its wall time, which is CPU time for an expression: it neither
// blocks nor waits); a lane about to evaluate waits while the bucket is
// empty. A subscription past its share is throttled: its cursor falls
// behind, as a slow subscriber's does, and the other subscriptions keep
// the dispatcher's CPU. Its lanes evaluate one at a time, so within its
// share too a subscription takes at most one core, and one evaluation
// (bounded by the expression cost limit) takes the bucket at most that
// far below empty.
type budget struct {
	share  float64
	window time.Duration
	turn   chan struct{} // held while one of its lanes evaluates

	mu     sync.Mutex
	tokens time.Duration // evaluation time left; negative: owed
	at     time.Time     // when tokens was last refilled
	// throttled is when a lane last waited for the bucket.
	throttled time.Time
}

// newBudget returns a full bucket; share 0 means no bound.
func newBudget(share float64, window time.Duration) *budget {
	b := &budget{share: share, window: window, at: time.Now(), turn: make(chan struct{}, 1)}
	b.tokens = b.capacity()
	return b
}

func (b *budget) capacity() time.Duration {
	return time.Duration(b.share * float64(b.window))
}

// refill adds what accrued since the last refill, under mu.
func (b *budget) refill(now time.Time) {
	b.tokens = min(b.capacity(), b.tokens+time.Duration(b.share*float64(now.Sub(b.at))))
	b.at = now
}

// take returns once it is this lane's turn to evaluate and the bucket
// is not empty, adding the seconds it waited for the bucket to
// throttled; false when ctx ended first. release ends the turn.
func (b *budget) take(ctx context.Context, throttled interface{ Add(float64) }) bool {
	select {
	case b.turn <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	if !b.wait(ctx, throttled) {
		<-b.turn
		return false
	}
	return true
}

// release ends a turn that evaluated for d.
func (b *budget) release(d time.Duration) {
	if b.share > 0 {
		b.mu.Lock()
		b.refill(time.Now())
		b.tokens -= d
		b.mu.Unlock()
	}
	<-b.turn
}

// wait returns once the bucket is not empty, adding the seconds it
// waited to throttled; false when ctx ended first.
func (b *budget) wait(ctx context.Context, throttled interface{ Add(float64) }) bool {
	if b.share <= 0 {
		return true
	}
	for {
		b.mu.Lock()
		now := time.Now()
		b.refill(now)
		if b.tokens > 0 {
			b.mu.Unlock()
			return true
		}
		b.throttled = now
		// Until the bucket holds a tenth of its share of a second again:
		// waits of at least a few milliseconds, not a spin.
		need := -b.tokens + time.Duration(b.share*float64(100*time.Millisecond))
		b.mu.Unlock()
		d := time.Duration(float64(need) / b.share)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			throttled.Add(time.Since(now).Seconds())
			return false
		case <-t.C:
		}
		throttled.Add(time.Since(now).Seconds())
	}
}

// throttledWithin reports whether a lane waited for the bucket within
// the last window.
func (b *budget) throttledWithin(now time.Time) bool {
	if b.share <= 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.throttled.IsZero() && now.Sub(b.throttled) < b.window
}
