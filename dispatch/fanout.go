// The fan-out: the head (reader) reads each owned events partition
// once and queues its records to the lane of every subscription on it;
// lanes behind read through the catch-up path; cursors are committed
// here, but for sinks that move them themselves.
//
// Locks, in the order they are taken: one is never asked for while one
// after it is held.
//
//	d.mu   Dispatcher: subs, workers, and each worker's stopped
//	r.mu   reader: parts
//	ph.mu  partHead: pos, lanes, and every field of its lanes
//	c.mu   catchup: the lanes waiting for a turn (add, under ph.mu)
//
// A worker's mu (its lanes' count) is taken under d.mu and r.mu as its
// lanes start, never with a ph.mu held. Beside them, in the dispatcher
// and the retries: d.mu → retries.mu → subState.mu → circuit.mu.

package dispatch

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/backoff"
	"github.com/hookstream/hookstream/subscriptions"
)

// Lane bounds: a lane holding laneHigh records falls behind the head; a
// lane behind is read on by the catch-up path while it holds fewer than
// laneLow. Held records are those queued and not yet judged, plus those
// judged and not yet done.
const (
	laneHigh = 1000
	laneLow  = 250
)

// headWindow: when a dispatcher takes a partition, its head starts at the
// furthest subscription cursor but for those within headWindow records
// behind it; cursors further behind catch up on their own.
const headWindow = 10_000

// commitEvery is how often moved cursors are committed.
const commitEvery = time.Second

// reader is the head: it reads each events partition this dispatcher owns
// in the group <prefix>-dispatch, once, and hands every record to the
// lane of each subscription that is at the head.
type reader struct {
	d       *Dispatcher
	catchup *catchup

	mu    sync.Mutex
	parts map[int32]*partHead
}

// partHead is one owned events partition: where the head is, and the lane
// of each running subscription.
type partHead struct {
	id int32
	r  *reader
	// catchup is the reader's catch-up path, which its lanes behind
	// read through.
	catchup *catchup

	mu    sync.Mutex
	pos   int64 // offset after the last record the head handed out
	lanes map[string]*lane
	// ctx ends when the partition is revoked or lost.
	ctx    context.Context
	cancel context.CancelFunc
	lost   bool // lost, not revoked: cursors are not committed
}

// lane is one subscription on one partition: its cursor and the records
// read for it and not yet done. Its fields are under its partition's mu.
type lane struct {
	w  *worker
	ph *partHead

	ready bool // positioned at its cursor
	// replayTo: records before it are read again by a replay while
	// running (a topic sink marks them hs-replay); 0 none.
	replayTo  int64
	fed       int64 // offset after the last record queued
	behind    bool  // reads through the catch-up path
	queued    bool  // waits in the catch-up queue
	queue     []shared
	held      int   // records in queue
	mark      int64 // the cursor: offset after the last record done
	committed int64 // the cursor as last committed; -1 none
	gone      bool  // ended: its partition or worker stopped
	wake      chan struct{}
	done      chan struct{}
}

func newReader(d *Dispatcher) *reader {
	return &reader{d: d, parts: make(map[int32]*partHead), catchup: &catchup{d: d, wake: make(chan struct{}, 1)}}
}

// run reads the events partitions assigned in <prefix>-dispatch until ctx
// ends. The group commits nothing: each subscription's cursor is committed
// for its own group.
func (r *reader) run(ctx context.Context) error {
	d := r.d
	topic := string(d.cluster.Names.Events)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	for range max(1, d.cfg.CatchUpReaders) {
		wg.Go(func() { r.catchup.run(ctx) })
	}
	wg.Go(func() { r.commitLoop(ctx) })
	cl, closeClient, err := d.consumer(ctx, d.cluster.Names.DispatchGroup(),
		kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.AdjustFetchOffsetsFn(func(actx context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
			starts, err := r.assign(actx, slices.Collect(maps.Keys(offs[topic])))
			if err != nil {
				return nil, err
			}
			for p, o := range starts {
				offs[topic][p] = kgo.NewOffset().At(o).WithEpoch(-1)
			}
			return offs, nil
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
			r.drop(ctx, revoked[topic], false)
		}),
		kgo.OnPartitionsLost(func(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
			r.drop(ctx, lost[topic], true)
		}),
	)
	if err != nil {
		return err
	}
	// The topic writer outlives the revocation of every partition on
	// close: it commits the transaction under way.
	wg.Go(func() { d.topics.run(ctx, cl) })
	defer closeClient() // revokes, so commits, every partition
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			d.log.Warn("fetch error", "topic", t, "partition", p, "err", err)
		})
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if ph := r.part(p.Partition); ph != nil && len(p.Records) > 0 {
				ph.feed(p.Records)
			}
		})
	}
}

