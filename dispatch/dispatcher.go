package dispatch

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/hookstream/hookstream/config"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/tracing"
	"github.com/hookstream/hookstream/webhook"
)

// Config configures the dispatcher.
type Config struct {
	// Client configures webhook delivery attempts.
	Client webhook.Config
	// Schedule holds the delays before retries 1..n; the first attempt is
	// immediate. Default config.DefaultSchedule, 5s,5m,30m,2h,5h,10h,10h.
	Schedule []time.Duration
	// BreakerCooldown is how long an open circuit waits before its probe.
	// Default 30s, never more than the first delay of Schedule: a refused
	// attempt waits for the probe, and should not wait longer than a retry.
	BreakerCooldown time.Duration
	// BreakerFailures is how many consecutive failed attempts open the
	// circuit. Default 5.
	BreakerFailures int
	// MaxPendingRetries bounds retries held in memory before the retry
	// consumer pauses. Default 10000.
	MaxPendingRetries int
	// RetryHorizon: retries due later than this are not held in memory
	// (nor count against MaxPendingRetries); the retry consumer reads them
	// again as they come near. Default 1 minute.
	RetryHorizon time.Duration
	// RetryReappendAfter bounds how far back a retry that waits long (its
	// subscription disabled, or due beyond RetryHorizon) holds its retry
	// topic partition's committed offset: once this many finished retries,
	// and at least as many as the partition's waiting ones, sit after it,
	// the retry is written again, unchanged, at the end of the topic and
	// committed past. A restart then delivers again about that many
	// retries at most, and re-appending costs at most one record per
	// finished retry. Default 1000.
	RetryReappendAfter int
	// MaxSpilledRetries bounds the retries waiting long (subscription
	// disabled, or due beyond RetryHorizon) whose place in the retry topic
	// is kept in memory. Past it a partition's reading stops at the next
	// retry due beyond the horizon until there is room again; a retry of a
	// disabled subscription is kept with the retries held in memory
	// instead. Default 100000.
	MaxSpilledRetries int
	// MaxRecordBytes is the largest retry or dead-letter record the
	// producer (its ProducerBatchMaxBytes) and the delivery topics take:
	// topics.MaxHandOffBytes of the body limit. A hand-off over it, or
	// refused for good by the broker, is never tried again as is: a retry
	// is dead-lettered instead, a dead letter is cut to fit. 0: no limit
	// but the broker's.
	MaxRecordBytes int64
	// DisableAfter disables a subscription whose real attempts have all
	// failed, with no success, for this long. Default: the sum of Schedule.
	DisableAfter time.Duration
	// InstanceID is this dispatcher's stable identity (group.instance.id
	// of its consumers): a dispatcher restarted after a crash takes its
	// predecessor's place in every group at once. Unique per process.
	// Default empty: dynamic members only.
	InstanceID string
	// ExprShare bounds the time each subscription's filter and transform
	// may spend on this dispatcher: a share of one core over ExprWindow.
	// Past it the subscription is throttled (judge.go). Default 0: no
	// bound (run sets config's default, 0.25).
	ExprShare float64
	// ExprWindow is the window of ExprShare. Default 1 minute.
	ExprWindow time.Duration
	// CatchUpReaders bounds the readers (each a client of its own) that
	// read for subscriptions behind the head. Default 2.
	CatchUpReaders int
	// Tracing traces each delivery attempt, a child of the context its
	// events record (or retry record) carries, and sends the attempt's
	// traceparent to the subscriber. Zero: no spans, the record's context
	// carried on.
	Tracing tracing.Tracing
}

// Dispatcher delivers the events of the partitions of <prefix>.events
// it owns in <prefix>-dispatch to every enabled subscription, a worker
// each (a lane per partition, handing records to the subscription's
// sink), and the retries of the delivery-retry partitions it owns in
// <prefix>-retry.
type Dispatcher struct {
	cfg Config
	// cluster: its client writes retries, dead letters, attempts and
	// operational events, and asks for offsets; its options start the
	// dispatcher's consumers.
	cluster  topics.Cluster
	registry *subscriptions.Registry
	client   *webhook.Client
	log      *slog.Logger
	metrics  *metrics
	now      func() time.Time
	// txnID is the transactional id of topic subscriptions' writes.
	txnID string
	// topics writes topic subscriptions' records, in transactions that
	// move their cursors.
	topics  *topicWriter
	tracer  trace.Tracer
	retries *retries
	reader  *reader
	// loaded is closed once the registry has read the subscriptions
	// topic to its end: until then an unknown subscription may exist.
	loaded     chan struct{}
	loadedOnce sync.Once

	// mu guards subs and workers; the order of the locks is at the top
	// of fanout.go.
	mu      sync.Mutex
	subs    map[string]*subState
	workers map[string]*worker
	// running counts the workers' goroutines, stopped ones still closing
	// included.
	running sync.WaitGroup
}

