package processor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/backoff"
	"github.com/hookstream/hookstream/statestore"
)

// partition is one assigned ingest partition and its state store.
type partition struct {
	id int32
	// store is set by the restore before ready turns true, and used by the
	// processing loop only while ready.
	store *statestore.Store
	ready atomic.Bool
	// query is held by Lookup while it reads the store, and by drop
	// while it closes it.
	query  sync.RWMutex
	cancel context.CancelFunc
	done   chan struct{} // closed when the restore goroutine ends
}

// onAssigned pauses new partitions and restores their stores; they resume
// once restored. kgo calls it at the start of every group session, even
// with nothing new, never during a batch.
func (p *Processor) onAssigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	p.endRevocation(ctx)
	p.mu.Lock()
	p.assigned = true
	p.mu.Unlock()
	ids := assigned[string(p.cfg.Names.Ingest)]
	if len(ids) == 0 {
		return
	}
	cl.PauseFetchPartitions(p.fetchesOf(ids...))
	p.log.Info("partitions assigned", "partitions", ids)
	for _, id := range ids {
		p.startRestore(cl, id)
	}
}

// endRevocation ends the session's (empty) transaction after a revocation
// or loss. GroupTransactSession calls onRevoked and onLost only once
// between two Ends, and an idle processor ends nothing: a second
// revocation would go unseen, leaving a store open and swept for a
// partition another instance owns. kgo calls onAssigned between any two
// revocations, outside any batch, so ending here lets every revocation
// through.
func (p *Processor) endRevocation(ctx context.Context) {
	p.mu.Lock()
	sess := p.sess
	p.mu.Unlock()
	if sess == nil || !p.revokedSinceEnd.Load() {
		return
	}
	err := sess.Begin()
	if err == nil {
		_, err = p.end(ctx, sess, kgo.TryAbort)
	}
	if err != nil {
		// The session is failing: its next transaction says so too.
		p.log.Warn("ending the transaction state after a revocation", "err", err)
	}
}

// onRevoked drops the stores and strikes of partitions this instance no
// longer owns, without committing anything (the session aborts an open
// transaction).
func (p *Processor) onRevoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	p.revokedSinceEnd.Store(true)
	ids := revoked[string(p.cfg.Names.Ingest)]
	if len(ids) > 0 {
		p.log.Info("partitions revoked", "partitions", ids)
	}
	for _, id := range ids {
		p.drop(id)
	}
	// Its new owner strikes a record of its own; offsets reset to one
	// here bring the cause back, and a strike with it.
	maps.DeleteFunc(p.strikes, func(r recordRef, _ strike) bool { return slices.Contains(ids, r.partition) })
}

// onLost drops every lost partition: this instance left the group (a
// session timeout, a fenced member) and holds no assignment until it
// rejoins.
func (p *Processor) onLost(ctx context.Context, cl *kgo.Client, lost map[string][]int32) {
	p.mu.Lock()
	p.assigned = false
	p.mu.Unlock()
	p.onRevoked(ctx, cl, lost)
}

// startRestore restores partition id in the background, replacing the
// partition's previous store if it still has one. Restores end with the
// session's client.
func (p *Processor) startRestore(cl *kgo.Client, id int32) {
	p.drop(id)
	ctx, cancel := context.WithCancel(cl.Context())
	part := &partition{id: id, cancel: cancel, done: make(chan struct{})}
	p.mu.Lock()
	p.parts[id] = part
	p.mu.Unlock()
	p.restores.Add(1)
	go func() {
		defer p.restores.Done()
		defer close(part.done)
		p.restoreLoop(ctx, cl, part)
	}()
}

// drop stops a partition's restore and closes its store.
func (p *Processor) drop(id int32) {
	p.mu.Lock()
	part := p.parts[id]
	delete(p.parts, id)
	p.mu.Unlock()
	if part == nil {
		return
	}
	part.cancel()
	<-part.done
	part.query.Lock()
	defer part.query.Unlock()
	part.ready.Store(false)
	if part.store != nil {
		err := part.store.Close()
		switch {
		case errors.Is(err, statestore.ErrAbandoned):
			p.log.Error("state store abandoned: the processor stops, to be restarted and restore it", "partition", id, "err", err)
			p.abandoned.CompareAndSwap(nil, &err)
		case err != nil:
			p.log.Warn("closing state store", "partition", id, "err", err)
		}
		part.store = nil
	}
}