func (r *reader) part(id int32) *partHead {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.parts[id]
}

// assign takes partitions: it reads every running subscription's cursor
// on them, places the head of each (headWindow) and starts the lanes. It
// returns where the head reads from.
func (r *reader) assign(ctx context.Context, parts []int32) (map[int32]int64, error) {
	d := r.d
	adm := d.cluster.Admin()
	topic := string(d.cluster.Names.Events)
	workers := d.runningWorkers()
	groups := make([]string, 0, len(workers))
	for _, w := range workers {
		groups = append(groups, string(d.cluster.Names.SubscriptionGroup(w.sub.ID)))
	}
	if slices.ContainsFunc(workers, func(w *worker) bool { return w.sink.movesCursor() }) {
		// Taking the transactional id aborts what a predecessor under it
		// left open, which would hold the cursors unstable until its
		// timeout.
		if err := d.topics.init(ctx); err != nil {
			d.log.Warn("topic subscriptions: cannot take the transactional id; the cursors wait for the transaction timeout", "err", err)
		}
	}
	// A cursor a transaction is moving is read once the transaction ends.
	ctx = kadm.RequireStable(ctx)
	var ends, firsts kadm.ListedOffsets
	var cursors kadm.FetchOffsetsResponses
	wait := backoff.New(100*time.Millisecond, 5*time.Second)
	for {
		var err error
		if ends, err = adm.ListEndOffsets(ctx, topic); err == nil {
			err = ends.Error()
		}
		if err == nil {
			if firsts, err = adm.ListStartOffsets(ctx, topic); err == nil {
				err = firsts.Error()
			}
		}
		if err == nil && len(groups) > 0 {
			cursors = adm.FetchManyOffsets(ctx, groups...)
			for _, c := range cursors {
				if c.Err == nil {
					c.Err = c.Fetched.Error() // UNSTABLE_OFFSET_COMMIT, say: not "no cursor"
				}
				if c.Err != nil && !noGroup(c.Err) {
					err = c.Err
				}
			}
		}
		if err == nil {
			break
		}
		d.log.Warn("cannot read the subscriptions' cursors; trying again", "err", err)
		if !wait.Wait(ctx) {
			return nil, ctx.Err()
		}
	}
	starts := make(map[int32]int64, len(parts))
	placed := make(map[int32]map[*worker]int64, len(parts))
	replays := make(map[int32]map[*worker]int64, len(parts))
	for _, p := range parts {
		end, first := int64(0), int64(0)
		if o, ok := ends.Lookup(topic, p); ok {
			end = o.Offset
		}
		if o, ok := firsts.Lookup(topic, p); ok {
			first = o.Offset
		}
		at := make(map[*worker]int64, len(workers))
		replays[p] = make(map[*worker]int64)
		furthest := int64(-1)
		for _, w := range workers {
			c := end // no cursor: from the end
			if o, ok := cursors[string(d.cluster.Names.SubscriptionGroup(w.sub.ID))].Fetched.Lookup(topic, p); ok && o.At >= 0 {
				c = o.At
				if at, rewound := w.rewound(p, o.Metadata); rewound {
					c, replays[p][w] = at, c
				}
				c = min(max(c, first), end)
			}
			at[w] = c
			furthest = max(furthest, c)
		}
		head := end
		if furthest >= 0 {
			head = furthest
			for _, c := range at {
				if c >= furthest-headWindow {
					head = min(head, c)
				}
			}
		}
		starts[p], placed[p] = head, at
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range parts {
		if ph := r.parts[p]; ph != nil { // still owned: the head reads on
			ph.mu.Lock()
			starts[p] = ph.pos
			ph.mu.Unlock()
			continue
		}
		pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		ph := &partHead{id: p, r: r, catchup: r.catchup, pos: starts[p], lanes: make(map[string]*lane), ctx: pctx, cancel: cancel}
		r.parts[p] = ph
		for _, w := range d.workers {
			if w.stopped {
				continue
			}
			c, ok := placed[p][w]
			if !ok || w.prev != nil {
				c = -1 // started since, or after another: reads its own cursor
			}
			ph.start(w, c, replays[p][w]) // committed again at once, tagged
		}
	}
	return starts, nil
}

// attach gives a new worker a lane on every owned partition.
func (r *reader) attach(w *worker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ph := range r.parts {
		ph.start(w, -1, 0)
	}
}

// runningWorkers returns the workers not told to stop.
func (d *Dispatcher) runningWorkers() []*worker {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ws []*worker
	for _, w := range d.workers {
		if !w.stopped {
			ws = append(ws, w)
		}
	}
	return ws
}

// start starts w's lane on ph at cursor c, or at w's committed cursor
// when c is -1 (read once the worker w replaces has committed its own);
// a rewind moved c back from replayTo (0: none).
func (ph *partHead) start(w *worker, c, replayTo int64) {
	if !w.addLane() {
		return
	}
	l := &lane{w: w, ph: ph, committed: -1, wake: make(chan struct{}, 1), done: make(chan struct{})}
	ph.mu.Lock()
	ph.lanes[w.sub.ID] = l // a stopping worker's lane, if any, is no longer fed
	ph.mu.Unlock()
	ctx, cancel := context.WithCancel(w.ctx)
	stop := context.AfterFunc(ph.ctx, cancel)
	go func() {
		defer w.laneEnded()
		defer close(l.done)
		defer stop()
		defer cancel()
		defer ph.end(l)
		if c < 0 {
			if w.prev != nil {
				select {
				case <-w.prev.done:
				case <-ctx.Done():
					return
				}
			}
			var ok bool
			var meta string
			if c, meta, ok = w.d.cursor(ctx, w.sub.ID, ph.id); !ok {
				return
			}
			if at, rewound := w.rewound(ph.id, meta); rewound {
				c, meta, replayTo = at, "", c
			}
			if meta == w.sub.Rewind.Tag() && c >= 0 {
				l.committed = c
			}
		}
		ph.mu.Lock()
		if c < 0 { // no cursor: from the head
			c = ph.pos
		}
		l.ready, l.fed, l.mark, l.replayTo = true, c, c, replayTo
		if c < ph.pos {
			l.fallBehind()
		}
		ph.mu.Unlock()
		w.sink.drain(ctx, l)
	}()
}

// rewound returns where w's rewind moves its cursor on partition p, when
// the cursor committed with metadata meta does not carry the rewind's
// tag yet.
func (w *worker) rewound(p int32, meta string) (int64, bool) {
	rw := w.sub.Rewind
	if rw == nil || meta == rw.Tag() {
		return 0, false
	}
	at, ok := rw.Offsets[p]
	return at, ok
}

// cursor reads subscription id's committed cursor on events partition p,
// -1 when it has none, and its metadata; false when ctx ended first.
func (d *Dispatcher) cursor(ctx context.Context, id string, p int32) (int64, string, bool) {
	adm := d.cluster.Admin()
	topic := string(d.cluster.Names.Events)
	wait := backoff.New(100*time.Millisecond, 5*time.Second)
	ctx = kadm.RequireStable(ctx) // a cursor a transaction is moving is read once it ends
	for {
		fetched, err := adm.FetchOffsets(ctx, string(d.cluster.Names.SubscriptionGroup(id)))
		o, ok := fetched.Lookup(topic, p)
		if err == nil && ok {
			err = o.Err // UNSTABLE_OFFSET_COMMIT, say: not "no cursor"
		}
		if noGroup(err) {
			return -1, "", true
		}
		if err == nil {
			if ok && o.At >= 0 {
				return o.At, o.Metadata, true
			}
			return -1, "", true
		}
		d.log.Warn("cannot read a subscription's cursor; trying again", "subscription", id, "err", err)
		if !wait.Wait(ctx) {
			return 0, "", false
		}
	}
}

// noGroup reports whether err says a subscription's group does not exist:
// it has no cursor (kfake answers so for a group never committed to, as
// for a subscription record written by another client; Apache Kafka
// answers with no offsets).
func noGroup(err error) bool { return errors.Is(err, kerr.GroupIDNotFound) }

// end takes an ended lane out of the partition and commits its cursor,
// unless the partition was lost (its new owner has it already).
func (ph *partHead) end(l *lane) {
	ph.mu.Lock()
	if ph.lanes[l.w.sub.ID] == l {
		delete(ph.lanes, l.w.sub.ID)
	}
	l.gone, l.queue, l.held = true, nil, 0
	commit := l.ready && !ph.lost && l.mark != l.committed && !l.w.sink.movesCursor()
	ph.mu.Unlock()
	if commit {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(l.w.ctx), closeGrace)
		defer cancel()
		ph.r.commit(ctx, []*lane{l})
	}
}