// subState is what the dispatcher knows of one subscription at runtime.
type subState struct {
	circuit *circuit
	// budget bounds the time its filter and transform spend.
	budget *budget

	mu  sync.Mutex
	sub subscriptions.Subscription
	// render is sub compiled: its filter, transform and headers.
	render  *subscriptions.Compiled
	limiter *rate.Limiter
	// filterLogged is when a failing filter was last logged: once a
	// minute at most.
	filterLogged time.Time
	// failingSince is when the first real attempt failed since the last
	// success; zero while the subscriber is healthy.
	failingSince time.Time
	// failures is its run of failures, attempts and transforms.
	failures  failureRun
	disabling bool // a disable is being written
}

// errSuperseded stops the dispatcher's disable of a subscription an
// operator changed since the dispatcher judged it.
var errSuperseded = errors.New("subscription changed since it was judged")

// New builds a dispatcher on cluster, whose client writes retries, dead
// letters, attempts and operational events (acks=all, batches up to
// MaxRecordBytes) and whose options start the dispatcher's consumers. It
// does no I/O.
func New(cfg Config, cluster topics.Cluster, registry *subscriptions.Registry, log *slog.Logger, reg prometheus.Registerer) *Dispatcher {
	if cfg.Schedule == nil {
		cfg.Schedule = config.DefaultSchedule()
	}
	if cfg.BreakerCooldown == 0 {
		cfg.BreakerCooldown = 30 * time.Second
	}
	if len(cfg.Schedule) > 0 {
		cfg.BreakerCooldown = min(cfg.BreakerCooldown, cfg.Schedule[0])
	}
	if cfg.BreakerFailures == 0 {
		cfg.BreakerFailures = 5
	}
	if cfg.MaxPendingRetries == 0 {
		cfg.MaxPendingRetries = 10_000
	}
	if cfg.RetryHorizon == 0 {
		cfg.RetryHorizon = time.Minute
	}
	if cfg.RetryReappendAfter == 0 {
		cfg.RetryReappendAfter = 1000
	}
	if cfg.MaxSpilledRetries == 0 {
		cfg.MaxSpilledRetries = 100_000
	}
	if cfg.ExprWindow == 0 {
		cfg.ExprWindow = time.Minute
	}
	if cfg.CatchUpReaders == 0 {
		cfg.CatchUpReaders = 2
	}
	if cfg.Client.Propagator == nil {
		cfg.Client.Propagator = cfg.Tracing.Propagation()
	}
	if cfg.DisableAfter == 0 {
		for _, s := range cfg.Schedule {
			cfg.DisableAfter += s
		}
	}
	d := &Dispatcher{
		cfg:      cfg,
		cluster:  cluster,
		registry: registry,
		client:   webhook.New(cfg.Client),
		tracer:   cfg.Tracing.Tracer(),
		log:      log.With("component", "dispatcher"),
		now:      time.Now,
		txnID:    cluster.Names.TopicWriter(cmp.Or(cfg.InstanceID, crand.Text())),
		loaded:   make(chan struct{}),
		subs:     make(map[string]*subState),
		workers:  make(map[string]*worker),
	}
	d.topics = newTopicWriter(d)
	d.retries = newRetries(d)
	d.reader = newReader(d)
	d.metrics = newMetrics(reg, d)
	return d
}

// Run follows the subscriptions and delivers until ctx ends.
func (d *Dispatcher) Run(ctx context.Context) error {
	defer d.client.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 3)
	wg.Go(func() {
		errc <- d.registry.Watch(ctx, func(subs map[string]subscriptions.Subscription) { d.reconcile(ctx, subs) })
	})
	wg.Go(func() { errc <- d.retries.run(ctx) })
	wg.Go(func() {
		select {
		case <-ctx.Done():
			errc <- nil
		case <-d.loaded: // the head places itself by the subscriptions' cursors
			errc <- d.reader.run(ctx)
		}
	})
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	wg.Wait()
	d.stopAll()
	d.flushAttempts()
	return err
}

