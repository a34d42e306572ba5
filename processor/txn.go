package processor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookstream/hookstream/statestore"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/tracing"
)

// Outcomes of a record.
const (
	outcomeProcessed = "processed"
	outcomeDuplicate = "duplicate"
	outcomeReplayed  = "replayed"
	outcomeFailed    = "failed"
)

// txn is one batch: the records it produces and the state changes that
// wait for its commit.
type txn struct {
	p    *Processor
	sess *kgo.GroupTransactSession

	mu       sync.Mutex
	firstErr error
	// lastChangelog is, per partition, the offset of the last changelog
	// record this transaction wrote.
	lastChangelog map[int32]int64

	// failedRefs are the records whose writes failed permanently, with
	// the first such error; guarded by mu.
	failedRefs map[recordRef]error

	parts    map[int32]*pending
	outcomes map[string]int
	expired  int
	// refused counts state writes refused for their size (stateRecord).
	refused int
	broken  map[int32]error
	// strikesSeen are the struck records this transaction handled.
	strikesSeen []recordRef
	// dlqBytes is the DLQ topic's record limit once dlqRoom read it.
	dlqBytes int64
	// spans are the records' spans, ended with the transaction.
	spans []trace.Span
}

// pending holds one partition's uncommitted state changes.
type pending struct {
	part    *partition
	changes []statestore.Change
	keys    map[string]*keyState
}

// keyState is a key as this transaction knows it.
type keyState struct {
	// read is the key's state in the store, when the transaction read it
	// before changing it: its first change carries it to Apply, which
	// need not read it again.
	read statestore.Read
	// changed says the transaction set the key, to st (nil: deleted).
	changed bool
	st      *statestore.State
}

func newTxn(p *Processor, sess *kgo.GroupTransactSession) *txn {
	return &txn{
		p:             p,
		sess:          sess,
		lastChangelog: make(map[int32]int64),
		parts:         make(map[int32]*pending),
		outcomes:      make(map[string]int, 4),
		broken:        make(map[int32]error),
		failedRefs:    make(map[recordRef]error),
	}
}

func (t *txn) fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.firstErr == nil {
		t.firstErr = err
	}
}

func (t *txn) err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.firstErr
}

// produce sends r in the transaction; a failure aborts the transaction.
// A permanent failure of a write for ingest record ref (nil for a sweep's
// tombstone) strikes that record.
func (t *txn) produce(ctx context.Context, ref *recordRef, r *kgo.Record) {
	t.sess.Produce(ctx, r, func(r *kgo.Record, err error) {
		if err != nil {
			err = fmt.Errorf("produce to %s/%d: %w", r.Topic, r.Partition, err)
			t.fail(err)
			if ref != nil && topics.IsPermanentProduceErr(err) {
				t.struck(*ref, err)
			}
			return
		}
		if r.Topic == string(t.p.cfg.Names.Changelog) {
			t.mu.Lock()
			t.lastChangelog[r.Partition] = max(t.lastChangelog[r.Partition], r.Offset)
			t.mu.Unlock()
		}
	})
}

// emit produces the writes of ingest record ref. Isolated, they are
// produced alone, every earlier write acknowledged first and theirs before
// the next: a failure then is theirs.
func (t *txn) emit(ctx context.Context, ref recordRef, isolate bool, recs ...*kgo.Record) {
	if isolate {
		t.flush(ctx)
	}
	for _, r := range recs {
		t.produce(ctx, &ref, r)
	}
	if isolate {
		t.flush(ctx)
	}
}

// letter is the dead letter of r with its cause, cut to fit the record
// limit if need be, and its event.dead_lettered event.
func (t *txn) letter(ctx context.Context, r *kgo.Record, stage string, cause error, now time.Time) []*kgo.Record {
	letter, logCause := t.cutLetter(r, stage, cause, now)
	t.p.log.Warn("record failed; sent to the DLQ", logAttrs(ctx, r, logCause)...)
	return append([]*kgo.Record{letter}, t.deadLettered(r, stage, cause, now)...)
}

// cutLetter is the dead letter of r with its cause, cut to fit the record
// limit if need be, and the cause to log, which says so.
func (t *txn) cutLetter(r *kgo.Record, stage string, cause error, now time.Time) (*kgo.Record, error) {
	letter := dlqRecord(t.p.cfg.Names.DLQ, r, stage, cause, now)
	if topics.Fit(letter, t.p.cfg.MaxRecordBytes) {
		cause = fmt.Errorf("%w (dead letter cut to %d bytes)", cause, topics.RecordBytes(letter))
	}
	return letter, cause
}