// fallBehind hands the lane to the catch-up path, under ph.mu.
func (l *lane) fallBehind() {
	l.behind = true
	l.readOn(0)
}

// readOn queues a lane behind for a catch-up turn, unless it has one,
// while it holds fewer than laneLow records, pending (taken by its
// drain, not done) included; under ph.mu.
func (l *lane) readOn(pending int) {
	if l.behind && !l.queued && l.held+pending < laneLow {
		l.queued = true
		l.ph.catchup.add(l)
	}
}

// shared is records read once for every lane that takes them, each
// parsed once (subscriptions.Event, safe for concurrent use): the lanes
// queue the same slices and judge them on their own goroutines.
type shared struct {
	recs []*kgo.Record
	evs  []*subscriptions.Event
}

func newShared(recs []*kgo.Record) shared {
	evs := make([]*subscriptions.Event, len(recs))
	for i, r := range recs {
		evs[i] = subscriptions.NewEvent(r)
	}
	return shared{recs, evs}
}

// feed hands records the head read to every lane at the head, unjudged:
// each lane judges them on its own goroutine (judge.go), so however long
// one subscription's filter or transform takes, the head and the other
// lanes do not wait for it. A lane too full to take them falls behind;
// the head never waits.
func (ph *partHead) feed(recs []*kgo.Record) {
	sh := newShared(recs)
	ph.mu.Lock()
	defer ph.mu.Unlock()
	for _, l := range ph.lanes {
		if !l.ready || l.behind {
			continue
		}
		if l.fed < ph.pos || l.held >= laneHigh {
			l.fallBehind()
			continue
		}
		l.take(sh)
	}
	ph.pos = max(ph.pos, recs[len(recs)-1].Offset+1)
}

