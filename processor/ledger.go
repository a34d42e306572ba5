package processor

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/statestore"
	"github.com/hookstream/hookstream/topics"
)

// The ledger: each key's state is also its event's story (statestore.State).
// The processor writes it in the transactions that decide the event: the
// record that claims the key, each duplicate dropped, each replay and
// failure, and each delivery attempt read from the attempts topic, whose
// partition p this instance owns with ingest partition p (copartitioned).

// claim is the new state of a key claimed by ingest record r at now: the
// story so far (old, unless it expired) with r's place and time.
func (t *txn) claim(old statestore.State, ok bool, r *kgo.Record, outcome string, now time.Time) *statestore.State {
	st := &statestore.State{Status: statestore.Done, Partition: r.Partition, Offset: r.Offset, FirstSeen: now, Expires: now.Add(t.p.cfg.TTL)}
	if ok && now.Before(old.Expires) {
		st.FirstSeen = old.FirstSeen
		st.ReceivedAt = old.ReceivedAt
		st.Duplicates, st.LastDuplicateAt = old.Duplicates, old.LastDuplicateAt
		st.Replays, st.LastReplayAt = old.Replays, old.LastReplayAt
		st.Deliveries = old.Deliveries
	}
	if outcome == outcomeReplayed {
		st.Replays++
		st.LastReplayAt = now
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

// duplicate counts a duplicate of the key in its story.
func (t *txn) duplicate(ctx context.Context, pd *pending, old statestore.State, r *kgo.Record, now time.Time) {
	old.Duplicates++
	old.LastDuplicateAt = now
	ref := refOf(r)
	t.writeState(ctx, pd, &ref, r.Key, &old)
}

// writeState sets key's new state st in the transaction: in the pending
// changes and on the changelog.
func (t *txn) writeState(ctx context.Context, pd *pending, ref *recordRef, key []byte, st *statestore.State) {
	value, err := st.MarshalBinary()
	if err != nil {
		t.fail(fmt.Errorf("encode state of %s: %w", key, err))
		return
	}
	pd.set(key, st)
	t.produce(ctx, ref, &kgo.Record{Topic: string(t.p.cfg.Names.Changelog), Partition: pd.part.id, Key: key, Value: value})
}

// attempts folds delivery attempts of partition id into their events'
// stories. An attempt of a key the store does not hold (expired, or an
// event written to the events topic by something else) is skipped.
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
	for _, r := range records {
		a, err := topics.ParseAttempt(r)
		if err != nil {
			t.p.log.Warn("delivery attempt record skipped", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
			continue
		}
		old, ok, err := pd.lookup(r.Key)
		if err != nil {
			t.broken[id] = err
			t.fail(fmt.Errorf("state store of partition %d: %w", id, err))
			return
		}
		if !ok || !t.p.now().Before(old.Expires) {
			continue
		}
		record(&old, a)
		t.writeState(ctx, pd, nil, r.Key, &old)
	}
}

// record adds attempt a to st's deliveries; st's Deliveries are copied,
// never changed in place (pending states share them).
func record(st *statestore.State, a *topics.Attempt) {
	i := slices.IndexFunc(st.Deliveries, func(d statestore.Delivery) bool { return d.Subscription == a.Subscription })
	st.Deliveries = slices.Clone(st.Deliveries)
	if i < 0 {
		st.Deliveries = append(st.Deliveries, statestore.Delivery{Subscription: a.Subscription})
		i = len(st.Deliveries) - 1
	}
	d := &st.Deliveries[i]
	d.Outcome, d.Status = a.Outcome, a.Status
	switch a.Outcome {
	case topics.OutcomeDelivered, topics.OutcomeFailed:
		d.Attempts++
		d.DueAt = time.Time{}
		try := statestore.Try{N: uint32(a.N), Outcome: a.Outcome, Status: a.Status, At: a.At, Latency: a.Latency, Error: statestore.Cut(a.Error)}
		d.Recent = append(slices.Clone(d.Recent[max(0, len(d.Recent)-statestore.RecentTries+1):]), try)
		if a.Outcome == topics.OutcomeDelivered {
			d.DeliveredAt = a.At
		}
	case topics.OutcomeRetrying:
		d.DueAt = a.DueAt
	case topics.OutcomeDeadLettered:
		d.DueAt = time.Time{}
		d.DeadLetteredAt = a.At
	}
}
