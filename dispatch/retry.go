package dispatch

import (
	"container/heap"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/tracing"
)

// The retry consumer reads the delivery-retry topic in the group
// <prefix>-retry. Records come in the order they failed, not the order
// they are due (a 5 s retry may follow a 10 h one), so instead of holding a
// partition behind its head the consumer keeps pending retries in a timer
// heap and commits each partition up to its oldest unfinished record. After
// a restart the records past that point are read again; the ones already
// finished are delivered again (at least once, never zero). A partition
// revoked in a rebalance starts no more retries, lets the ones under way
// finish (for a while), and commits them before its next owner reads it.
//
// Only retries due within RetryHorizon are held in memory, up to
// MaxPendingRetries: one subscription's retries due in hours must not keep
// another's due in seconds unread. The others, and those of disabled
// subscriptions, are spilled: the consumer keeps their offset and due
// time, and reads their partition again from the oldest of them as they
// come near (or as their subscription is enabled).
//
// The spilled retries kept are bounded too (MaxSpilledRetries). At the
// bound, a partition's reading stops at the next retry due beyond the
// horizon, which is not taken, and the partition's fetches pause: nothing
// of it from there on is committed or lost, and it is read on from there
// once spilled retries have come near (a rewind) and left room. A retry
// of a disabled subscription that finds no room stays in the timer heap,
// waiting, instead, among the MaxPendingRetries held.
//
// A spilled retry may wait for hours, or for as long as its subscription
// stays disabled: it must not hold its partition's committed offset back
// that long, or every restart delivers again all the retries finished
// after it. Once RetryReappendAfter finished retries sit after it, it is
// read again and written anew, unchanged, at the end of the topic (its
// due time, attempt number and subscription are in its headers), and the
// original is finished; the copy, read at the end, waits as it did.
type retries struct {
	d  *Dispatcher
	cl *kgo.Client

	mu      sync.Mutex
	heap    retryHeap
	pending map[int32]map[int64]bool // partition -> offsets read but unfinished
	next    map[int32]int64          // partition -> offset after the last read
	epoch   map[int32]int32          // partition -> leader epoch of the last read
	gen     map[int32]int            // partition -> assignment generation
	running map[int32]*inFlight      // partition -> retries under way
	spilled map[int32]map[int64]spill
	nspill  int
	paused  bool
	rewind  chan struct{} // asks for spilled retries to be read again now
	wake    chan struct{}
	sem     chan struct{}

	// reappendAt: no spilled retry is re-appended before; the last write
	// of one failed.
	reappendAt time.Time
	// stop: partition -> offset of the first retry not taken for want of
	// room among the spilled ones; the partition's fetches are paused.
	stop map[int32]int64
}

// spill is a pending retry not held in memory.
type spill struct {
	due time.Time
	sub string
	// waiting: the open circuit refused it; due too when it closes.
	waiting bool
	// parked: its subscription is disabled; it waits for enable.
	parked bool
	// reappend: it holds back its partition's committed offset; read
	// again, it is written anew at the end of the topic.
	reappend bool
}

// inFlight tracks the retries of one partition under way.
type inFlight struct {
	wg      sync.WaitGroup
	closed  bool // revoked: start no more
	cancels map[*retryItem]context.CancelFunc
}

type retryItem struct {
	rec *kgo.Record
	sub string
	due time.Time
	gen int
	// waiting: the item waits for its subscription (an open circuit, or
	// disabled) and is due again as soon as that ends.
	waiting bool
	// reappend, when set, makes the item no attempt but the write of a
	// spilled retry anew at the end of the topic; it is what the retry
	// was spilled as, and is spilled as again if the write fails.
	reappend *spill
}

type retryHeap []*retryItem

func (h retryHeap) Len() int { return len(h) }