// take queues the records at or after the lane's fed offset, under ph.mu.
func (l *lane) take(sh shared) {
	i, _ := slices.BinarySearchFunc(sh.recs, l.fed, func(r *kgo.Record, fed int64) int { return cmp.Compare(r.Offset, fed) })
	if i == len(sh.recs) {
		return
	}
	sh = shared{sh.recs[i:], sh.evs[i:]}
	l.queue = append(l.queue, sh)
	l.held += len(sh.recs)
	l.fed = sh.recs[len(sh.recs)-1].Offset + 1
	l.signal()
}

// takeQueue takes the lane's queue for its drain, which holds pending
// items already, and judges it (judge.go) without holding the
// partition's lock; a lane behind with room is read on. A subscription
// whose judging runs expressions takes at most judgeChunk records a
// turn, so what it judged is delivered while it judges on. The items
// may end early when ctx ends.
func (l *lane) takeQueue(ctx context.Context, pending int) []item {
	c := l.w.st.compiled()
	most := laneHigh
	if c.Evaluates() {
		most = judgeChunk
	}
	ph := l.ph
	ph.mu.Lock()
	var q []shared
	n := 0
	for len(l.queue) > 0 && n < most {
		sh := l.queue[0]
		k := min(len(sh.recs), most-n)
		q = append(q, shared{sh.recs[:k], sh.evs[:k]})
		if k == len(sh.recs) {
			l.queue = l.queue[1:]
		} else {
			l.queue[0] = shared{sh.recs[k:], sh.evs[k:]}
		}
		n += k
	}
	l.held -= n
	if l.held > 0 {
		l.signal() // the drain comes back for the rest
	}
	l.readOn(n + pending)
	ph.mu.Unlock()
	return l.w.judgeQueue(ctx, c, q)
}

