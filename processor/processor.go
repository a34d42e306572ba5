// Package processor turns the ingest topic into the events topic exactly
// once: it consumes in the processor group, drops duplicates against the
// per-partition state store, and in one Kafka transaction per batch writes
// envelopes to the events topic, failures to the DLQ, state changes to the
// compacted changelog, and the consumed offsets. It trusts no writer of the
// ingest topic: every body is checked with topics.CheckJSON before an
// envelope embeds it as JSON, whatever the record's headers claim.
//
// The transaction does not cover Pebble. State changes wait in memory until
// the transaction commits and are then applied to the store together with
// the changelog offset they reach; an aborted transaction drops them and
// rewinds the consumer, so the store only ever reflects committed history.
// On assignment a partition is paused until its store is restored from the
// changelog, including any transaction still pending there. A store that
// cannot be read or written sends its partition back to restoring: lag,
// never a duplicate or a loss.
//
// Each key's state is also its event's ledger (ledger.go): the processor
// group consumes the delivery-attempts topic too, partition p with ingest
// partition p, and folds attempts into the stories in the same
// transactions. A story is bounded: it keeps the deliveries of the
// statestore.MaxDeliveries most recently attempted subscriptions and
// counts the rest as omitted, and no state write outgrows the changelog's
// record limit. Lookup answers interactive queries (query.go), which the
// story query (events.StoryQuery) serves on the admin listener.
//
// The package owns the dedup decision, the envelope and the ledger's
// updates; it does not own the story query, the admin listener and its
// guard, delivery, or the state store's format. It serves no HTTP.
package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookstream/hookstream/config"
	"github.com/hookstream/hookstream/internal/backoff"
	"github.com/hookstream/hookstream/statestore"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/tracing"
)

// Config configures a processor.
type Config struct {
	// Names are the deployment's topics and groups.
	Names topics.Names
	// StateDir holds the partition stores: <data-dir>/state/processor.
	StateDir string
	// TTL is how long an event id is remembered. Default
	// config.DefaultDedupTTL (168h).
	TTL time.Duration
	// MaxRecordBytes is the largest record written, counted whole by
	// topics.RecordBytes (topics.MaxRecordBytes of the body limit): an
	// event whose events record is larger goes to the DLQ, and a dead
	// letter larger is cut to fit.
	MaxRecordBytes int64
	// TransactionalID identifies this processor instance across restarts,
	// so a restarted instance fences its predecessor's open transaction at
	// once. Unique per instance: <prefix>-processor-<host>.
	TransactionalID string
	// Store configures the partition stores.
	Store statestore.Options
	// SweepInterval is how often expired ids are swept. Default 1m.
	SweepInterval time.Duration
	// SweepChunk bounds the expired ids one transaction tombstones per
	// partition. Default 1000.
	SweepChunk int
	// RestoreConcurrency bounds partitions restored at once. Default 2.
	RestoreConcurrency int
	// SessionTimeout is how long a crashed instance keeps its partitions
	// before the group moves them. Default 10s.
	SessionTimeout time.Duration
	// AdminAddr is this instance's admin listener (host:port), advertised
	// to the group for interactive queries; empty: none.
	AdminAddr string
	// Tracing traces each record's processing, a child of the context its
	// ingest record carries, and puts the span's context in the events
	// record. Zero: no spans, the ingest record's context carried on.
	Tracing tracing.Tracing
}

// Processor is the processor role.
type Processor struct {
	cfg  Config
	opts []kgo.Opt
	// reg receives each session client's kprom metrics.
	reg     prometheus.Registerer
	log     *slog.Logger
	metrics *metrics
	now     func() time.Time
	tracer  trace.Tracer

	mu    sync.Mutex
	parts map[int32]*partition
	sess  *kgo.GroupTransactSession
	// assigned is set once the group has given this session its
	// partitions (possibly none): until then the processor is not ready.
	assigned bool
	// strikes are the records whose writes failed permanently, kept
	// across aborted transactions; used by the processing loop only.
	strikes map[recordRef]strike
	// restoreSem bounds concurrent restores.
	restoreSem chan struct{}
	restores   sync.WaitGroup
	// commits counts committed transactions; used by the processing loop
	// only.
	commits int
	// revokedSinceEnd is set by a revocation or loss until the session's
	// next End: meanwhile GroupTransactSession would skip the next one.
	revokedSinceEnd atomic.Bool
	// abandoned is the first store closed as statestore.ErrAbandoned: its
	// partition cannot be restored in this process, so Run ends with it.
	abandoned atomic.Pointer[error]
}