// Less orders by due time, then by partition and offset: retries due
// together go in the order they were written.
func (h retryHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if !a.due.Equal(b.due) {
		return a.due.Before(b.due)
	}
	if a.rec.Partition != b.rec.Partition {
		return a.rec.Partition < b.rec.Partition
	}
	return a.rec.Offset < b.rec.Offset
}
func (h retryHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *retryHeap) Push(x any)   { *h = append(*h, x.(*retryItem)) }
func (h *retryHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// retryConcurrency bounds concurrent retry deliveries.
const retryConcurrency = 64

func newRetries(d *Dispatcher) *retries {
	return &retries{
		d:       d,
		pending: make(map[int32]map[int64]bool),
		next:    make(map[int32]int64),
		epoch:   make(map[int32]int32),
		gen:     make(map[int32]int),
		running: make(map[int32]*inFlight),
		spilled: make(map[int32]map[int64]spill),
		stop:    make(map[int32]int64),
		rewind:  make(chan struct{}, 1),
		wake:    make(chan struct{}, 1),
		sem:     make(chan struct{}, retryConcurrency),
	}
}

// run consumes the retry topic until ctx ends. It starts once the
// registry has loaded: a retry of a subscription it does not know yet
// would be taken for a deleted subscription's.
func (r *retries) run(ctx context.Context) error {
	d := r.d
	select {
	case <-ctx.Done():
		return nil
	case <-d.loaded:
	}
	topic := string(d.cluster.Names.DeliveryRetry)
	cl, closeClient, err := d.consumer(ctx, d.cluster.Names.RetryGroup(),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Redrives write the retry topic in transactions; an aborted
		// redrive must deliver nothing.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
			// What finishes now is committed, not read again by the
			// partition's next owner.
			r.drain(revoked[topic], d.longestTimeout()+5*time.Second)
			r.commit(ctx)
			r.forget(revoked[topic])
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
			r.drain(lost[topic], 0)
			r.forget(lost[topic])
		}),
	)
	if err != nil {
		return fmt.Errorf("dispatcher: retry client: %w", err)
	}
	r.cl = cl
	defer closeClient()

	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { r.schedule(ctx, &wg) })
	wg.Go(func() { r.rewinds(ctx) })
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				r.commit(ctx)
			}
		}
	})
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			d.log.Warn("retry fetch error", "topic", t, "partition", p, "err", err)
		})
		fs.EachRecord(r.add)
		r.signal()
	}
}

func (r *retries) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// add takes a record read from the retry topic into the heap, or spills
// it when it is due beyond the horizon. A record read again (a rewind)
// is taken only if it is spilled and now near, or to be re-appended.
func (r *retries) add(rec *kgo.Record) {
	retry := topics.ParseRetry(rec) // an unreadable due time is due now, and the attempt decides
	due := retry.DueAt
	r.mu.Lock()
	defer r.mu.Unlock()
	p := rec.Partition
	if at, ok := r.stop[p]; ok && rec.Offset >= at {
		return // read again from at once there is room
	}
	it := &retryItem{rec: rec, sub: retry.Subscription, due: due, gen: r.gen[p]}
	if rec.Offset < r.next[p] {
		sp, ok := r.spilled[p][rec.Offset]
		held := ok && r.held(sp)
		if !ok || held && !sp.reappend {
			return // finished, or still waiting
		}
		r.unspillLocked(p, rec.Offset)
		it.due = sp.due
		if held {
			sp.reappend = false
			it.due, it.reappend = r.d.now(), &sp
		}
		heap.Push(&r.heap, it)
		r.pauseLocked()
		return
	}
	far := r.far(due)
	if far && !r.roomLocked() {
		r.stop[p] = rec.Offset
		r.cl.PauseFetchPartitions(map[string][]int32{rec.Topic: {p}})
		return
	}
	if r.pending[p] == nil {
		r.pending[p] = make(map[int64]bool)
	}
	r.pending[p][rec.Offset] = true
	r.next[p] = rec.Offset + 1
	r.epoch[p] = rec.LeaderEpoch
	if far {
		r.spillLocked(it, spill{due: due, sub: it.sub})
		return
	}
	heap.Push(&r.heap, it)
	r.pauseLocked()
}