// reconcile starts workers for enabled subscriptions and stops the others.
// Enabling a subscription again resets its failure clock and circuit and
// brings its paused retries back. It never waits for a worker to stop: a
// consumer can take seconds to leave its group, and nothing else (the
// retries, readiness, the next change) waits on that. A worker started
// in a stopping one's place waits for it.
func (d *Dispatcher) reconcile(ctx context.Context, subs map[string]subscriptions.Subscription) {
	defer d.loadedOnce.Do(func() { close(d.loaded) })
	// Pull subscriptions are read by their consumers, who move their
	// cursors: a dispatcher neither delivers nor commits for them.
	maps.DeleteFunc(subs, func(_ string, s subscriptions.Subscription) bool { return s.Kind() == subscriptions.KindPull })
	d.mu.Lock()
	defer d.mu.Unlock()
	for id := range d.subs {
		if _, ok := subs[id]; !ok {
			delete(d.subs, id)
			d.metrics.filterErrors.DeleteLabelValues(id)
			d.metrics.exprSeconds.DeleteLabelValues(id)
			d.metrics.exprThrottled.DeleteLabelValues(id)
			d.retries.release(id) // read again, they are dropped
		}
	}
	for id, s := range subs {
		st := d.subs[id]
		if st == nil {
			st = d.newSubState(s)
			d.subs[id] = st
		}
		st.mu.Lock()
		old := st.sub
		st.sub = s
		if !st.render.Of(s) {
			st.render = subscriptions.Compile(s)
		}
		if s.RateLimit != old.RateLimit {
			st.limiter = newLimiter(s.RateLimit)
		}
		if !slices.Equal(s.Schedule, old.Schedule) {
			st.circuit.setCooldown(d.cooldown(s))
		}
		enabled := s.Enabled && !old.Enabled
		if enabled {
			st.failingSince, st.failures = time.Time{}, failureRun{}
		}
		st.mu.Unlock()
		if enabled {
			st.circuit.reset()
			d.retries.release(id)
		}

		w := d.workers[id]
		// Changes to delivery shape restart the worker; others apply live.
		// A rewind (a replay while running) restarts it too: the new
		// lanes start from the rewind's offsets.
		restart := w != nil && !w.stopped && (sinkChanged(old, s) || old.Ordered != s.Ordered || old.MaxInFlight != s.MaxInFlight ||
			old.BatchMax != s.BatchMax || old.BatchWait != s.BatchWait || old.Rewind.Tag() != s.Rewind.Tag())
		if w != nil && !w.stopped && (!s.Enabled || restart) {
			w.stop()
		}
		if s.Enabled && (w == nil || w.stopped) {
			d.workers[id] = d.startWorker(ctx, id, st, w)
		}
	}
	for id, w := range d.workers {
		if _, ok := subs[id]; !ok {
			w.stop()
			delete(d.workers, id)
		}
	}
}

// closeGrace bounds how long a stopping consumer takes to commit and
// leave its group. Close waits for a JoinGroup under way, which a group
// stuck rebalancing (waiting for a dead member) holds until the client's
// own deadline, the rebalance timeout plus 10 s; past the grace the
// client's context ends, the join and final commit with it (what was
// delivered and not committed is delivered again).
const closeGrace = 5 * time.Second

// leaveTimeout bounds a static member's leave after its close.
const leaveTimeout = 2 * time.Second

// consumer builds a client in group with the dispatcher's options and
// extra, a static member when InstanceID is set. Its close returns within
// closeGrace plus leaveTimeout, and leaves the group even as a static
// member: a crashed dispatcher's restart takes its predecessor's place,
// but a stopped consumer (a disabled or deleted subscription, a
// dispatcher stopped for good or for a replay) hands its partitions on
// at once.
func (d *Dispatcher) consumer(ctx context.Context, group topics.Group, extra ...kgo.Opt) (*kgo.Client, func(), error) {
	ctx = context.WithoutCancel(ctx)
	clientCtx, cancel := context.WithCancel(ctx)
	opts := append([]kgo.Opt{kgo.WithContext(clientCtx), kgo.ConsumerGroup(string(group))}, extra...)
	if d.cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(d.cfg.InstanceID))
	}
	cl, err := d.cluster.NewClient(opts...)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return cl, func() {
		defer cancel()
		cut := time.AfterFunc(closeGrace, cancel)
		defer cut.Stop()
		member, _ := cl.GroupMetadata()
		cl.Close()
		if d.cfg.InstanceID != "" && member != "" {
			ctx, cancel := context.WithTimeout(ctx, leaveTimeout)
			defer cancel()
			d.leave(ctx, group, member)
		}
	}, nil
}

// leave takes this dispatcher's static member out of group. The member id
// keeps a stale process from taking out its successor (the broker fences
// it).
func (d *Dispatcher) leave(ctx context.Context, group topics.Group, member string) {
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = string(group)
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID, m.InstanceID = member, &d.cfg.InstanceID
	m.Reason = kmsg.StringPtr("hookstream dispatcher stopping")
	req.Members = append(req.Members, m)
	resp, err := req.RequestWith(ctx, d.cluster.Client)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err == nil && len(resp.Members) > 0 {
		err = kerr.ErrorForCode(resp.Members[0].ErrorCode)
	}
	if err != nil && !errors.Is(err, kerr.UnknownMemberID) {
		d.log.Warn("could not leave the group; its partitions wait for the session timeout", "group", group, "err", err)
	}
}

