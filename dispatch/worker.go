package dispatch

import (
	"context"
	"sync"

	"github.com/hookstream/hookstream/subscriptions"
)

// worker runs one subscription on this dispatcher: a lane per events
// partition it owns (fanout.go), each handing its records to the
// worker's sink (sink.go), which moves the lane's cursor only past
// records that are done.
type worker struct {
	d   *Dispatcher
	st  *subState
	sub subscriptions.Subscription // as the worker started; shape changes restart it
	// sink takes the lanes' records to the subscription's destination,
	// chosen by its kind as the worker starts.
	sink   sink
	ctx    context.Context
	cancel context.CancelFunc
	// prev is the worker this one replaces: its lanes commit their
	// cursors before this one's read them.
	prev *worker
	done chan struct{} // closed once stopped and every lane has ended
	// stopped is set, under the dispatcher's mu, once it is told to stop.
	stopped bool

	mu      sync.Mutex
	lanes   int  // lanes running
	closing bool // ctx ended: no lane starts
}

// startWorker starts a worker for subscription id, replacing prev (nil
// for none), and gives it a lane on every partition owned.
func (d *Dispatcher) startWorker(ctx context.Context, id string, st *subState, prev *worker) *worker {
	// Stopped by stop (stopAll once the head has let its partitions go
	// and committed their cursors in bulk), not by ctx ending.
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	st.mu.Lock()
	sub := st.sub
	st.mu.Unlock()
	w := &worker{d: d, st: st, sub: sub, ctx: ctx, cancel: cancel, prev: prev, done: make(chan struct{})}
	w.sink = newSink(w)
	d.running.Add(1)
	context.AfterFunc(ctx, func() {
		w.mu.Lock()
		w.closing = true
		last := w.lanes == 0
		w.mu.Unlock()
		if last {
			w.ended()
		}
	})
	d.reader.attach(w)
	d.log.Info("subscription started", "subscription", id, "group", d.cluster.Names.SubscriptionGroup(id), "ordered", sub.Ordered, "batch_max", sub.BatchMax)
	return w
}

func (w *worker) ended() {
	close(w.done)
	w.d.running.Done()
}

// addLane counts a lane starting, or reports false when the worker stops.
func (w *worker) addLane() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closing {
		return false
	}
	w.lanes++
	return true
}

func (w *worker) laneEnded() {
	w.mu.Lock()
	w.lanes--
	last := w.closing && w.lanes == 0
	w.mu.Unlock()
	if last {
		w.ended()
	}
}

// stop tells the worker to stop, under the dispatcher's mu; done closes
// once its lanes have committed their cursors.
func (w *worker) stop() {
	w.stopped = true
	w.cancel()
}
