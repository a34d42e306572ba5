// Topic subscriptions: a subscription with a topic has its matching
// events written to that Kafka topic exactly once, in transactions that
// also move its cursor.
//
// One transactional producer per dispatcher (Names.TopicWriter), created
// when the first topic subscription runs, writes for every topic
// subscription's lane on every partition the dispatcher owns: a
// transaction carries the records of the lanes' batches, their ledger
// entries (delivery attempts), each subscription's cursor as a
// transactional offset commit of its group (<prefix>-sub-<id>, a group
// with no members), and last a transactional offset commit to
// <prefix>-dispatch under the head's member id and generation. That last
// commit is the fencing (KIP-447): a dispatcher that lost a partition is
// no longer a member of that generation, the broker refuses its commit and
// its transaction aborts; one revoked finishes its transaction before it
// lets the partition go; the next owner reads the cursors with
// require_stable, so once every transaction that moves them has ended.
// The cursors of topic lanes move only there, never in commitLoop.
//
// The producer speaks the transaction protocol of before KIP-890 part 2
// (Kafka 4's transaction.version 2): a transaction that moves cursors
// only (a new lane's, or past records no subscription takes) is ended by
// an EndTxn of the dispatcher's own, which the client does not send
// without records, and under KIP-890 part 2 that EndTxn would bump the
// producer epoch behind the client's back. Kafka 4 serves both.

package dispatch

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/hookstream/hookstream/internal/backoff"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// topicTxnTimeout bounds one transaction, and is its timeout on the
// broker: a dispatcher killed mid-transaction holds its cursors and its
// records from read_committed readers no longer, and less than the group
// session timeout after which its partitions move.
const topicTxnTimeout = 10 * time.Second

// topicWriter runs the transactions of topic subscriptions.
type topicWriter struct {
	d *Dispatcher

	mu    sync.Mutex
	queue []*topicBatch // submitted, not yet in a transaction
	wake  chan struct{}

	clMu   sync.Mutex
	cl     *kgo.Client // the transactional producer; nil until needed, or after a failure
	closed bool
}

// topicBatch is what one lane hands to a transaction: records for its
// topic and its cursor after them.
type topicBatch struct {
	part   int32 // the lane's partition
	sub    string
	recs   []*kgo.Record // to the subscription's topic, then their ledger entries
	cursor int64
	tag    string // the cursor's commit metadata (Rewind.Tag)
	taken  bool   // in a transaction: its outcome decides
	err    error  // the first error of its records, under the writer's mu
	done   chan error
}

// errTopicStopped wraps an error that stops a topic subscription: its
// topic is missing or refuses it, or refuses a record for good.
type errTopicStopped struct{ err error }

func (e *errTopicStopped) Error() string { return e.err.Error() }
func (e *errTopicStopped) Unwrap() error { return e.err }

// stopsTopic reports whether a produce error stops the subscription whose
// record it is: the topic is gone, refuses the dispatcher, or can never
// take the record. Anything else (leaders moving, timeouts, fencing) is
// tried again.
func stopsTopic(err error) bool {
	for _, e := range []*kerr.Error{kerr.UnknownTopicOrPartition, kerr.UnknownTopicID, kerr.TopicAuthorizationFailed, kerr.InvalidTopicException} {
		if errors.Is(err, e) {
			return true
		}
	}
	return topics.IsPermanentProduceErr(err)
}

func newTopicWriter(d *Dispatcher) *topicWriter {
	return &topicWriter{d: d, wake: make(chan struct{}, 1)}
}