// New builds a processor; opts are the client options shared by the
// process (seed brokers, logger, hooks). It does no I/O.
func New(cfg Config, opts []kgo.Opt, log *slog.Logger, reg prometheus.Registerer) *Processor {
	if cfg.TTL == 0 {
		cfg.TTL = config.DefaultDedupTTL
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = time.Minute
	}
	if cfg.SweepChunk == 0 {
		cfg.SweepChunk = 1000
	}
	if cfg.RestoreConcurrency == 0 {
		cfg.RestoreConcurrency = 2
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = 10 * time.Second
	}
	p := &Processor{
		cfg:        cfg,
		opts:       opts,
		log:        log.With("component", "processor"),
		now:        time.Now,
		tracer:     cfg.Tracing.Tracer(),
		parts:      make(map[int32]*partition),
		restoreSem: make(chan struct{}, cfg.RestoreConcurrency),
	}
	p.metrics = newMetrics(reg, p)
	p.reg = reg
	return p
}

// Run processes until ctx ends, then leaves the group cleanly.
func (p *Processor) Run(ctx context.Context) error {
	wait := backoff.New(time.Second, 30*time.Second)
	for {
		commits := p.commits
		err := p.session(ctx)
		if p.commits > commits {
			wait.Reset() // the session worked before it failed
		}
		var setup *setupError
		switch {
		case ctx.Err() != nil || err == nil:
			p.leave()
			return nil
		case errors.As(err, &setup), errors.Is(err, statestore.ErrAbandoned):
			return err
		}
		// A broker outage or a fenced producer ends a session; a new one
		// rejoins the group and restores its partitions, so nothing is
		// lost and nothing is written twice.
		p.metrics.sessionRestarts.Inc()
		p.log.Error("processor session failed; starting a new one", "err", err, "retry_in", wait.Next())
		if !wait.Wait(ctx) {
			return nil
		}
	}
}

// leave takes this instance out of its group when it stops cleanly. A
// static member's client does not leave when it closes (a restart under
// the same id would take the partitions back); a clean stop may be for
// good, so its partitions move to the other instances now rather than
// after its session timeout.
func (p *Processor) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(p.opts...)
	if err == nil {
		defer cl.Close()
		var resp kadm.LeaveGroupResponses
		resp, err = kadm.NewClient(cl).LeaveGroup(ctx, kadm.LeaveGroup(string(p.cfg.Names.ProcessorGroup())).
			InstanceIDs(p.cfg.TransactionalID).Reason("instance stopped"))
		if err == nil {
			err = resp.Error()
		}
	}
	if err != nil {
		p.log.Warn("leaving the group failed: the partitions move after the session timeout", "err", err)
	}
}

// setupError is a session that could not be configured: retrying cannot help.
type setupError struct{ err error }

func (e *setupError) Error() string { return e.err.Error() }
func (e *setupError) Unwrap() error { return e.err }

// clientOpts are the options of a session's client: the process's
// options, its own metrics, and the group, transaction, fetch and produce
// settings of the processor. A kprom collector serves one client: each
// session gets its own (the last one unregistered its collectors when it
// closed).
func (p *Processor) clientOpts() []kgo.Opt {
	return slices.Concat(p.opts, topics.Instrument(p.reg, ClientID(p.cfg.AdminAddr)), []kgo.Opt{
		kgo.ConsumerGroup(string(p.cfg.Names.ProcessorGroup())),
		kgo.ConsumeTopics(string(p.cfg.Names.Ingest), string(p.cfg.Names.DeliveryAttempts)),
		// Partition p of the attempts topic goes with ingest partition p:
		// its state store takes both.
		kgo.Balancers(newCopartitioned(string(p.cfg.Names.Ingest), string(p.cfg.Names.DeliveryAttempts))),
		kgo.TransactionalID(p.cfg.TransactionalID),
		// The transactional id is also the instance's static member id: a
		// crashed instance restarted under it takes its partitions back at
		// once, instead of waiting for its dead predecessor's session to
		// time out (see leave for a clean stop).
		kgo.InstanceID(p.cfg.TransactionalID),
		// A zombie (an instance paused past its session timeout) holds the
		// last stable offset of the partitions it wrote until the broker
		// aborts its open transaction: with the transaction timeout no
		// longer than the session timeout, the zombie's partitions stall
		// for no more than it.
		kgo.TransactionTimeout(p.cfg.SessionTimeout),
		kgo.SessionTimeout(p.cfg.SessionTimeout),
		kgo.HeartbeatInterval(p.cfg.SessionTimeout / 10),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// A partition resumed after its restore is fetched no later than
		// this: a fetch in flight for the others waits at most this long.
		kgo.FetchMaxWait(250 * time.Millisecond),
		// A new group starts at the beginning of the ingest topic.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Rebalance callbacks never run while a batch is in progress.
		kgo.BlockRebalanceOnPoll(),
		// Every record goes to the partition number of its ingest record:
		// events, DLQ and changelog are co-partitioned with ingest; an
		// ingest record (an operational event) goes where its key hashes.
		kgo.RecordPartitioner(topics.Partitioner(p.cfg.Names.Ingest)),
		kgo.ProducerBatchMaxBytes(int32(p.cfg.MaxRecordBytes)),
		// A transaction's records wait for its flush (txnLinger).
		kgo.ProducerLinger(txnLinger),
		// Kafka 4 (transactions v2) answers a produce of the next
		// transaction CONCURRENT_TRANSACTIONS until the last one's markers
		// are written, and kgo retries it after a metadata update, which
		// comes no sooner than this after the previous one: with the
		// default 5s, one transaction in a few stalled for seconds.
		kgo.MetadataMinAge(metadataMinAge),
		kgo.OnPartitionsAssigned(p.onAssigned),
		kgo.OnPartitionsRevoked(p.onRevoked),
		kgo.OnPartitionsLost(p.onLost),
	})
}

