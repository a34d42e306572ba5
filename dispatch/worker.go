package dispatch

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/backoff"
	"github.com/hookstream/hookstream/subscriptions"
)

// worker consumes the events topic for one subscription in its own group.
// Each assigned partition has a goroutine that delivers its records and
// marks them for commit only once each is delivered, handed to the retry
// topic, or dead-lettered.
type worker struct {
	d      *Dispatcher
	st     *subState
	sub    subscriptions.Subscription // as the worker started; shape changes restart it
	cancel context.CancelFunc
	done   chan struct{}
	sem    chan struct{} // bounds concurrent deliveries (unordered)
	// stopped is set, under the dispatcher's mu, once it is told to stop.
	stopped bool

	mu    sync.Mutex
	parts map[int32]*partWorker
}

// Queue bounds per partition: above high the partition's fetches pause,
// below low they resume.
const (
	queueHigh = 2000
	queueLow  = 500
)

type partWorker struct {
	id     int32
	cl     *kgo.Client
	mu     sync.Mutex
	queue  []*kgo.Record
	paused bool
	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

// startWorker starts a worker for subscription id once prev (the worker
// it replaces, nil for none) has left the group: a process is one member
// of it, and a static one at that.
func (d *Dispatcher) startWorker(ctx context.Context, id string, st *subState, prev *worker) *worker {
	ctx, cancel := context.WithCancel(ctx)
	st.mu.Lock()
	sub := st.sub
	st.mu.Unlock()
	w := &worker{d: d, st: st, sub: sub, cancel: cancel, done: make(chan struct{}),
		sem: make(chan struct{}, max(1, sub.MaxInFlight)), parts: make(map[int32]*partWorker)}
	d.running.Go(func() {
		defer close(w.done)
		if prev != nil {
			<-prev.done // within closeGrace and leaveTimeout
		}
		if ctx.Err() != nil {
			return
		}
		if err := w.run(ctx); err != nil {
			d.log.Error("subscription consumer stopped", "subscription", id, "err", err)
		}
	})
	d.log.Info("subscription started", "subscription", id, "group", d.cfg.Names.SubscriptionGroup(id), "ordered", sub.Ordered, "batch_max", sub.BatchMax)
	return w
}

// stop tells the worker to stop, under the dispatcher's mu; done closes
// once its consumer has left the group.
func (w *worker) stop() {
	w.stopped = true
	w.cancel()
}

func (w *worker) run(ctx context.Context) error {
	names := w.d.cfg.Names
	cl, closeClient, err := w.d.consumer(ctx, names.SubscriptionGroup(w.sub.ID),
		kgo.ConsumeTopics(string(names.Events)),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// A group with no offsets starts at the end: Create commits the
		// start it was asked for before the subscription exists.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(time.Second),
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
			// A pause outlives the partition's revocation; a partition
			// assigned again starts with an empty queue and must fetch.
			cl.ResumeFetchPartitions(assigned)
			for _, p := range assigned[string(names.Events)] {
				w.startPartition(ctx, cl, p) // the worker's life; partitions derive theirs
			}
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
			w.stopPartitions(revoked[string(names.Events)])
			if err := cl.CommitMarkedOffsets(ctx); err != nil {
				w.d.log.Warn("commit on revoke", "subscription", w.sub.ID, "err", err)
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
			w.stopPartitions(lost[string(names.Events)])
		}),
	)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	// The partitions are stopped and their marks committed before the
	// client leaves the group.
	defer closeClient()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			w.d.log.Warn("fetch error", "subscription", w.sub.ID, "topic", t, "partition", p, "err", err)
		})
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if pw := w.partition(p.Partition); pw != nil && len(p.Records) > 0 {
				w.push(pw, p.Records)
			}
		})
	}
}

func (w *worker) partition(id int32) *partWorker {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.parts[id]
}

