package pull

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// budgetWait bounds how long a request that holds nothing waits for room
// in the budget before it is answered 503: longer than the fetches under
// way take to end (milliseconds), so that long polls woken together by
// one event are served in turn, not refused.
const budgetWait = time.Second

// fetchCost is what reading one fetch for an answer may hold: what the
// fetch may bring back (max(ask, the largest batch): a broker returns the
// first batch whatever its size), three times over: as received, decoded
// into records (decompressed batches cut at as much, see decoder), and
// copied into the answer.
func fetchCost(ask, maxBatch int) int64 { return 3 * int64(max(ask, maxBatch)) }

// errBudget: the budget had no room for a request in time.
var errBudget = errors.New("pull: byte budget spent")

// budget is the bytes pull requests hold at once in a process: the
// records read for answers and the answers being written. It is a
// weighted semaphore whose reservations are granted in turn, so that a
// large one is not passed over by smaller ones; one larger than the
// whole budget takes all of it, and is served alone.
type budget struct {
	size  int64
	sem   *semaphore.Weighted
	inUse atomic.Int64 // what sem has granted, for the gauge
}

func newBudget(size int64) *budget {
	return &budget{size: size, sem: semaphore.NewWeighted(size)}
}

// share is what one request holds of the budget. It is not safe for
// concurrent use; its request releases it on every path.
type share struct {
	b    *budget
	held int64
}

// hold makes sh hold n bytes (at most the whole budget), or reports false
// when the budget has no room for them. A share that holds nothing waits
// for room, in turn, up to budgetWait or the end of ctx; one that holds
// some does not wait, so that no request waits while it holds bytes
// another one waits for.
func (sh *share) hold(ctx context.Context, n int64) bool {
	n = min(n, sh.b.size)
	if n <= sh.held {
		sh.keep(n)
		return true
	}
	more := n - sh.held
	if sh.held > 0 {
		if !sh.b.sem.TryAcquire(more) {
			return false
		}
	} else {
		ctx, cancel := context.WithTimeout(ctx, budgetWait)
		defer cancel()
		if sh.b.sem.Acquire(ctx, more) != nil {
			return false
		}
	}
	sh.b.inUse.Add(more)
	sh.held = n
	return true
}

// keep gives back what sh holds past n bytes.
func (sh *share) keep(n int64) {
	if less := sh.held - max(n, 0); less > 0 {
		sh.held -= less
		sh.b.inUse.Add(-less)
		sh.b.sem.Release(less)
	}
}

// release gives back all sh holds.
func (sh *share) release() { sh.keep(0) }