func newLimiter(perSecond float64) *rate.Limiter {
	if perSecond <= 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(perSecond), max(1, int(perSecond)))
}

func (d *Dispatcher) newSubState(s subscriptions.Subscription) *subState {
	return &subState{sub: s, render: subscriptions.Compile(s), limiter: newLimiter(s.RateLimit),
		circuit: newCircuit(d.cfg.BreakerFailures, d.cooldown(s)), budget: newBudget(d.cfg.ExprShare, d.cfg.ExprWindow)}
}

// cooldown is how long s's open circuit waits for its probe: the
// configured cooldown, never more than the first delay of s's schedule.
func (d *Dispatcher) cooldown(s subscriptions.Subscription) time.Duration {
	if len(s.Schedule) > 0 {
		return min(d.cfg.BreakerCooldown, time.Duration(s.Schedule[0]))
	}
	return d.cfg.BreakerCooldown
}

// schedule is s's retry schedule: its own, else the configured one.
func (d *Dispatcher) schedule(s subscriptions.Subscription) []time.Duration {
	if len(s.Schedule) == 0 {
		return d.cfg.Schedule
	}
	out := make([]time.Duration, len(s.Schedule))
	for i, v := range s.Schedule {
		out[i] = time.Duration(v)
	}
	return out
}

// maxBodyBytes bounds what one delivery carries, and what a transform
// may make of one event: a failed delivery goes to the retry topic whole.
// 0: no bound but the broker's.
func (d *Dispatcher) maxBodyBytes() int {
	if d.cfg.MaxRecordBytes <= 0 {
		return 0
	}
	return int(d.cfg.MaxRecordBytes - topics.HandOffHeadroom)
}

// filterLogEvery bounds how often a subscription's failing filter is
// logged; every failure is counted.
const filterLogEvery = time.Minute

// filterFailed counts a failure of st's filter, an event it does not
// receive, and logs it at most once every filterLogEvery.
func (d *Dispatcher) filterFailed(st *subState, err error) {
	st.mu.Lock()
	id := st.sub.ID
	now := d.now()
	log := now.Sub(st.filterLogged) >= filterLogEvery
	if log {
		st.filterLogged = now
	}
	st.mu.Unlock()
	d.metrics.filterErrors.WithLabelValues(id).Inc()
	if log {
		d.log.Warn("filter failed: the event is not delivered (logged once a minute; hookstream_delivery_filter_errors_total counts them all)",
			"subscription", id, "err", errorText(err))
	}
}

// longestTimeout is the longest an attempt may take now: the client's
// timeout, or a subscription's own.
func (d *Dispatcher) longestTimeout() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	longest := d.client.Timeout()
	for _, st := range d.subs {
		st.mu.Lock()
		longest = max(longest, time.Duration(st.sub.Timeout))
		st.mu.Unlock()
	}
	return longest
}

// stopAll stops every worker and waits for them all, closing at once.
func (d *Dispatcher) stopAll() {
	d.mu.Lock()
	for _, w := range d.workers {
		w.stop()
	}
	d.mu.Unlock()
	d.running.Wait()
}

// current returns the subscription as last read.
func (st *subState) current() subscriptions.Subscription {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.sub
}

// compiled returns the subscription as last read, compiled.
func (st *subState) compiled() *subscriptions.Compiled {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.render
}

// enabled reports whether the subscription is enabled, as last read.
func (st *subState) enabled() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.sub.Enabled
}

// subscription returns the runtime state of id, or nil once deleted.
func (d *Dispatcher) subscription(id string) *subState {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.subs[id]
}

// Ready reports open circuits, disabled subscriptions, those whose
// expressions were throttled within the last ExprWindow and the failing
// ones (subscriptions.Delivery) for /readyz; the dispatcher itself is
// always ready.
func (d *Dispatcher) Ready(context.Context) (bool, any) {
	open, disabled := d.circuits()
	return true, map[string]any{"open_circuits": open, "disabled": disabled, "throttled": d.throttled(), "failing": d.failing()}
}

func (d *Dispatcher) circuits() (open, disabled []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, st := range d.subs {
		if st.circuit.isOpen() {
			open = append(open, id)
		}
		st.mu.Lock()
		if !st.sub.Enabled && st.sub.DisabledReason != "" {
			disabled = append(disabled, id)
		}
		st.mu.Unlock()
	}
	return open, disabled
}

// throttled returns the subscriptions whose expressions were throttled
// within the last ExprWindow.
func (d *Dispatcher) throttled() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	var ids []string
	for id, st := range d.subs {
		if st.budget.throttledWithin(now) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