// dlqRecord is the dead letter of r in its own partition of dlq. It can
// exceed the record limit as r could; callers cut it with topics.Fit.
func dlqRecord(dlq topics.Topic, r *kgo.Record, stage string, cause error, failedAt time.Time) *kgo.Record {
	letter := topics.NewDeadLetter(r, stage, cause.Error(), failedAt).Record(dlq)
	letter.Partition = r.Partition
	return letter
}

// deadLettered is the event.dead_lettered operational event of ingest
// record r, dead-lettered at stage with cause: an ingest record written in
// the transaction of its dead letter, keyed by an id derived from r's place
// in the ingest topic, to the partition its key hashes to (not r's), where
// a story query looks for it and its delivery attempts go. The processor
// then turns it into an event like any other: a replay that dead-letters r
// again writes the same key to the same partition again, which
// deduplication drops, and a replay of the operational record itself
// re-emits it with its replay mark. A record that is itself an operational
// event gets none, so a failing one cannot feed itself.
func (t *txn) deadLettered(r *kgo.Record, stage string, cause error, now time.Time) []*kgo.Record {
	if source, _ := topics.EventSourceType(r); source == topics.OperationalSource {
		return nil
	}
	o := &topics.Operational{Type: topics.OpEventDeadLettered, Event: string(r.Key), Stage: stage, Error: cause.Error(), At: now}
	return []*kgo.Record{o.IngestRecord(r.Topic, strconv.Itoa(int(r.Partition)), strconv.FormatInt(r.Offset, 10)).Record(t.p.cfg.Names.Ingest)}
}

// pendingFor is the pending changes of part, made with room for about n
// keys.
func (t *txn) pendingFor(part *partition, n int) *pending {
	pd := t.parts[part.id]
	if pd == nil {
		pd = &pending{part: part, changes: make([]statestore.Change, 0, n), keys: make(map[string]*keyState, n)}
		t.parts[part.id] = pd
	}
	return pd
}

// lookup reads a key's state: this transaction's own changes first.
func (pd *pending) lookup(key []byte) (statestore.State, bool, error) {
	if k, ok := pd.keys[string(key)]; ok {
		switch {
		case !k.changed:
			return k.read.State, k.read.OK, nil
		case k.st == nil:
			return statestore.State{}, false, nil
		}
		return *k.st, true, nil
	}
	st, ok, err := pd.part.store.Get(key)
	if err != nil {
		return statestore.State{}, false, err
	}
	pd.keys[string(key)] = &keyState{read: statestore.Read{State: st, OK: ok}}
	return st, ok, nil
}

// lookupPrepared is lookup for a record whose preparation may have read
// its key's state already.
func (pd *pending) lookupPrepared(key []byte, pr *prepared) (statestore.State, bool, error) {
	if _, ok := pd.keys[string(key)]; !ok && pr.isRead {
		if pr.readErr != nil {
			return statestore.State{}, false, pr.readErr
		}
		pd.keys[string(key)] = &keyState{read: pr.read}
	}
	return pd.lookup(key)
}

func (pd *pending) set(key []byte, st *statestore.State) {
	c := statestore.Change{Key: key, State: st}
	k := pd.keys[string(key)]
	switch {
	case k == nil: // not read: a sweep's tombstone
		pd.keys[string(key)] = &keyState{changed: true, st: st}
	case !k.changed:
		c.Before = &k.read
		k.changed, k.st = true, st
	default:
		k.st = st
	}
	pd.changes = append(pd.changes, c)
}