// rebuild sends a partition whose store failed back to restoring: paused,
// its store reopened and caught up from the changelog.
func (p *Processor) rebuild(cl *kgo.Client, id int32, cause error) {
	p.log.Error("state store failed; partition paused until its store is restored", "partition", id, "err", cause)
	p.metrics.storeErrors.Inc()
	cl.PauseFetchPartitions(p.fetchesOf(id))
	p.startRestore(cl, id)
}

// fetchesOf names partitions ids of the topics a partition's store takes:
// ingest and delivery attempts.
func (p *Processor) fetchesOf(ids ...int32) map[string][]int32 {
	return map[string][]int32{string(p.cfg.Names.Ingest): ids, string(p.cfg.Names.DeliveryAttempts): ids}
}

func (p *Processor) closeAll() {
	p.mu.Lock()
	ids := make([]int32, 0, len(p.parts))
	for id := range p.parts {
		ids = append(ids, id)
	}
	p.mu.Unlock()
	for _, id := range ids {
		p.drop(id)
	}
}

func (p *Processor) partition(id int32) *partition {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.parts[id]
}

// restoreLoop restores until it succeeds or ctx ends, backing off on errors.
func (p *Processor) restoreLoop(ctx context.Context, cl *kgo.Client, part *partition) {
	wait := backoff.New(500*time.Millisecond, 30*time.Second)
	for {
		err := p.restore(ctx, part)
		if err == nil {
			cl.ResumeFetchPartitions(p.fetchesOf(part.id))
			return
		}
		if ctx.Err() != nil {
			return
		}
		p.metrics.storeErrors.Inc()
		p.log.Error("restore failed; retrying", "partition", part.id, "err", err, "retry_in", wait.Next())
		if !wait.Wait(ctx) {
			return
		}
	}
}

// restore opens the partition's store and applies the changelog from the
// store's checkpoint to the last stable offset, waiting out transactions
// still open on the changelog partition (a previous owner's batch that may
// yet commit). On success the store is set and the partition ready.
func (p *Processor) restore(ctx context.Context, part *partition) (err error) {
	select {
	case p.restoreSem <- struct{}{}:
		defer func() { <-p.restoreSem }()
	case <-ctx.Done():
		return ctx.Err()
	}
	start := p.now()
	store, err := statestore.Open(p.cfg.StateDir, part.id, p.cfg.Store)
	if errors.Is(err, statestore.ErrCorrupt) {
		p.log.Warn("state store unreadable; rebuilding it from the changelog", "partition", part.id, "err", err)
		store, err = p.emptyStore(part.id)
	}
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	from := store.Checkpoint()
	n, err := p.catchUp(ctx, store)
	if errors.Is(err, errOtherChangelog) {
		p.log.Warn("state store reflects another changelog (were the topics created anew, or the topic prefix changed?); rebuilding it from the changelog", "partition", part.id, "err", err)
		if err = store.Close(); err != nil {
			return fmt.Errorf("close store: %w", err)
		}
		if store, err = p.emptyStore(part.id); err != nil {
			return fmt.Errorf("open store: %w", err)
		}
		from = 0
		n, err = p.catchUp(ctx, store)
	}
	if err != nil {
		_ = store.Close() // the restore failed; err says why
		return err
	}
	part.store = store
	part.ready.Store(true)
	elapsed := p.now().Sub(start)
	p.metrics.restoreSeconds.Observe(elapsed.Seconds())
	p.metrics.restoreRecords.Add(float64(n))
	p.log.Info("partition restored", "partition", part.id, "from_offset", from, "records", n, "keys", store.Keys(), "took", elapsed)
	return nil
}

// emptyStore deletes the store of partition id, which must be closed, and
// opens it anew, empty.
func (p *Processor) emptyStore(id int32) (*statestore.Store, error) {
	if err := statestore.Destroy(p.cfg.StateDir, id, p.cfg.Store); err != nil {
		return nil, err
	}
	return statestore.Open(p.cfg.StateDir, id, p.cfg.Store)
}

// errOtherChangelog is a store that reflects another changelog than its
// partition's: one of another topic (the topics were deleted and created
// anew, or the topic prefix changed while the state directory stayed), or
// one whose checkpoint is past the changelog's end. Its checkpoint is no
// offset of this changelog, so reading on from it would skip records: the
// store must be rebuilt.
var errOtherChangelog = errors.New("the store reflects another changelog")

