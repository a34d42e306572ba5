package processor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookstream/hookstream/statestore"
	"github.com/hookstream/hookstream/topics"
)

// The ledger: each key's state is also its event's story (statestore.State).
// The processor writes it in the transactions that decide the event: the
// record that claims the key, each duplicate dropped, each replay and
// failure, and each delivery attempt read from the attempts topic, whose
// partition p this instance owns with ingest partition p (copartitioned).

// claim is the new state of a key claimed by ingest record r at now, in
// ctx, r's span: the story so far (old, unless it expired) with r's place
// and time, and the trace of r's span, unless a replay's: a replay keeps
// the trace of the emission it repeats.
func (t *txn) claim(ctx context.Context, old statestore.State, ok bool, r *kgo.Record, outcome string, now time.Time) *statestore.State {
	st := &statestore.State{Status: statestore.Done, Partition: r.Partition, Offset: r.Offset, FirstSeen: now, Expires: now.Add(t.p.cfg.TTL)}
	if ok && now.Before(old.Expires) {
		st.FirstSeen = old.FirstSeen
		st.ReceivedAt = old.ReceivedAt
		st.Duplicates, st.LastDuplicateAt = old.Duplicates, old.LastDuplicateAt
		st.Replays, st.LastReplayAt = old.Replays, old.LastReplayAt
		st.Deliveries, st.Omitted = old.Deliveries, old.Omitted
	}
	if outcome == outcomeReplayed {
		st.Replays++
		st.LastReplayAt = now
		st.Trace = old.Trace
	}
	if st.Trace == (statestore.Trace{}) {
		st.Trace = ledgerTrace(trace.SpanContextFromContext(ctx))
	}
	if at, ok := receivedAt(r); ok && (st.ReceivedAt.IsZero() || outcome != outcomeReplayed) {
		st.ReceivedAt = at
	}
	return st
}

// failed marks st failed at stage with cause.
func failed(st *statestore.State, stage string, cause error) {
	st.Status = statestore.Failed
	st.FailStage, st.FailError = stage, statestore.Cut(cause.Error())
}

// receivedAt is the hs-received-at of an ingest record.
func receivedAt(r *kgo.Record) (time.Time, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == topics.HeaderReceivedAt {
			at, err := time.Parse(time.RFC3339Nano, string(r.Headers[i].Value))
			return at.UTC(), err == nil
		}
	}
	return time.Time{}, false
}

// duplicate counts a duplicate of the key in its story. A duplicate is
// dropped, never dead-lettered: one whose count was refused alone (struck
// s.n >= strikeDeadLetter times) is dropped without it.
func (t *txn) duplicate(ctx context.Context, pd *pending, old statestore.State, r *kgo.Record, s strike, now time.Time) {
	if s.n >= strikeDeadLetter {
		t.p.log.Warn("duplicate dropped without counting it in its story: its state write was refused", logAttrs(ctx, r, s.cause)...)
		return
	}
	old.Duplicates++
	old.LastDuplicateAt = now
	ref := refOf(r)
	t.writeState(ctx, pd, &ref, s.n == strikeIsolate, r.Key, &old)
}

// writeState sets key's new state st in the transaction: in the pending
// changes and on the changelog, as a write of ingest record ref (nil for
// none), isolated if asked (emit). A state that cannot fit a changelog
// record even without its deliveries is not written: the key keeps its
// state.
func (t *txn) writeState(ctx context.Context, pd *pending, ref *recordRef, isolate bool, key []byte, st *statestore.State) {
	cl, err := t.stateRecord(ctx, pd.part.id, key, st)
	switch {
	case errors.Is(err, statestore.ErrTooLarge):
		t.p.log.Error("state not written: its changelog record exceeds the record limit; the event keeps its story as it was",
			"partition", pd.part.id, "event_id", string(key), stateTraceID(ctx, st), "err", err)
		return
	case err != nil:
		t.fail(err)
		return
	}
	pd.set(key, st)
	if ref == nil {
		t.produce(ctx, nil, cl)
		return
	}
	t.emit(ctx, *ref, isolate, cl)
}

// stateRecord is the changelog record of key's new state st, within the
// record limit: a state that would outgrow it is refused, counted and
// logged, and st loses its least recently attempted deliveries (counted
// as omitted) until it fits. An error wrapping statestore.ErrTooLarge
// says that even st without deliveries cannot fit.
func (t *txn) stateRecord(ctx context.Context, partition int32, key []byte, st *statestore.State) (*kgo.Record, error) {
	cl := &kgo.Record{Topic: string(t.p.cfg.Names.Changelog), Partition: partition, Key: key}
	room := t.p.cfg.MaxRecordBytes - topics.RecordBytes(cl)
	n := len(st.Deliveries)
	value, err := st.MarshalWithin(int(max(room, 0)))
	if errors.Is(err, statestore.ErrTooLarge) || len(st.Deliveries) < n {
		t.refused++
	}
	if err != nil {
		return nil, fmt.Errorf("state of %s (key of %d bytes), record limit %d bytes: %w", key, len(key), t.p.cfg.MaxRecordBytes, err)
	}
	if len(st.Deliveries) < n {
		t.p.log.Warn("state refused: its changelog record exceeds the record limit; written without its least recently attempted deliveries",
			"partition", partition, "event_id", string(key), stateTraceID(ctx, st), "omitted", n-len(st.Deliveries), "limit", t.p.cfg.MaxRecordBytes)
	}
	cl.Value = value
	return cl, nil
}