// far reports whether due is beyond the horizon.
func (r *retries) far(due time.Time) bool {
	return due.After(r.d.now().Add(r.d.cfg.RetryHorizon))
}

// roomLocked reports whether one more retry may be spilled.
func (r *retries) roomLocked() bool {
	return r.nspill < r.d.cfg.MaxSpilledRetries
}

// held reports whether a spilled retry still waits: parked, or far.
func (r *retries) held(sp spill) bool {
	return sp.parked || r.far(sp.due)
}

func (r *retries) spillLocked(it *retryItem, sp spill) {
	p := it.rec.Partition
	if r.spilled[p] == nil {
		r.spilled[p] = make(map[int64]spill)
	}
	r.spilled[p][it.rec.Offset] = sp
	r.nspill++
	r.d.metrics.retriesSpilled.Set(float64(r.nspill))
	r.pauseLocked()
}

func (r *retries) unspillLocked(p int32, offset int64) {
	delete(r.spilled[p], offset)
	r.nspill--
	r.d.metrics.retriesSpilled.Set(float64(r.nspill))
}

// pauseLocked pauses reading the retry topic while MaxPendingRetries are
// held and resumes it below half of that.
func (r *retries) pauseLocked() {
	r.d.metrics.retriesPending.Set(float64(r.heap.Len() + r.nspill))
	topic := string(r.d.cluster.Names.DeliveryRetry)
	switch held := r.heap.Len(); {
	case !r.paused && held >= r.d.cfg.MaxPendingRetries:
		r.paused = true
		r.cl.PauseFetchTopics(topic)
	case r.paused && held < r.d.cfg.MaxPendingRetries/2:
		r.paused = false
		r.cl.ResumeFetchTopics(topic)
	}
}

// requeue puts an item the open circuit refused back, due at due, unless
// its partition was revoked meanwhile.
func (r *retries) requeue(it *retryItem, due time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if it.gen != r.gen[it.rec.Partition] {
		return
	}
	if r.far(due) && r.roomLocked() {
		r.spillLocked(it, spill{due: due, sub: it.sub, waiting: true})
		return
	}
	it.due, it.waiting = due, true
	heap.Push(&r.heap, it)
	r.pauseLocked()
	r.signal()
}

// park spills the retry of a disabled subscription until it is enabled.
func (r *retries) park(it *retryItem) {
	st := r.d.subscription(it.sub) // before r.mu: reconcile holds d.mu to release
	r.mu.Lock()
	defer r.mu.Unlock()
	if it.gen != r.gen[it.rec.Partition] {
		return
	}
	// Enabled or deleted since the retry looked: release has been and
	// gone; the retry is tried (or dropped) now.
	if st == nil || st.enabled() {
		it.due = r.d.now()
		heap.Push(&r.heap, it)
		r.pauseLocked()
		r.signal()
		return
	}
	if !r.roomLocked() {
		// Looked at again after the horizon, or at once when enabled.
		it.due, it.waiting = r.d.now().Add(r.d.cfg.RetryHorizon), true
		heap.Push(&r.heap, it)
		r.pauseLocked()
		return
	}
	r.spillLocked(it, spill{sub: it.sub, parked: true})
}

// release makes the waiting retries of a subscription due now: its
// circuit closed, or it was enabled again.
func (r *retries) release(sub string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.d.now()
	for _, it := range r.heap {
		if it.waiting && it.sub == sub {
			it.due, it.waiting = now, false
		}
	}
	heap.Init(&r.heap)
	rewind := false
	for _, spilled := range r.spilled {
		for off, sp := range spilled {
			if sp.sub == sub && (sp.waiting || sp.parked) {
				spilled[off] = spill{due: now, sub: sub}
				rewind = true
			}
		}
	}
	r.signal()
	if rewind {
		r.rewindNow()
	}
}

// rewindNow asks for spilled retries to be read again now.
func (r *retries) rewindNow() {
	select {
	case r.rewind <- struct{}{}:
	default:
	}
}