func (w *worker) startPartition(ctx context.Context, cl *kgo.Client, id int32) {
	ctx, cancel := context.WithCancel(ctx)
	pw := &partWorker{id: id, cl: cl, wake: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	w.mu.Lock()
	w.parts[id] = pw
	w.mu.Unlock()
	go func() {
		defer close(pw.done)
		w.drain(ctx, pw)
	}()
}

// stopPartitions stops partition goroutines; an in-flight delivery is
// abandoned unmarked, so the next owner delivers it again.
func (w *worker) stopPartitions(ids []int32) {
	for _, id := range ids {
		w.mu.Lock()
		pw := w.parts[id]
		delete(w.parts, id)
		w.mu.Unlock()
		if pw != nil {
			pw.cancel()
			<-pw.done
		}
	}
}

func (w *worker) push(pw *partWorker, recs []*kgo.Record) {
	pw.mu.Lock()
	pw.queue = append(pw.queue, recs...)
	if len(pw.queue) > queueHigh && !pw.paused {
		pw.paused = true
		pw.cl.PauseFetchPartitions(map[string][]int32{string(w.d.cfg.Names.Events): {pw.id}})
	}
	pw.mu.Unlock()
	select {
	case pw.wake <- struct{}{}:
	default:
	}
}

// drain delivers a partition's queue until ctx ends, as messages of one
// event or batches. A partial batch waits up to batch_wait for more events
// (measured from when the batches before it were sent); records are marked
// only once the messages that carry them are done.
func (w *worker) drain(ctx context.Context, pw *partWorker) {
	var pending []item  // read and judged, not yet marked
	var since time.Time // when the partial batch at the end of pending began to wait
	wait := time.Duration(w.sub.BatchWait)
	maxBytes := w.d.maxBodyBytes()
	for {
		pw.mu.Lock()
		read := pw.queue
		pw.queue = nil
		pw.mu.Unlock()
		if len(read) > 0 {
			c := w.st.compiled()
			pending = append(pending, judge(c, read, maxBytes, func(err error) { w.d.filterFailed(w.st, err) })...)
		}
		if len(pending) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-pw.wake:
				continue
			}
		}
		// A partial batch waits no longer than batch_wait, nor while the
		// records behind it pile up past the queue bound (a filter that
		// takes few of them): pending stays bounded as the queue is.
		flush := wait <= 0 || len(pending) >= queueHigh || !since.IsZero() && time.Since(since) >= wait
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
			case <-pw.wake:
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
				return // stopping: nothing past the last mark is committed
			}
			pw.cl.MarkCommitRecords(pending[msgs[n-1].upto-1].rec)
			w.resume(pw, len(pending)-msgs[n-1].upto)
			msgs = msgs[n:]
		}
		pw.cl.MarkCommitRecords(pending[covered-1].rec) // filtered records after the last message
		pending = slices.Delete(pending, 0, covered)
		since = time.Time{}
		if len(pending) > 0 {
			since = time.Now()
		}
		w.resume(pw, len(pending))
	}
}

// resume resumes a paused partition's fetches once its queue and the
// records still pending delivery fall below queueLow.
func (w *worker) resume(pw *partWorker, pending int) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.paused && len(pw.queue)+pending < queueLow {
		pw.paused = false
		pw.cl.ResumeFetchPartitions(map[string][]int32{string(w.d.cfg.Names.Events): {pw.id}})
	}
}

// deliverChunk delivers messages concurrently (one, when ordered) and
// reports whether every one reached a final state for this consumer.
func (w *worker) deliverChunk(ctx context.Context, msgs []*message) bool {
	if len(msgs) == 1 {
		return w.deliver(ctx, msgs[0])
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
		wg.Go(func() {
			defer func() { <-w.sem }()
			ok[i] = w.deliver(ctx, m)
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
// false only when ctx ended first.
func (w *worker) deliver(ctx context.Context, m *message) bool {
	subID := w.sub.ID
	if m.failed != nil {
		return w.d.handOff(ctx, subID, m, func(ctx context.Context) error {
			return w.d.deadLetter(ctx, subID, m, 0, Result{})
		})
	}
	for attempt := 1; ; {
		res, refusedUntil := w.d.attempt(ctx, w.st, m, attempt)
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