// partition processes the records of one partition.
func (t *txn) partition(ctx context.Context, id int32, records []*kgo.Record) {
	part := t.p.partition(id)
	if part == nil || !part.ready.Load() {
		// Paused partitions deliver nothing; if records slip through, the
		// batch aborts and rewinds rather than skipping them.
		t.fail(fmt.Errorf("records of partition %d arrived before its store was restored", id))
		return
	}
	pd := t.pendingFor(part, len(records))
	prep := t.p.prepare(part.store, records)
	defer prep.stop()
	for _, r := range records {
		pr := prep.next()
		now := pr.now
		ctx, span := t.span(ctx, r)
		old, ok, err := pd.lookupPrepared(r.Key, pr)
		if err != nil {
			t.broken[id] = err
			t.fail(fmt.Errorf("state store of partition %d: %w", id, err))
			return
		}
		outcome := decide(old, ok, r, now)
		ref := refOf(r)
		s := t.p.strikes[ref]
		if s.n > 0 {
			t.strikesSeen = append(t.strikesSeen, ref)
		}
		if outcome == outcomeDuplicate {
			t.duplicate(ctx, pd, old, r, s, now)
			t.outcomes[outcome]++
			span.SetAttributes(tracing.Outcome.String(outcome))
			continue
		}
		if s.n >= strikeDeadLetter {
			t.handleStruck(ctx, ref, r, s, now)
			t.outcomes[outcomeFailed]++
			span.SetAttributes(tracing.Outcome.String(outcomeFailed))
			continue
		}
		if outcome == outcomeReplayed {
			linkOriginal(span, old)
		}
		st := t.claim(ctx, old, ok, r, outcome, now)
		outcome, err = t.process(ctx, pd, r, st, outcome, pr, s.n == strikeIsolate)
		if err != nil {
			t.fail(err)
			return
		}
		t.outcomes[outcome]++
		span.SetAttributes(tracing.Outcome.String(outcome))
	}
}

// span starts the span of processing ingest record r, a child of the
// context r carries, to end with the transaction (endSpans).
func (t *txn) span(ctx context.Context, r *kgo.Record) (context.Context, trace.Span) {
	ctx, span := t.p.tracer.Start(t.p.cfg.Tracing.Extract(ctx, r.Headers), "process "+r.Topic, trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(semconv.MessagingSystemKafka, semconv.MessagingOperationTypeProcess,
			semconv.MessagingDestinationName(r.Topic), semconv.MessagingDestinationPartitionID(strconv.Itoa(int(r.Partition))),
			semconv.MessagingKafkaOffset(int(r.Offset)), tracing.EventID.String(string(r.Key)))
	}
	t.spans = append(t.spans, span)
	return ctx, span
}

// traceEvent puts the trace context of ctx, the record's span, in its
// events record ev, unless that makes ev outgrow the record limit: the
// event matters more than its trace.
func (t *txn) traceEvent(ctx context.Context, ev *kgo.Record) {
	n := len(ev.Headers)
	t.p.cfg.Tracing.Inject(ctx, ev)
	if topics.RecordBytes(ev) > t.p.cfg.MaxRecordBytes {
		ev.Headers = ev.Headers[:n]
	}
}

// endSpans ends the records' spans with the transaction: an aborted one
// marks them so (their records come again, with new spans).
func (t *txn) endSpans(committed bool) {
	for _, span := range t.spans {
		if !committed {
			span.SetStatus(codes.Error, "transaction aborted")
		}
		span.End()
	}
}

// process writes r's events record, or its dead letter, and its new state
// st; it returns r's outcome. A record that is not an ingest record (no
// key, or headers that do not match it) is dead-lettered without state:
// its key names no event.
func (t *txn) process(ctx context.Context, pd *pending, r *kgo.Record, st *statestore.State, outcome string, pr *prepared, isolate bool) (string, error) {
	ref := refOf(r)
	now, ev, evErr := pr.now, pr.ev, pr.err
	if st.Replays > 0 || !pr.built {
		ev, evErr = t.p.event(r, st.Replays, now)
	}
	if errors.Is(evErr, topics.ErrDecode) {
		t.emit(ctx, ref, isolate, t.letter(ctx, r, topics.StageDecode, evErr, now)...)
		return outcomeFailed, nil
	}
	if evErr != nil {
		failed(st, topics.StageProcess, evErr)
		outcome = outcomeFailed
	}
	cl, err := t.stateRecord(ctx, r.Partition, r.Key, st)
	if errors.Is(err, statestore.ErrTooLarge) {
		t.emit(ctx, ref, isolate, t.letter(ctx, r, topics.StageDecode, err, now)...)
		return outcomeFailed, nil
	}
	if err != nil {
		return "", err
	}
	out := []*kgo.Record{ev}
	if evErr == nil {
		t.traceEvent(ctx, ev)
	}
	if evErr != nil {
		stage := topics.StageProcess
		if _, invalid := errors.AsType[*topics.PayloadError](evErr); invalid {
			stage = topics.StageValidate
		}
		out = t.letter(ctx, r, stage, evErr, now)
	}
	pd.set(r.Key, st)
	t.emit(ctx, ref, isolate, append(out, cl)...)
	return outcome, nil
}