// rewinds reads partitions again from their oldest spilled retry that
// came within the horizon, every quarter of the horizon or when asked.
func (r *retries) rewinds(ctx context.Context) {
	t := time.NewTicker(r.rewindEvery())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.rewind:
		}
		offsets, stopped := r.rewindOffsets()
		if len(offsets) > 0 {
			r.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{string(r.d.cluster.Names.DeliveryRetry): offsets})
		}
		r.restart(stopped)
	}
}

// restart reads on the stopped partitions given, set back to where they
// stopped (or earlier), unless they moved or stopped again meanwhile.
func (r *retries) restart(stopped map[int32]int64) {
	if len(stopped) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var parts []int32
	for p, at := range stopped {
		if cur, ok := r.stop[p]; ok && cur == at {
			delete(r.stop, p)
			parts = append(parts, p)
		}
	}
	r.cl.ResumeFetchPartitions(map[string][]int32{string(r.d.cluster.Names.DeliveryRetry): parts})
}

// rewindEvery is how often spilled retries are looked at again.
func (r *retries) rewindEvery() time.Duration {
	return max(r.d.cfg.RetryHorizon/4, 10*time.Millisecond)
}

// rewindOffsets returns, per partition, the oldest spilled retry now
// within the horizon or to be re-appended, or where the partition stopped
// for want of room, if earlier; none while the consumer is paused at its
// limit. stopped are the stopped partitions to read on, with where they
// stopped: those with a spilled retry to read again (which makes room),
// or all while there is room.
func (r *retries) rewindOffsets() (offsets map[int32]kgo.EpochOffset, stopped map[int32]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	offsets = make(map[int32]kgo.EpochOffset)
	stopped = make(map[int32]int64)
	if r.paused {
		return offsets, stopped
	}
	for p, spilled := range r.spilled {
		for off, sp := range spilled {
			if r.held(sp) && !sp.reappend {
				continue
			}
			if at, ok := offsets[p]; !ok || off < at.Offset {
				offsets[p] = kgo.EpochOffset{Epoch: -1, Offset: off}
			}
		}
	}
	for p, at := range r.stop {
		_, rereads := offsets[p]
		if !rereads && !r.roomLocked() {
			continue
		}
		stopped[p] = at
		if !rereads {
			offsets[p] = kgo.EpochOffset{Epoch: -1, Offset: at}
		}
	}
	return offsets, stopped
}

// start registers a due retry as under way and returns its context and
// the function that ends it; false when its partition was revoked.
func (r *retries) start(ctx context.Context, it *retryItem) (context.Context, func(), bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := it.rec.Partition
	fl := r.running[p]
	if fl == nil {
		fl = &inFlight{cancels: make(map[*retryItem]context.CancelFunc)}
		r.running[p] = fl
	}
	if fl.closed || it.gen != r.gen[p] {
		return nil, nil, false
	}
	ctx, cancel := context.WithCancel(ctx)
	fl.cancels[it] = cancel
	fl.wg.Add(1)
	return ctx, func() {
		r.mu.Lock()
		delete(fl.cancels, it)
		r.mu.Unlock()
		cancel()
		fl.wg.Done()
	}, true
}

// drain stops partitions from starting retries and waits for the ones
// under way, cancelling those still running after grace.
func (r *retries) drain(parts []int32, grace time.Duration) {
	r.mu.Lock()
	var fls []*inFlight
	for _, p := range parts {
		if fl := r.running[p]; fl != nil {
			fl.closed = true
			fls = append(fls, fl)
		}
	}
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, fl := range fls {
			fl.wg.Wait()
		}
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	r.mu.Lock()
	for _, fl := range fls {
		for _, cancel := range fl.cancels {
			cancel()
		}
	}
	r.mu.Unlock()
	<-done
}