// write hands b to the next transaction and returns its outcome: nil once
// committed. When ctx ends first, b is withdrawn, unless a transaction
// has it: then its outcome is waited for, so a partition revoked lets go
// once its writes are committed or aborted.
func (tw *topicWriter) write(ctx context.Context, b *topicBatch) error {
	b.done, b.taken, b.err = make(chan error, 1), false, nil
	tw.mu.Lock()
	tw.queue = append(tw.queue, b)
	tw.mu.Unlock()
	select {
	case tw.wake <- struct{}{}:
	default:
	}
	select {
	case err := <-b.done:
		return err
	case <-ctx.Done():
	}
	tw.mu.Lock()
	if !b.taken {
		for i, q := range tw.queue {
			if q == b {
				tw.queue = append(tw.queue[:i], tw.queue[i+1:]...)
				break
			}
		}
		tw.mu.Unlock()
		return ctx.Err()
	}
	tw.mu.Unlock()
	return <-b.done
}

// run runs a transaction for what the lanes handed over, one at a time,
// until ctx ends; head is the dispatch group's member.
func (tw *topicWriter) run(ctx context.Context, head *kgo.Client) {
	defer tw.close()
	d := tw.d
	wait := backoff.New(100*time.Millisecond, 5*time.Second)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tw.wake:
		}
		tw.mu.Lock()
		batches := tw.queue
		tw.queue = nil
		for _, b := range batches {
			b.taken = true
		}
		tw.mu.Unlock()
		if len(batches) == 0 {
			continue
		}
		err := tw.transact(ctx, head, batches)
		outcome := "committed"
		if err != nil {
			outcome = "aborted"
			d.log.Warn("topic subscriptions: transaction aborted; trying again", "batches", len(batches), "err", err)
		}
		d.metrics.topicTxns.WithLabelValues(outcome).Inc()
		for _, b := range batches {
			if err == nil {
				n := 0
				for _, r := range b.recs {
					if r.Topic != string(d.cluster.Names.DeliveryAttempts) {
						n++
					}
				}
				d.metrics.attempts.WithLabelValues(b.sub, "success").Add(float64(n))
			}
			tw.mu.Lock()
			berr := b.err
			tw.mu.Unlock()
			if berr != nil && stopsTopic(berr) {
				b.done <- &errTopicStopped{berr}
				continue
			}
			b.done <- err
		}
		if err == nil {
			wait.Reset()
		} else if !wait.Wait(ctx) {
			return
		}
	}
}

// init takes the transactional id now, if it is not taken yet: the
// producer fences the one a predecessor left, and aborts its transaction.
func (tw *topicWriter) init(ctx context.Context) error {
	_, err := tw.client(ctx)
	return err
}

// client returns the transactional producer, created and initialized
// when missing.
func (tw *topicWriter) client(ctx context.Context) (*kgo.Client, error) {
	tw.clMu.Lock()
	defer tw.clMu.Unlock()
	if tw.closed {
		return nil, errors.New("topic writer stopped")
	}
	if tw.cl != nil {
		return tw.cl, nil
	}
	d := tw.d
	// Transactions as before KIP-890 part 2: see the file's comment.
	versions := kversion.Stable()
	versions.SetMaxKeyVersion(int16(kmsg.Produce), 11)
	versions.SetMaxKeyVersion(int16(kmsg.TxnOffsetCommit), 4)
	versions.SetMaxKeyVersion(int16(kmsg.EndTxn), 4)
	opts := []kgo.Opt{
		kgo.TransactionalID(d.txnID),
		kgo.TransactionTimeout(topicTxnTimeout),
		kgo.MaxVersions(versions),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(topicTxnTimeout),
	}
	if d.cfg.MaxRecordBytes > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(int32(d.cfg.MaxRecordBytes)))
	}
	cl, err := d.cluster.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	if _, _, err := cl.ProducerID(ctx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("initialize transactional producer %s: %w", d.txnID, err)
	}
	tw.cl = cl
	return cl, nil
}

// reset closes the producer after a failed transaction: the next one
// starts with a new producer, whose initialization aborts what is left.
func (tw *topicWriter) reset() {
	tw.clMu.Lock()
	defer tw.clMu.Unlock()
	if tw.cl != nil {
		tw.cl.Close()
		tw.cl = nil
	}
}

func (tw *topicWriter) close() {
	tw.reset()
	tw.clMu.Lock()
	tw.closed = true
	tw.clMu.Unlock()
}