// decide applies the deduplication rule of docs/processing.md to a record
// whose key has state old.
func decide(old statestore.State, ok bool, r *kgo.Record, now time.Time) string {
	switch {
	case !ok || !now.Before(old.Expires):
		return outcomeProcessed
	case old.Status == statestore.Failed:
		return outcomeProcessed // a provider retry may heal it
	case old.Partition == r.Partition && old.Offset == r.Offset:
		return outcomeReplayed // offsets were reset: emit again
	default:
		return outcomeDuplicate
	}
}

// event builds the events record of r, emitted again for the replays-th
// time (0: its first emission), within the record size limit.
func (p *Processor) event(r *kgo.Record, replays uint32, now time.Time) (*kgo.Record, error) {
	env, err := topics.NewEnvelope(r, now)
	if err != nil {
		return nil, err
	}
	env.Replay = int(replays)
	ev, err := topics.EventRecord(p.cfg.Names.Events, r, env)
	if err != nil {
		return nil, fmt.Errorf("encode envelope: %w", err)
	}
	if n := topics.RecordBytes(ev); n > p.cfg.MaxRecordBytes {
		return nil, fmt.Errorf("events record of %d bytes (envelope %d) exceeds the record limit of %d bytes", n, len(ev.Value), p.cfg.MaxRecordBytes)
	}
	return ev, nil
}

// sweep tombstones expired keys of every ready partition, at most
// SweepChunk of each; more reports a partition that may have more.
func (t *txn) sweep(ctx context.Context) (more bool) {
	now := t.p.now()
	t.p.mu.Lock()
	parts := make([]*partition, 0, len(t.p.parts))
	for _, part := range t.p.parts {
		if part.ready.Load() {
			parts = append(parts, part)
		}
	}
	t.p.mu.Unlock()
	for _, part := range parts {
		keys, err := part.store.Expired(now, t.p.cfg.SweepChunk)
		if err != nil {
			t.broken[part.id] = err
			t.fail(fmt.Errorf("state store of partition %d: %w", part.id, err))
			continue
		}
		more = more || len(keys) == t.p.cfg.SweepChunk
		if len(keys) == 0 {
			continue
		}
		pd := t.pendingFor(part, len(keys))
		for _, k := range keys {
			pd.set(k, nil)
			t.produce(ctx, nil, &kgo.Record{Topic: string(t.p.cfg.Names.Changelog), Partition: part.id, Key: k})
		}
		t.expired += len(keys)
	}
	return more
}

// finish waits for every record of the transaction to be acknowledged,
// then strikes the records whose writes failed permanently.
func (t *txn) finish(ctx context.Context) {
	t.flush(ctx)
	t.remember()
}

// flush waits for every record produced so far to be acknowledged.
func (t *txn) flush(ctx context.Context) {
	if err := t.sess.Client().Flush(ctx); err != nil {
		t.fail(fmt.Errorf("flush: %w", err))
	}
}

// apply writes the committed state changes to the stores. A store that
// cannot be written goes back to restoring: the changelog has the changes.
func (t *txn) apply() {
	// The partitions' stores are independent: they are written at once.
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	for id, pd := range t.parts {
		if len(pd.changes) == 0 {
			continue
		}
		wg.Go(func() {
			if err := pd.part.store.Apply(pd.changes, t.lastChangelog[id]+1); err != nil {
				mu.Lock()
				t.broken[id] = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for outcome, n := range t.outcomes {
		t.p.metrics.committed(outcome, n)
	}
	t.p.metrics.expired.Add(float64(t.expired))
	t.p.metrics.stateRefused.Add(float64(t.refused))
	t.forget()
	t.rebuildBroken()
}

// rebuildBroken sends partitions whose store failed back to restoring.
func (t *txn) rebuildBroken() {
	for id, err := range t.broken {
		t.p.rebuild(t.sess.Client(), id, err)
	}
}

// metadataMinAge is the least time between two metadata updates of a
// session's client: how long a produce answered CONCURRENT_TRANSACTIONS
// waits to be retried, at most (see clientOpts).
const metadataMinAge = 20 * time.Millisecond

// txnLinger is how long a record produced in a transaction may wait to be
// sent: a transaction's records go at its flush (finish), a few requests
// per broker, rather than in many small ones as the batch is processed,
// each waiting for the replicas; on a loaded 3-node cluster the flush took
// half as long again with them. A batch that takes longer to process
// starts sending after it.
const txnLinger = 100 * time.Millisecond