// judgeChunk bounds the records a lane whose subscription runs
// expressions judges before its drain delivers them.
const judgeChunk = 100

// signal wakes the lane's drain.
func (l *lane) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// advance moves the lane's cursor past rec, the drain holding pending items
// after it.
func (l *lane) advance(rec *kgo.Record, pending int) {
	ph := l.ph
	ph.mu.Lock()
	defer ph.mu.Unlock()
	l.mark = max(l.mark, rec.Offset+1)
	l.readOn(pending)
}

// progress returns the lane's cursor, whether it moved since it was last
// committed, and its replayTo.
func (l *lane) progress() (mark int64, moved bool, replayTo int64) {
	l.ph.mu.Lock()
	defer l.ph.mu.Unlock()
	return l.mark, l.mark != l.committed, l.replayTo
}

// drop stops the lanes of revoked or lost partitions; a revoked
// partition's cursors are committed before its next owner reads them.
func (r *reader) drop(ctx context.Context, parts []int32, lost bool) {
	var phs []*partHead
	r.mu.Lock()
	for _, p := range parts {
		if ph := r.parts[p]; ph != nil {
			delete(r.parts, p)
			phs = append(phs, ph)
		}
	}
	r.mu.Unlock()
	var lanes []*lane
	for _, ph := range phs {
		ph.mu.Lock()
		ph.lost = true // the lanes do not commit one by one
		for _, l := range ph.lanes {
			lanes = append(lanes, l)
		}
		ph.mu.Unlock()
		ph.cancel()
	}
	for _, l := range lanes {
		<-l.done
	}
	if lost {
		return
	}
	lanes = slices.DeleteFunc(lanes, func(l *lane) bool { return !l.ready || l.mark == l.committed || l.w.sink.movesCursor() })
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeGrace)
	defer cancel()
	r.commit(ctx, lanes)
}

// commitLoop commits moved cursors every commitEvery until ctx ends.
func (r *reader) commitLoop(ctx context.Context) {
	t := time.NewTicker(commitEvery)
	defer t.Stop()
	var after string // the subscription the last turn ended with
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		moved := make(map[string][]*lane)
		urgent := make(map[string]bool) // a lane not committed since it started: a rewind waits for it
		r.mu.Lock()
		for _, ph := range r.parts {
			ph.mu.Lock()
			for _, l := range ph.lanes {
				if l.ready && l.mark != l.committed && !l.w.sink.movesCursor() {
					moved[l.w.sub.ID] = append(moved[l.w.sub.ID], l)
					if l.committed < 0 {
						urgent[l.w.sub.ID] = true
					}
				}
			}
			ph.mu.Unlock()
		}
		r.mu.Unlock()
		var lanes []*lane
		for id := range urgent {
			lanes = append(lanes, moved[id]...)
			delete(moved, id)
		}
		var ids []string
		ids, after = inTurn(slices.Sorted(maps.Keys(moved)), after, commitBudget)
		for _, id := range ids {
			lanes = append(lanes, moved[id]...)
		}
		r.commit(ctx, lanes)
	}
}

// commitBudget bounds the subscriptions whose cursors a dispatcher
// commits per tick of commitEvery: with more of them moved, they take
// turns, so the commits a dispatcher sends per second do not grow with
// its subscriptions. A cursor waits at most one tick per commitBudget
// subscriptions moved (10 s with 1,000 of them), which only bounds what
// a crash delivers again. A lane not committed since it started (a
// rewind waits for that commit) is committed at the next tick, and
// revocations and stops commit every cursor.
const commitBudget = 100

// inTurn picks up to n of ids (sorted) for this turn: those after after,
// then from the start, and returns them and the last one picked, where
// the next turn continues.
func inTurn(ids []string, after string, n int) (picked []string, last string) {
	if len(ids) <= n {
		return ids, after
	}
	i, _ := slices.BinarySearch(ids, after)
	if i < len(ids) && ids[i] == after {
		i++
	}
	for len(picked) < n {
		picked = append(picked, ids[i%len(ids)])
		i++
	}
	return picked, picked[len(picked)-1]
}

// commitConcurrency bounds the commits in flight, one per subscription.
const commitConcurrency = 8