// transact writes batches in one transaction with their cursors. Any
// failure aborts it (the producer is closed, its successor's
// initialization aborts the transaction) and is returned; a batch whose
// records failed carries the first error.
func (tw *topicWriter) transact(ctx context.Context, head *kgo.Client, batches []*topicBatch) error {
	// A transaction under way finishes even as the dispatcher stops: the
	// lanes of a revoked partition wait for it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), topicTxnTimeout)
	defer cancel()
	member, generation := head.GroupMetadata()
	if member == "" || generation < 0 {
		return errors.New("not a member of the dispatch group (yet)")
	}
	cl, err := tw.client(ctx)
	if err != nil {
		return err
	}
	err = tw.transactOn(ctx, cl, member, generation, batches)
	if err != nil {
		tw.reset()
	}
	return err
}

func (tw *topicWriter) transactOn(ctx context.Context, cl *kgo.Client, member string, generation int32, batches []*topicBatch) error {
	d := tw.d
	if err := cl.BeginTransaction(); err != nil {
		return err
	}
	produced := false
	var wg sync.WaitGroup
	for _, b := range batches {
		for _, rec := range b.recs {
			produced = true
			wg.Add(1)
			// A copy: the client stamps what it produces (time,
			// context), and a batch tried again must start afresh.
			rec := &kgo.Record{Topic: rec.Topic, Key: rec.Key, Value: rec.Value, Headers: rec.Headers}
			cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
				defer wg.Done()
				if err != nil {
					tw.mu.Lock()
					if b.err == nil {
						b.err = fmt.Errorf("%s: %w", rec.Topic, err)
					}
					tw.mu.Unlock()
				}
			})
		}
	}
	written := make(chan struct{})
	go func() {
		wg.Wait()
		close(written)
	}()
	select {
	case <-written:
	case <-ctx.Done():
		tw.reset() // fails the records still buffered
		<-written
		return fmt.Errorf("records not written within %v: %w", topicTxnTimeout, ctx.Err())
	}
	for _, b := range batches {
		tw.mu.Lock()
		err := b.err
		tw.mu.Unlock()
		if err != nil {
			return fmt.Errorf("subscription %s: %w", b.sub, err)
		}
	}
	// The cursors, each subscription's group on its own, then the
	// fencing commit to the dispatch group, after them.
	events := string(d.cluster.Names.Events)
	cursors := make(map[string]map[int32]offsetCommit)
	furthest := make(map[int32]offsetCommit)
	for _, b := range batches {
		group := string(d.cluster.Names.SubscriptionGroup(b.sub))
		if cursors[group] == nil {
			cursors[group] = make(map[int32]offsetCommit)
		}
		p := b.part
		cursors[group][p] = offsetCommit{at: b.cursor, meta: b.tag}
		// Every partition of the transaction: a commit of none would
		// not be checked.
		if o, ok := furthest[p]; !ok || b.cursor > o.at {
			furthest[p] = offsetCommit{at: b.cursor, meta: "topic subscriptions"}
		}
	}
	for group, offs := range cursors {
		if err := tw.commitOffsets(ctx, cl, group, "", -1, nil, events, offs); err != nil {
			return err
		}
	}
	var instance *string
	if d.cfg.InstanceID != "" {
		instance = &d.cfg.InstanceID
	}
	if err := tw.commitOffsets(ctx, cl, string(d.cluster.Names.DispatchGroup()), member, generation, instance, events, furthest); err != nil {
		return fmt.Errorf("fenced as the partitions' owner: %w", err)
	}
	if produced {
		return cl.EndTransaction(ctx, kgo.TryCommit)
	}
	return tw.endTxn(ctx, cl)
}

type offsetCommit struct {
	at   int64
	meta string
}