// session runs one group transact session until ctx ends or it fails.
func (p *Processor) session(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sess, err := kgo.NewGroupTransactSession(p.clientOpts()...)
	if err != nil {
		return &setupError{fmt.Errorf("processor: client: %w", err)}
	}
	p.mu.Lock()
	p.sess = sess
	p.mu.Unlock()
	defer func() {
		cancel()
		// Closing leaves the group: no rebalance callback runs after it,
		// so no restore starts once Wait has begun. Restores end with the
		// client's context.
		sess.Close()
		p.restores.Wait()
		p.closeAll()
		p.mu.Lock()
		p.sess = nil
		p.assigned = false
		p.mu.Unlock()
		p.revokedSinceEnd.Store(false) // a new session starts with none
	}()

	// Fence this instance's previous incarnation now: until its open
	// transaction is aborted, the group's offsets are unstable and no
	// partition can start. (kgo would otherwise initialize the producer
	// only at the first produce, after the transaction timed out.)
	if _, _, err := sess.Client().ProducerID(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("processor: initialize transactional producer %s: %w", p.cfg.TransactionalID, err)
	}
	p.log.Info("processor started", "group", p.cfg.Names.ProcessorGroup(), "transactional_id", p.cfg.TransactionalID)
	lastSweep := p.now()
	// behind is set while the last sweep left expired ids: the next
	// transaction sweeps again, without waiting for records.
	behind := false
	for {
		if err := p.abandoned.Load(); err != nil {
			return *err
		}
		wait := time.Second
		if behind {
			wait = 10 * time.Millisecond
		}
		pollCtx, pollCancel := context.WithTimeout(ctx, wait)
		fetches := sess.PollFetches(pollCtx)
		pollCancel()
		if ctx.Err() != nil || fetches.IsClientClosed() {
			sess.AllowRebalance()
			return nil
		}
		fetches.EachError(func(t string, part int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				p.log.Warn("fetch error", "topic", t, "partition", part, "err", err)
			}
		})
		sweep := behind || p.now().Sub(lastSweep) >= p.cfg.SweepInterval
		if fetches.NumRecords() > 0 || sweep {
			more, err := p.transact(ctx, sess, fetches, sweep)
			if err != nil {
				sess.AllowRebalance()
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			if sweep {
				lastSweep, behind = p.now(), more
			}
		}
		sess.AllowRebalance()
	}
}

// transact processes one polled batch in one transaction, with a sweep
// when asked; more reports expired ids the sweep left for the next one.
func (p *Processor) transact(ctx context.Context, sess *kgo.GroupTransactSession, fetches kgo.Fetches, sweep bool) (more bool, err error) {
	if err := sess.Begin(); err != nil {
		return false, fmt.Errorf("processor: begin transaction: %w", err)
	}
	// A transaction begun is seen through, even when the processor stops
	// meanwhile: one left open would hold read_committed readers of its
	// partitions until the broker timed it out. Not beyond the transaction
	// timeout, when the broker aborts it anyway (as a broker outage that
	// long does): the session then starts over. This bounds End too: kgo's
	// End waits for a heartbeat that never comes when the group's
	// management failed during the transaction.
	txCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.SessionTimeout)
	defer cancel()
	more, err = p.transactWithin(txCtx, sess, fetches, sweep)
	if err != nil && txCtx.Err() != nil {
		return more, fmt.Errorf("processor: transaction outlived the %s transaction timeout (the broker aborts it): %w", p.cfg.SessionTimeout, err)
	}
	return more, err
}