// forget drops the pending retries of partitions this consumer lost; their
// next owner reads them again from the committed offset.
func (r *retries) forget(parts []int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range parts {
		delete(r.pending, p)
		delete(r.next, p)
		delete(r.running, p)
		r.nspill -= len(r.spilled[p])
		delete(r.spilled, p)
		delete(r.stop, p)
		r.gen[p]++
	}
	// A partition paused at the bound stays paused, for its next owner
	// here too, until resumed.
	r.cl.ResumeFetchPartitions(map[string][]int32{string(r.d.cluster.Names.DeliveryRetry): parts})
	r.d.metrics.retriesSpilled.Set(float64(r.nspill))
	kept := r.heap[:0]
	for _, it := range r.heap {
		if it.gen == r.gen[it.rec.Partition] {
			kept = append(kept, it)
		}
	}
	r.heap = kept
	heap.Init(&r.heap)
	// Paused for retries it no longer holds, the topic would never be
	// read again.
	r.pauseLocked()
}

// schedule runs due retries until ctx ends.
func (r *retries) schedule(ctx context.Context, wg *sync.WaitGroup) {
	for {
		r.mu.Lock()
		var wait time.Duration = time.Hour
		var due []*retryItem
		now := r.d.now()
		for r.heap.Len() > 0 {
			if d := r.heap[0].due.Sub(now); d > 0 {
				wait = d
				break
			}
			due = append(due, heap.Pop(&r.heap).(*retryItem))
		}
		r.d.metrics.retriesPending.Set(float64(r.heap.Len()))
		r.mu.Unlock()
		for _, it := range due {
			select {
			case r.sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			ictx, end, ok := r.start(ctx, it)
			if !ok {
				<-r.sem // its partition moved on: the next owner retries it
				continue
			}
			wg.Go(func() {
				defer func() { <-r.sem }()
				defer end()
				// A deleted subscription's retry is not written anew:
				// its attempt drops it.
				if it.reappend != nil && r.d.subscription(it.sub) != nil {
					r.reappendRetry(ictx, it)
					return
				}
				switch out, until := r.retry(ictx, it.rec); out {
				case finished:
					r.finish(it)
				case refused:
					r.requeue(it, until)
				case parked:
					r.park(it)
				}
			})
		}
		if len(due) > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-time.After(wait):
		}
	}
}

// outcome is what became of a retry's turn.
type outcome int

const (
	stopped  outcome = iota // ctx ended first
	finished                // delivered, handed on, or of a deleted subscription
	refused                 // the open circuit refused it: it waits for the probe
	parked                  // its subscription is disabled: it waits for enable
)

// retry makes the next attempt of a retry record and hands a failure on.
// A retry refused by the open circuit, or of a disabled subscription, is
// not attempted: its attempt number stays as it is; a refused one is due
// again at until.
func (r *retries) retry(ctx context.Context, rec *kgo.Record) (out outcome, until time.Time) {
	d := r.d
	retry := topics.ParseRetry(rec)
	subID, eventID, attempts := retry.Subscription, retry.EventID, retry.Attempts
	st := d.subscription(subID)
	if st == nil {
		d.log.Info("dropping a retry of a deleted subscription", "subscription", subID, "event_id", eventID, tracing.TraceID(d.cfg.Tracing.Extract(ctx, rec.Headers)))
		return finished, time.Time{}
	}
	if !st.enabled() {
		return parked, time.Time{}
	}
	m, failed := retryMessage(retry, rec, st.compiled(), d.maxBodyBytes())
	if m != nil {
		res, refusedUntil := d.attempt(ctx, st, m, attempts+1, func() {})
		switch {
		case ctx.Err() != nil:
			return stopped, time.Time{}
		case !refusedUntil.IsZero():
			return refused, refusedUntil
		case !res.ok && !d.handOff(ctx, subID, m, func(ctx context.Context) error {
			return d.fail(ctx, subID, d.schedule(st.current()), m, attempts+1, res)
		}):
			return stopped, time.Time{}
		}
	}
	// The events whose transform fails now are dead-lettered, with the
	// attempts made, once the others are done with.
	for _, f := range failed {
		if !d.handOff(ctx, subID, f, func(ctx context.Context) error { return d.deadLetter(ctx, subID, f, attempts, result{}) }) {
			return stopped, time.Time{}
		}
	}
	return finished, time.Time{}
}