// commitOffsets adds group's offsets to the transaction: AddOffsetsToTxn,
// then TxnOffsetCommit as member of generation (-1 and "" for a group
// with no members).
func (tw *topicWriter) commitOffsets(ctx context.Context, cl *kgo.Client, group, member string, generation int32, instance *string,
	topic string, offs map[int32]offsetCommit) error {
	d := tw.d
	id, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		return err
	}
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = d.txnID, id, epoch, group
	if err := concurrently(ctx, func() error {
		resp, err := add.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.ErrorCode)
	}); err != nil {
		return fmt.Errorf("add the offsets of %s to the transaction: %w", group, err)
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = d.txnID, group, id, epoch
	req.Generation, req.MemberID, req.InstanceID = generation, member, instance
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic = topic
	for p, o := range offs {
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = p, o.at, -1, kmsg.StringPtr(o.meta)
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("commit the offsets of %s: %w", group, err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("commit the offsets of %s: %w", group, err)
			}
		}
	}
	return nil
}

// endTxn commits a transaction that holds offsets only, which the client
// would not end.
func (tw *topicWriter) endTxn(ctx context.Context, cl *kgo.Client) error {
	id, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		return err
	}
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = tw.d.txnID, id, epoch, true
	if err := concurrently(ctx, func() error {
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.ErrorCode)
	}); err != nil {
		return fmt.Errorf("end the transaction: %w", err)
	}
	// The client began a transaction it never sent: end it on its side.
	return cl.EndTransaction(ctx, kgo.TryCommit)
}

// concurrently runs a transaction request until the coordinator is done
// with the transaction before (CONCURRENT_TRANSACTIONS) or ctx ends.
func concurrently(ctx context.Context, fn func() error) error {
	wait := backoff.New(10*time.Millisecond, 500*time.Millisecond)
	for {
		err := fn()
		if !errors.Is(err, kerr.ConcurrentTransactions) || !wait.Wait(ctx) {
			return err
		}
	}
}

// topicSink is the exactly-once sink of one topic subscription: its
// lanes' records go to its topic in the writer's transactions, which
// move their cursors.
type topicSink struct {
	d   *Dispatcher
	st  *subState
	sub subscriptions.Subscription // as its worker started
	tw  *topicWriter
}

// movesCursor: the transactions commit the cursors.
func (s *topicSink) movesCursor() bool { return true }

// drain writes a lane's records: what the subscription receives goes to
// its topic in the writer's transactions, which move the lane's cursor;
// an event whose transform fails is dead-lettered first (stage
// transform). A topic that stops the subscription disables it, with the
// reason.
func (s *topicSink) drain(ctx context.Context, l *lane) {
	wait := backoff.New(100*time.Millisecond, 10*time.Second)
	var b *topicBatch
	for {
		if b == nil {
			var ok bool
			if b, ok = s.batch(ctx, l); !ok {
				return
			}
		}
		if b == nil {
			select {
			case <-ctx.Done():
				return
			case <-l.wake:
			}
			continue
		}
		err := s.tw.write(ctx, b)
		if err == nil {
			s.committed(l, b)
			b = nil
			wait.Reset()
			continue
		}
		if ctx.Err() != nil {
			return
		}
		var stop *errTopicStopped
		if errors.As(err, &stop) {
			// Written no more: the subscription is disabled (here or by
			// another lane) and its worker stops; the others go on.
			for s.st.enabled() {
				s.d.stopTopic(ctx, s.st, stop.err)
				if !wait.Wait(ctx) {
					return
				}
			}
			<-ctx.Done()
			return
		}
		// The transaction may have committed all the same: its end
		// reached the broker and the answer was lost. Its cursor says.
		committed, ok := s.settled(ctx, b)
		if !ok {
			return
		}
		if committed {
			s.committed(l, b)
			b = nil
			wait.Reset()
			continue
		}
		if !wait.Wait(ctx) {
			return
		}
	}
}

// committed moves the lane's cursor to b's, whose transaction committed;
// events it wrote end the subscription's run of failures.
func (s *topicSink) committed(l *lane, b *topicBatch) {
	l.committedTo(b.cursor)
	if len(b.recs) > 0 {
		s.st.mu.Lock()
		s.st.failures = failureRun{}
		s.st.mu.Unlock()
	}
}