// commit commits the lanes' cursors, one commit per subscription's group
// (a group with no members).
func (r *reader) commit(ctx context.Context, lanes []*lane) {
	d := r.d
	topic := string(d.cluster.Names.Events)
	bySub := make(map[string][]*lane)
	offsets := make(map[string]kadm.Offsets)
	for _, l := range lanes {
		l.ph.mu.Lock()
		mark := l.mark
		l.ph.mu.Unlock()
		id := l.w.sub.ID
		offs := offsets[id]
		offs.Add(kadm.Offset{Topic: topic, Partition: l.ph.id, At: mark, LeaderEpoch: -1, Metadata: l.w.sub.Rewind.Tag()})
		offsets[id] = offs
		bySub[id] = append(bySub[id], l)
	}
	adm := d.cluster.Admin()
	sem := make(chan struct{}, commitConcurrency)
	var wg sync.WaitGroup
	for id, offs := range offsets {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			resp, err := adm.CommitOffsets(ctx, string(d.cluster.Names.SubscriptionGroup(id)), offs)
			if err == nil {
				err = resp.Error()
			}
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					d.log.Warn("cannot commit a subscription's cursor", "subscription", id, "err", err)
				}
				return
			}
			for _, l := range bySub[id] {
				l.ph.mu.Lock()
				if o, ok := offs.Lookup(topic, l.ph.id); ok {
					l.committed = o.At
				}
				l.ph.mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// catchup reads for lanes behind the head: a bounded number of readers
// (CatchUpReaders), each its own client reading one lane's partition from
// the lane's fed offset at a time, a fetch a turn, the lanes taking turns
// in order of arrival. A lane that reaches the head joins it.
type catchup struct {
	d    *Dispatcher
	mu   sync.Mutex
	wait []*lane
	wake chan struct{}
}

// add queues l for a turn; the caller holds l's partition mu.
func (c *catchup) add(l *lane) {
	c.mu.Lock()
	c.wait = append(c.wait, l)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *catchup) next(ctx context.Context) *lane {
	for {
		c.mu.Lock()
		if len(c.wait) > 0 {
			l := c.wait[0]
			c.wait = slices.Delete(c.wait, 0, 1)
			more := len(c.wait) > 0
			c.mu.Unlock()
			if more {
				select {
				case c.wake <- struct{}{}:
				default:
				}
			}
			return l
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
		}
	}
}

// catchUpWait bounds one turn's fetch.
const catchUpWait = 2 * time.Second

func (c *catchup) run(ctx context.Context) {
	d := c.d
	topic := string(d.cluster.Names.Events)
	cl, err := d.cluster.NewClient(
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond),
		kgo.FetchMaxBytes(4<<20),
		kgo.FetchMaxPartitionBytes(1<<20),
	)
	if err != nil {
		d.log.Error("catch-up client", "err", err)
		return
	}
	defer cl.Close()
	for {
		l := c.next(ctx)
		if l == nil {
			return
		}
		c.turn(ctx, cl, topic, l)
	}
}

// turn reads one fetch for l from its fed offset.
func (c *catchup) turn(ctx context.Context, cl *kgo.Client, topic string, l *lane) {
	ph := l.ph
	ph.mu.Lock()
	if l.gone {
		l.queued = false
		ph.mu.Unlock()
		return
	}
	from := l.fed
	ph.mu.Unlock()
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: {ph.id: kgo.NewOffset().At(from)}})
	tctx, cancel := context.WithTimeout(ctx, catchUpWait)
	var recs []*kgo.Record
	for len(recs) == 0 && tctx.Err() == nil {
		fs := cl.PollFetches(tctx)
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if p.Topic == topic && p.Partition == ph.id {
				for _, r := range p.Records {
					if r.Offset >= from {
						recs = append(recs, r)
					}
				}
			}
		})
	}
	cancel()
	cl.RemoveConsumePartitions(map[string][]int32{topic: {ph.id}})
	var sh shared
	if len(recs) > 0 {
		sh = newShared(recs)
	}
	ph.mu.Lock()
	defer ph.mu.Unlock()
	l.queued = false
	if l.gone || l.fed != from {
		return
	}
	if len(recs) > 0 {
		l.take(sh)
	}
	if l.fed >= ph.pos {
		l.behind = false // at the head: it feeds the lane from now on
		return
	}
	if l.held < laneLow {
		l.queued = true
		c.add(l)
	}
}