// reappendRetry writes a spilled retry anew, unchanged, at the end of the
// retry topic, and then finishes the original: the copy is read there
// and waits as the original did, and the committed offset moves past the
// original. One whose copy is not written is spilled again as it was,
// still holding the committed offset, until a later try.
func (r *retries) reappendRetry(ctx context.Context, it *retryItem) {
	rec := it.rec
	copied := &kgo.Record{Topic: rec.Topic, Key: rec.Key, Value: rec.Value, Headers: rec.Headers}
	if err := r.d.cluster.Client.ProduceSync(ctx, copied).FirstErr(); err != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		if ctx.Err() == nil {
			r.d.log.Warn("retry not written anew: it holds back its partition's committed offset", "subscription", it.sub,
				"partition", rec.Partition, "offset", rec.Offset, tracing.TraceID(r.d.cfg.Tracing.Extract(ctx, rec.Headers)), "err", err)
			r.reappendAt = r.d.now().Add(r.rewindEvery())
		}
		if it.gen == r.gen[rec.Partition] {
			r.spillLocked(it, *it.reappend)
		}
		return
	}
	r.d.metrics.reappended.Inc()
	r.finish(it)
}

// finish marks a retry record done.
func (r *retries) finish(it *retryItem) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := it.rec.Partition
	if it.gen != r.gen[p] {
		return
	}
	delete(r.pending[p], it.rec.Offset)
	r.pauseLocked()
}

// commit commits each partition up to its oldest unfinished record, and
// has spilled retries that hold that too far back re-appended.
func (r *retries) commit(ctx context.Context) {
	r.mu.Lock()
	offsets := make(map[int32]kgo.EpochOffset, len(r.next))
	rewind := false
	for p, next := range r.next {
		at := next
		for o := range r.pending[p] {
			at = min(at, o)
		}
		offsets[p] = kgo.EpochOffset{Epoch: r.epoch[p], Offset: at}
		rewind = r.pinnedLocked(p, at) || rewind
	}
	r.mu.Unlock()
	if rewind {
		r.rewindNow()
	}
	if len(offsets) == 0 {
		return
	}
	topic := string(r.d.cluster.Names.DeliveryRetry)
	r.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{topic: offsets},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
			if err != nil && ctx.Err() == nil {
				r.d.log.Warn("retry offsets commit", "err", err)
			}
		})
}

// pinnedLocked flags for re-append the spilled retries that hold
// partition p's committed offset at at: from its oldest unfinished record
// on, each waiting spilled retry with enough finished records after it:
// RetryReappendAfter, and no fewer than the partition's spilled retries,
// so that re-appending writes at most one record per finished one. It
// reports whether it flagged any.
func (r *retries) pinnedLocked(p int32, at int64) bool {
	if r.d.now().Before(r.reappendAt) {
		return false
	}
	spilled, pending := r.spilled[p], r.pending[p]
	bound := int64(max(r.d.cfg.RetryReappendAfter, len(spilled)))
	// enough reports whether enough records after off are finished: the
	// records after it, less the unfinished ones from it on.
	enough := func(off int64, unfinished int) bool { return r.next[p]-off-int64(unfinished) >= bound }
	// Most of the time the oldest is not pinning, or already flagged:
	// nothing to sort.
	if sp, ok := spilled[at]; !ok || !r.held(sp) || sp.reappend || !enough(at, len(pending)) {
		return false
	}
	flagged := false
	offsets := slices.Sorted(maps.Keys(pending))
	for i, off := range offsets {
		sp, ok := spilled[off]
		if !ok || !r.held(sp) || !enough(off, len(offsets)-i) {
			break
		}
		if !sp.reappend {
			sp.reappend = true
			spilled[off], flagged = sp, true
		}
	}
	return flagged
}