// settled reports whether the transaction that failed to write b
// committed after all, as one whose commit reached the broker and whose
// answer was lost does: b's cursor is then the subscription's. It reads
// the cursor stable once the writer's producer is initialized again,
// which ends that transaction on the broker, committed or aborted; ok is
// false when ctx ended first.
func (s *topicSink) settled(ctx context.Context, b *topicBatch) (committed, ok bool) {
	wait := backoff.New(100*time.Millisecond, 5*time.Second)
	for s.tw.init(ctx) != nil {
		if !wait.Wait(ctx) {
			return false, false
		}
	}
	c, _, ok := s.d.cursor(ctx, s.sub.ID, b.part)
	return ok && c >= b.cursor, ok
}

// batch takes the lane's queue as a batch for the writer: nil when there
// is nothing to write nor a cursor to commit; false when ctx ended while
// dead-lettering.
func (s *topicSink) batch(ctx context.Context, l *lane) (*topicBatch, bool) {
	q := l.takeQueue(ctx, 0)
	mark, moved, replayTo := l.progress()
	if len(q) == 0 && !moved {
		return nil, true
	}
	b := &topicBatch{part: l.ph.id, sub: s.sub.ID, cursor: mark, tag: s.sub.Rewind.Tag()}
	target := topics.Topic(s.sub.Topic)
	now := s.d.now()
	var notes []*kgo.Record
	for _, it := range q {
		b.cursor = it.rec.Offset + 1
		if !it.match {
			continue
		}
		if it.err != nil {
			m := &message{id: string(it.rec.Key), failed: it.err, events: []event{{id: string(it.rec.Key), envelope: it.rec.Value, orig: it.rec}}}
			if !s.d.handOff(ctx, s.sub.ID, m, func(ctx context.Context) error { return s.d.deadLetter(ctx, s.sub.ID, m, 0, result{}) }) {
				return nil, false
			}
			continue
		}
		rec := topics.SubscriptionRecord(target, it.rec, it.part)
		if it.rec.Offset < replayTo {
			markReplay(rec)
		}
		b.recs = append(b.recs, rec)
		a := topics.Attempt{Subscription: s.sub.ID, EventID: string(it.rec.Key), N: 1, Outcome: topics.OutcomeDelivered, At: now}
		notes = append(notes, a.Record(s.d.cluster.Names.DeliveryAttempts))
	}
	b.recs = append(b.recs, notes...)
	return b, true
}

// markReplay marks a record written again by a replay: hs-replay one more
// than the events record's.
func markReplay(rec *kgo.Record) {
	n := 0
	for i, h := range rec.Headers {
		if h.Key == topics.HeaderReplay {
			n, _ = strconv.Atoi(string(h.Value))
			rec.Headers = append(rec.Headers[:i:i], rec.Headers[i+1:]...)
			break
		}
	}
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: topics.HeaderReplay, Value: strconv.AppendInt(nil, int64(n+1), 10)})
}

// committedTo moves the lane's cursor to c, committed by a transaction.
func (l *lane) committedTo(c int64) {
	l.ph.mu.Lock()
	defer l.ph.mu.Unlock()
	l.mark = max(l.mark, c)
	l.committed = l.mark
	l.readOn(0)
}

// stopTopic disables a topic subscription whose topic stopped it, with
// the reason: the other subscriptions go on.
func (d *Dispatcher) stopTopic(ctx context.Context, st *subState, err error) {
	sub := st.current()
	if d.disable(ctx, st, fmt.Sprintf("topic %s cannot be written (%v): fix the topic, then enable the subscription, which creates it when missing", sub.Topic, errorText(err))) {
		d.metrics.topicStopped.WithLabelValues(sub.ID).Inc()
		d.log.Error("topic subscription stopped: its topic cannot be written", "subscription", sub.ID, "topic", sub.Topic, "err", err)
	}
}