// attempts folds delivery attempts of partition id into their events'
// stories, each key's state written once. An attempt of a key the store
// does not hold (expired, or an event written to the events topic by
// something else) is skipped.
func (t *txn) attempts(ctx context.Context, id int32, records []*kgo.Record) {
	part := t.p.partition(id)
	if part == nil || !part.ready.Load() {
		// Its store is not here (yet): the batch aborts and rewinds, and
		// the partition waits, paused, for its store.
		t.sess.Client().PauseFetchPartitions(map[string][]int32{string(t.p.cfg.Names.DeliveryAttempts): {id}})
		t.fail(fmt.Errorf("attempts of partition %d arrived before its store was restored", id))
		return
	}
	pd := t.pendingFor(part, len(records))
	folded := make(map[string]*statestore.State)
	var keys [][]byte // in the order of their first attempt here
	for _, r := range records {
		a, err := topics.ParseAttempt(r)
		if err != nil {
			t.p.log.Warn("delivery attempt record skipped", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
			continue
		}
		st, ok := folded[string(r.Key)]
		if !ok {
			old, ok, err := pd.lookup(r.Key)
			if err != nil {
				t.broken[id] = err
				t.fail(fmt.Errorf("state store of partition %d: %w", id, err))
				return
			}
			if !ok || !t.p.now().Before(old.Expires) {
				continue
			}
			st = folding(old)
			folded[string(r.Key)] = st
			keys = append(keys, r.Key)
		}
		record(st, a)
	}
	for _, key := range keys {
		t.writeState(ctx, pd, nil, false, key, folded[string(key)])
	}
}

// folding is old taking attempts: a copy whose deliveries record may
// change in place (old's are shared with the pending changes).
func folding(old statestore.State) *statestore.State {
	old.Deliveries = slices.Clone(old.Deliveries)
	return &old
}

// record adds attempt a to st's deliveries: the subscription's entry
// moves to the end (the deliveries are in the order of their last attempt
// record), and past statestore.MaxDeliveries the first, least recently
// attempted, are dropped and counted as omitted. A subscription without
// an entry whose record is not a first attempt had one, dropped: it is no
// longer omitted, and its new entry counts its attempts from a's number.
// It changes st's Deliveries in place (folding copies them), not the
// Recent tries they share with the pending changes.
func record(st *statestore.State, a *topics.Attempt) {
	d := statestore.Delivery{Subscription: a.Subscription}
	i := slices.IndexFunc(st.Deliveries, func(e statestore.Delivery) bool { return e.Subscription == a.Subscription })
	if i >= 0 {
		d = st.Deliveries[i]
		st.Deliveries = slices.Delete(st.Deliveries, i, i+1)
	}
	real := a.Outcome == topics.OutcomeDelivered || a.Outcome == topics.OutcomeFailed
	if i < 0 && st.Omitted > 0 && (a.N > 1 || !real) {
		st.Omitted--
	}
	if drop := len(st.Deliveries) + 1 - statestore.MaxDeliveries; drop > 0 {
		st.Deliveries = slices.Delete(st.Deliveries, 0, drop)
		st.Omitted += uint32(drop)
	}
	d.Outcome, d.Status = a.Outcome, a.Status
	n := uint32(min(a.N, math.MaxUint32)) // ParseAttempt refuses a negative N
	switch a.Outcome {
	case topics.OutcomeDelivered, topics.OutcomeFailed:
		d.Attempts = max(d.Attempts+1, n)
		d.DueAt = time.Time{}
		try := statestore.Try{N: n, Outcome: a.Outcome, Status: a.Status, At: a.At, Latency: a.Latency, Error: statestore.Cut(a.Error), Resend: a.Resend}
		d.Recent = append(slices.Clone(d.Recent[max(0, len(d.Recent)-statestore.RecentTries+1):]), try)
		if a.Outcome == topics.OutcomeDelivered {
			d.DeliveredAt = a.At
		}
	case topics.OutcomeRetrying:
		d.Attempts = max(d.Attempts, n)
		d.DueAt = a.DueAt
	case topics.OutcomeDeadLettered:
		d.Attempts = max(d.Attempts, n)
		d.DueAt = time.Time{}
		d.DeadLetteredAt = a.At
	}
	st.Deliveries = append(st.Deliveries, d)
}