// transactWithin is transact's transaction, begun, until ctx ends.
func (p *Processor) transactWithin(ctx context.Context, sess *kgo.GroupTransactSession, fetches kgo.Fetches, sweep bool) (more bool, err error) {
	tx := newTxn(p, sess)
	var committed bool
	defer func() { tx.endSpans(committed) }()
	if sweep {
		more = tx.sweep(ctx)
	}
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		switch {
		case len(fp.Records) == 0:
		case fp.Topic == string(p.cfg.Names.DeliveryAttempts):
			tx.attempts(ctx, fp.Partition, fp.Records)
		default:
			tx.partition(ctx, fp.Partition, fp.Records)
		}
	})
	tx.finish(ctx)
	commit := kgo.TryCommit
	if err := tx.err(); err != nil {
		p.log.Warn("aborting transaction", "err", err)
		commit = kgo.TryAbort
	}
	before, carried := sess.Client().CommittedOffsets(), sess.Client().UncommittedOffsets()
	committed, err = p.end(ctx, sess, commit)
	if err != nil {
		return false, fmt.Errorf("processor: end transaction: %w", err)
	}
	if !committed && commit == kgo.TryCommit {
		// kgo reports a commit whose EndTxn it could not confirm (answered
		// UNKNOWN_SERVER_ERROR) as not committed, like an abort, and
		// rewinds: if the broker did commit, the batch would be emitted
		// again from stores that lack its changes. The group's offsets
		// tell. A new session reads them and restores the stores from the
		// changelog, so both reflect what committed.
		landed, err := p.landed(ctx, sess.Client(), before, carried)
		switch {
		case err != nil:
			return more, fmt.Errorf("processor: a commit reported as not made could not be checked: %w", err)
		case landed:
			return more, errors.New("processor: a commit reported as not made was made")
		}
	}
	if !committed {
		// A rebalance or a failed write aborted the batch; the session
		// rewound to the committed offsets and the batch comes again.
		p.metrics.transactions.WithLabelValues("aborted").Inc()
		tx.rebuildBroken()
		return more, nil
	}
	p.metrics.transactions.WithLabelValues("committed").Inc()
	p.commits++
	tx.apply()
	return more, nil
}

// landed reports whether the group's stable offsets are those a
// transaction carried, for a partition it moved from before: whether the
// transaction committed.
func (p *Processor) landed(ctx context.Context, cl *kgo.Client, before, carried map[string]map[int32]kgo.EpochOffset) (bool, error) {
	adm := kadm.NewClient(cl)
	for {
		// Stable: a transaction whose markers are still being written
		// answers UNSTABLE_OFFSET_COMMIT, and is asked again.
		got, err := adm.FetchOffsets(kadm.RequireStable(ctx), string(p.cfg.Names.ProcessorGroup()))
		if err != nil {
			return false, err
		}
		unstable := false
		for topic, parts := range carried {
			for id, o := range parts {
				if o.Offset == before[topic][id].Offset {
					continue
				}
				g, ok := got.Lookup(topic, id)
				switch {
				case errors.Is(g.Err, kerr.UnstableOffsetCommit):
					unstable = true
				case g.Err != nil:
					return false, g.Err
				case ok && g.At == o.Offset:
					return true, nil
				}
			}
		}
		if !unstable {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// end ends the session's transaction; after it, the next revocation
// reaches onRevoked again.
func (p *Processor) end(ctx context.Context, sess *kgo.GroupTransactSession, commit kgo.TransactionEndTry) (bool, error) {
	committed, err := sess.End(ctx, commit)
	p.revokedSinceEnd.Store(false)
	return committed, err
}

// Ready reports readiness for /readyz: ready once the group has assigned
// this instance its partitions and none of them restores.
func (p *Processor) Ready(context.Context) (bool, any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var restoring, ready []int32
	for id, part := range p.parts {
		if part.ready.Load() {
			ready = append(ready, id)
		} else {
			restoring = append(restoring, id)
		}
	}
	slices.Sort(restoring)
	slices.Sort(ready)
	return p.sess != nil && p.assigned && len(restoring) == 0, map[string]any{"assigned": p.assigned, "partitions": ready, "restoring": restoring}
}
