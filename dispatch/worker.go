package dispatch

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/hookstream/hookstream/internal/backoff"
	"github.com/hookstream/hookstream/subscriptions"
)

// worker delivers one subscription: a lane per events partition this
// dispatcher owns (fanout.go), each delivering its queue and moving the
// subscription's cursor only once each event is delivered, handed to the
// retry topic, or dead-lettered.
type worker struct {
	d      *Dispatcher
	st     *subState
	sub    subscriptions.Subscription // as the worker started; shape changes restart it
	ctx    context.Context
	cancel context.CancelFunc
	// prev is the worker this one replaces: its lanes commit their
	// cursors before this one's read them.
	prev *worker
	done chan struct{} // closed once stopped and every lane has ended
	sem  chan struct{} // bounds concurrent deliveries (unordered)
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
	w := &worker{d: d, st: st, sub: sub, ctx: ctx, cancel: cancel, prev: prev, done: make(chan struct{}),
		sem: make(chan struct{}, max(1, sub.MaxInFlight))}
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
	d.log.Info("subscription started", "subscription", id, "group", d.cfg.Names.SubscriptionGroup(id), "ordered", sub.Ordered, "batch_max", sub.BatchMax)
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

// drain delivers a lane's queue until ctx ends, as messages of one event
// or batches. A partial batch waits up to batch_wait for more events
// (measured from when the batches before it were sent); the cursor moves
// past records only once the messages that carry them are done.
func (w *worker) drain(ctx context.Context, l *lane) {
	var pending []item  // read and judged, not yet done
	var since time.Time // when the partial batch at the end of pending began to wait
	wait := time.Duration(w.sub.BatchWait)
	maxBytes := w.d.maxBodyBytes()
	for {
		pending = append(pending, l.takeQueue(ctx, len(pending))...)
		if len(pending) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-l.wake:
				continue
			}
		}
		// A partial batch waits no longer than batch_wait, nor while the
		// records behind it pile up past the lane's bound (a filter that
		// takes few of them): pending stays bounded as the queue is.
		flush := wait <= 0 || len(pending) >= laneHigh || !since.IsZero() && time.Since(since) >= wait
		msgs, covered := cut(w.st.compiled(), pending, maxBytes, flush)
		if covered == 0 {
			if since.IsZero() {
				since = time.Now()
			}
			t := time.NewTimer(time.Until(since.Add(wait)))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-l.wake:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		for len(msgs) > 0 {
			n := min(len(msgs), max(1, w.sub.MaxInFlight))
			if w.sub.Ordered {
				n = 1
			}
			if !w.deliverChunk(ctx, msgs[:n]) {
				return // stopping: the cursor stays before the message
			}
			l.advance(pending[msgs[n-1].upto-1].rec, len(pending)-msgs[n-1].upto)
			msgs = msgs[n:]
		}
		l.advance(pending[covered-1].rec, len(pending)-covered) // filtered records after the last message
		pending = slices.Delete(pending, 0, covered)
		since = time.Time{}
		if len(pending) > 0 {
			since = time.Now()
		}
	}
}

// deliverChunk delivers messages concurrently (one, when ordered) and
// reports whether every one reached a final state for this consumer.
func (w *worker) deliverChunk(ctx context.Context, msgs []*message) bool {
	if len(msgs) == 1 {
		return w.deliver(ctx, msgs[0], func() {})
	}
	var wg sync.WaitGroup
	ok := make([]bool, len(msgs))
	for i, m := range msgs {
		select {
		case w.sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return false
		}
		// The lane, not a parked attempt, waits while the host is busy.
		room, err := w.d.client.Room(ctx, w.sub.URL)
		if err != nil {
			<-w.sem
			wg.Wait()
			return false
		}
		wg.Go(func() {
			defer func() { <-w.sem }()
			ok[i] = w.deliver(ctx, m, room)
		})
	}
	wg.Wait()
	for _, v := range ok {
		if !v {
			return false
		}
	}
	return true
}

// deliver takes a message to a final state: delivered, handed to the
// retry topic, or (ordered) retried in place and finally dead-lettered;
// one whose transform failed is dead-lettered with no attempt. It returns
// false only when ctx ended first. room is the first attempt's place in
// its host's queue (Client.Room), given back once that attempt went or
// did not.
func (w *worker) deliver(ctx context.Context, m *message, room func()) bool {
	subID := w.sub.ID
	if m.failed != nil {
		room()
		return w.d.handOff(ctx, subID, m, func(ctx context.Context) error {
			return w.d.deadLetter(ctx, subID, m, 0, Result{})
		})
	}
	for attempt := 1; ; {
		res, refusedUntil := w.d.attempt(ctx, w.st, m, attempt, room)
		room()
		if ctx.Err() != nil {
			return false
		}
		if !refusedUntil.IsZero() {
			// Not an attempt: wait for the probe, then ask again.
			if !w.st.circuit.wait(ctx, refusedUntil) {
				return false
			}
			continue
		}
		if res.OK() {
			return true
		}
		if !w.sub.Ordered {
			return w.d.handOff(ctx, subID, m, func(ctx context.Context) error {
				return w.d.fail(ctx, subID, w.d.schedule(w.st.current()), m, attempt, res)
			})
		}
		wait, more := delay(w.d.schedule(w.st.current()), attempt, res.RetryAfter)
		if !more || res.Gone() {
			return w.d.handOff(ctx, subID, m, func(ctx context.Context) error {
				return w.d.deadLetter(ctx, subID, m, attempt, res)
			})
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		attempt++
	}
}

// handOff writes m to the retry topic or the DLQ, retrying while Kafka
// refuses: a failed delivery is never skipped silently.
func (d *Dispatcher) handOff(ctx context.Context, subID string, m *message, write func(context.Context) error) bool {
	wait := backoff.New(100*time.Millisecond, 10*time.Second)
	for {
		err := write(ctx)
		if err == nil {
			return true
		}
		d.log.Error("could not hand off a failed delivery; retrying", "subscription", subID, "event_id", m.id, d.traceID(m), "err", err)
		if !wait.Wait(ctx) {
			return false
		}
	}
}