// changelogIdentity names the changelog topic as no other topic is named:
// its name and its topic id (Kafka's, kept for the topic's life and new
// when it is created anew).
func changelogIdentity(ctx context.Context, adm *kadm.Client, topic string) (string, error) {
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return "", fmt.Errorf("changelog metadata: %w", err)
	}
	d, ok := details[topic]
	if !ok || d.Err != nil {
		return "", fmt.Errorf("changelog metadata: %s: %v", topic, d.Err)
	}
	return topic + "/" + d.ID.String(), nil
}

// checkChangelog records the changelog's identity in a new store, and
// returns errOtherChangelog for a store of another changelog: one that
// recorded another identity, or none though it holds a state.
func checkChangelog(store *statestore.Store, identity string) error {
	had, err := store.Changelog()
	switch {
	case err != nil:
		return err
	case had == identity:
		return nil
	case had != "":
		return fmt.Errorf("changelog partition %d: %w: %s, not %s", store.Partition(), errOtherChangelog, had, identity)
	case store.Checkpoint() > 0 || store.Keys() > 0:
		return fmt.Errorf("changelog partition %d: %w: a store that names none, at checkpoint %d", store.Partition(), errOtherChangelog, store.Checkpoint())
	}
	return store.SetChangelog(identity)
}

// catchUp applies the changelog partition to store up to its stable end.
func (p *Processor) catchUp(ctx context.Context, store *statestore.Store) (int, error) {
	topic := string(p.cfg.Names.Changelog)
	id := store.Partition()
	pos := store.Checkpoint()
	cl, err := kgo.NewClient(append(slices.Clone(p.opts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {id: kgo.NewOffset().At(pos)}}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers tell the reader where it is.
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return 0, fmt.Errorf("changelog client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	identity, err := changelogIdentity(ctx, adm, topic)
	if err != nil {
		return 0, err
	}
	if err := checkChangelog(store, identity); err != nil {
		return 0, err
	}
	total := 0
	for {
		end, stable, err := endOffsets(ctx, adm, topic, id)
		if err != nil {
			return total, err
		}
		if pos > end {
			return total, fmt.Errorf("changelog partition %d: %w: checkpoint %d past its end %d", id, errOtherChangelog, pos, end)
		}
		for pos < stable {
			fetches := cl.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				return total, err
			}
			if err := fetches.Err0(); err != nil {
				return total, fmt.Errorf("read changelog partition %d: %w", id, err)
			}
			var changes []statestore.Change
			fetches.EachRecord(func(r *kgo.Record) {
				pos = r.Offset + 1
				if r.Attrs.IsControl() {
					return
				}
				if c, ok := p.changelogChange(r); ok {
					changes = append(changes, c)
				}
			})
			if err := store.Apply(changes, pos); err != nil {
				return total, fmt.Errorf("apply changelog: %w", err)
			}
			total += len(changes)
		}
		if stable >= end {
			return total, nil
		}
		// A transaction is open on the changelog: its outcome decides
		// the state this partition must start from.
		select {
		case <-ctx.Done():
			return total, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// changelogChange decodes one changelog record. A record that is not a
// state (no key, a value that does not decode) was not written by a
// processor: it is skipped, counted and logged, never allowed to stop a
// restore, which would otherwise fail on it forever.
func (p *Processor) changelogChange(r *kgo.Record) (statestore.Change, bool) {
	c := statestore.Change{Key: r.Key}
	var err error
	switch {
	case len(r.Key) == 0:
		err = errors.New("no key")
	case r.Value != nil:
		var st statestore.State
		st, err = statestore.DecodeChangelog(r.Value)
		c.State = &st
	}
	if err != nil {
		p.metrics.changelogSkipped.Inc()
		p.log.Warn("changelog record is not a state; skipped", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "event_id", string(r.Key), "err", err)
		return statestore.Change{}, false
	}
	return c, true
}

// endOffsets returns the high watermark and last stable offset of one
// partition.
func endOffsets(ctx context.Context, adm *kadm.Client, topic string, id int32) (end, stable int64, err error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, 0, fmt.Errorf("changelog end offsets: %w", err)
	}
	stables, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return 0, 0, fmt.Errorf("changelog stable offsets: %w", err)
	}
	e, ok1 := ends.Lookup(topic, id)
	s, ok2 := stables.Lookup(topic, id)
	if !ok1 || !ok2 || e.Err != nil || s.Err != nil {
		return 0, 0, fmt.Errorf("changelog partition %d offsets unavailable: %v %v", id, e.Err, s.Err)
	}
	return e.Offset, s.Offset, nil
}
