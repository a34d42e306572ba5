// Package dispatch delivers events to subscribers: signed HTTP POSTs
// (Standard Webhooks) of one event or of a batch of one partition's events
// through an SSRF-guarded client, retries through the delivery-retry topic
// on a schedule, a circuit breaker per subscription, and the delivery DLQ.
// It also emits the operational events of deliveries and circuits
// (operational.go), and verifies a subscriber endpoint before it is
// subscribed (verify.go).
//
// # Fan-out (fanout.go)
//
// A dispatcher's cost does not grow by a consumer group per subscription.
// Dispatchers share the events partitions in one group, <prefix>-dispatch,
// which commits nothing. The head reads each owned partition once and
// hands every record to the lane of each subscription at the head: the
// record is parsed once (subscriptions.Event, shared by every lane) and
// queued to each lane unjudged. A lane (one subscription on one partition)
// judges its queue on its own goroutine (judge.go: each subscription's
// compiled filter and transform judge each record once, within the
// subscription's share of a core), keeps what its subscription receives,
// plus the last record of each read so its cursor passes the others, and
// its drain delivers that as before: events or batches, ordered or not,
// retries, circuit, dead letters.
//
// Each subscription's cursor is the committed offset of <prefix>-sub-<id>,
// a group with no members: a lane's cursor moves only past records whose
// messages are done (delivered, handed to the retry topic or
// dead-lettered), and moved cursors are committed every second, on
// revocation and when a lane stops. At least once holds: a partition lost
// is not committed, its new owner delivers again from the last commit.
// lag and replay --group sub:<id> read and write these offsets as before.
//
// Isolation: the head never waits, neither for a delivery nor for an
// expression: however long one subscription's filter takes, only its own
// cursor falls behind. A lane holding laneHigh records falls
// behind; so does a lane whose cursor is behind the head when it starts (a
// subscription re-enabled, replayed, new with --from earliest, or far
// behind when the partition is taken: the head starts at the furthest
// cursor but for those within headWindow records of it). Lanes behind read
// through the catch-up path: CatchUpReaders clients, each reading one
// fetch for one lane from its own offset per turn, the lanes taking turns
// in order (fair), a lane queued only while it holds fewer than laneLow
// records (bounded memory). A lane that reaches the head joins it.
//
// Subscriptions created, changed or deleted while running start or stop
// their lanes without a rebalance; a lane reads its cursor once the lanes
// of the version it replaces have committed theirs. A replay executed
// while dispatchers run (groups.API.Replay) is handed to them as the
// subscription's Rewind in the subscriptions topic: each dispatcher moves
// the lanes of the partitions it owns to the rewind's offsets once and
// commits every cursor after with the rewind's tag as metadata, which is
// how the replay knows it applied and how a restart knows not to apply it
// again. Migration: the old dispatcher's per-subscription groups hold the
// same offsets, so a new dispatcher starts every subscription where the
// old one left it.
//
// It owns delivery; it does not own the subscriptions themselves (package
// subscriptions: the record, its validation, the registry and its topic,
// which this package watches and updates through the Registry), the events
// topic's content (the processor does), nor the admin API's HTTP surface.
package dispatch

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/hookstream/hookstream/config"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/tracing"
)

// Config configures the dispatcher.
type Config struct {
	Names topics.Names
	// Client configures delivery attempts.
	Client ClientConfig
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

// Dispatcher runs one consumer group per enabled subscription and the
// retry consumer.
type Dispatcher struct {
	cfg      Config
	opts     []kgo.Opt
	registry *subscriptions.Registry
	client   *Client
	log      *slog.Logger
	metrics  *metrics
	now      func() time.Time
	producer *kgo.Client // retry and DLQ writes
	// txnID is the transactional id of topic subscriptions' writes.
	txnID   string
	tracer  trace.Tracer
	retries *retries
	reader  *reader
	// loaded is closed once the registry has read the subscriptions
	// topic to its end: until then an unknown subscription may exist.
	loaded     chan struct{}
	loadedOnce sync.Once

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
	disabling    bool // a disable is being written
}

// errSuperseded stops the dispatcher's disable of a subscription an
// operator changed since the dispatcher judged it.
var errSuperseded = errors.New("subscription changed since it was judged")

// New builds a dispatcher. producer writes retries and dead letters
// (acks=all); opts are the shared client options for its consumers. It does
// no I/O.
func New(cfg Config, opts []kgo.Opt, producer *kgo.Client, registry *subscriptions.Registry, log *slog.Logger, reg prometheus.Registerer) *Dispatcher {
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
		opts:     opts,
		registry: registry,
		client:   NewClient(cfg.Client),
		tracer:   cfg.Tracing.Tracer(),
		log:      log.With("component", "dispatcher"),
		now:      time.Now,
		producer: producer,
		txnID:    cfg.Names.TopicWriter(cmp.Or(cfg.InstanceID, crand.Text())),
		loaded:   make(chan struct{}),
		subs:     make(map[string]*subState),
		workers:  make(map[string]*worker),
	}
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
			st.failingSince = time.Time{}
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
		restart := w != nil && !w.stopped && (old.Topic != s.Topic || old.Ordered != s.Ordered || old.MaxInFlight != s.MaxInFlight ||
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
	opts := slices.Concat(d.opts, []kgo.Opt{kgo.WithContext(clientCtx), kgo.ConsumerGroup(string(group))}, extra)
	if d.cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(d.cfg.InstanceID))
	}
	cl, err := kgo.NewClient(opts...)
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
	resp, err := req.RequestWith(ctx, d.producer)
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
	longest := d.client.timeout
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

// Ready reports open circuits, disabled subscriptions and those whose
// expressions were throttled within the last ExprWindow for /readyz; the
// dispatcher itself is always ready.
func (d *Dispatcher) Ready(context.Context) (bool, any) {
	open, disabled := d.circuits()
	return true, map[string]any{"open_circuits": open, "disabled": disabled, "throttled": d.throttled()}
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

// attempt makes attempt n of delivering m (an event or a batch) to st's
// subscriber, honouring its circuit and rate limit, and records the
// outcome. An attempt the open circuit refuses is not made: then retryAt
// says when to ask again, with the same n.
func (d *Dispatcher) attempt(ctx context.Context, st *subState, m *message, n int, room func()) (res Result, retryAt time.Time) {
	st.mu.Lock()
	sub, render, limiter := st.sub, st.render, st.limiter
	st.mu.Unlock()
	ok, probe, retryAt := st.circuit.admit(d.now(), n)
	if !ok {
		room() // waiting for the probe is not waiting for the host
		d.metrics.refused.WithLabelValues(sub.ID).Inc()
		return Result{}, retryAt
	}
	if limiter != nil {
		room()
		if err := limiter.Wait(ctx); err != nil {
			st.circuit.abandon(probe)
			return Result{Err: err}, time.Time{}
		}
	}
	actx, span := d.attemptSpan(ctx, sub, m, n)
	if header, err := render.Header(m.id, m.body, d.now(), d.cfg.Client.UserAgent); err != nil {
		room()
		res = Result{Err: err}
	} else {
		res = d.client.Deliver(actx, Delivery{URL: sub.URL, Header: header, Body: m.body, Timeout: time.Duration(sub.Timeout), Room: room})
	}
	endAttemptSpan(span, res)
	if ctx.Err() != nil && !res.OK() {
		st.circuit.abandon(probe) // stopping says nothing of the subscriber
		return res, time.Time{}
	}
	outcome := "success"
	if !res.OK() {
		outcome = "failure"
	}
	d.metrics.attempts.WithLabelValues(sub.ID, outcome).Inc()
	d.metrics.latency.Observe(res.Latency.Seconds())
	switch opened, closed := st.circuit.report(d.now(), probe, res.OK()); {
	case opened:
		d.log.Warn("circuit opened", "subscription", sub.ID, "cooldown", d.cfg.BreakerCooldown)
		d.circuitChanged(ctx, sub.ID, true, res)
	case closed:
		d.log.Info("circuit closed", "subscription", sub.ID)
		d.retries.release(sub.ID)
		d.circuitChanged(ctx, sub.ID, false, res)
	}
	d.record(ctx, st, sub, m, n, res)
	return res, time.Time{}
}

// attemptSpan starts the span of attempt n of delivering m, a child of
// the context its first event's record carries; the other events' records
// of a batch are links.
func (d *Dispatcher) attemptSpan(ctx context.Context, sub subscriptions.Subscription, m *message, n int) (context.Context, trace.Span) {
	ctx = d.cfg.Tracing.Extract(ctx, m.events[0].orig.Headers)
	ctx, span := d.tracer.Start(ctx, http.MethodPost, trace.WithSpanKind(trace.SpanKindClient))
	if !span.IsRecording() {
		return ctx, span
	}
	span.SetAttributes(semconv.HTTPRequestMethodPost, tracing.Subscription.String(sub.ID), tracing.Attempt.Int(n))
	if !m.batch {
		span.SetAttributes(tracing.EventID.String(m.id))
	}
	if u, err := url.Parse(sub.URL); err == nil {
		span.SetAttributes(semconv.ServerAddress(u.Hostname()))
	}
	for _, e := range m.events[1:] {
		if e.orig == m.events[0].orig {
			continue // a retried batch: one record carries them all
		}
		if sc := trace.SpanContextFromContext(d.cfg.Tracing.Extract(context.Background(), e.orig.Headers)); sc.IsValid() {
			span.AddLink(trace.Link{SpanContext: sc})
		}
	}
	return ctx, span
}

// traceID is the trace_id of a log line about m: its first event's trace.
func (d *Dispatcher) traceID(m *message) slog.Attr {
	if len(m.events) == 0 {
		return slog.Attr{}
	}
	return tracing.TraceID(d.cfg.Tracing.Extract(context.Background(), m.events[0].orig.Headers))
}

// endAttemptSpan ends an attempt's span with its answer.
func endAttemptSpan(span trace.Span, res Result) {
	if span.IsRecording() {
		if res.Status != 0 {
			span.SetAttributes(semconv.HTTPResponseStatusCode(res.Status))
		}
		if res.Err != nil {
			span.SetStatus(codes.Error, errorText(res.Err))
		}
	}
	span.End()
}

// record writes the attempt to the attempts topic, once for each event of
// m, and tracks the subscription's health: 410 Gone disables it at once;
// real attempts all failing, with no success, for DisableAfter disable it
// too.
func (d *Dispatcher) record(ctx context.Context, st *subState, sub subscriptions.Subscription, m *message, n int, res Result) {
	now := d.now()
	a := topics.Attempt{Subscription: sub.ID, N: n, Outcome: topics.OutcomeDelivered, Status: res.Status, Latency: res.Latency, At: now}
	if !res.OK() {
		a.Outcome = topics.OutcomeFailed
	}
	if res.Err != nil {
		a.Error = errorText(res.Err)
	}
	d.noteEach(a, m)
	var disable string
	st.mu.Lock()
	switch {
	case res.OK():
		st.failingSince = time.Time{}
	case res.Gone():
		disable = "subscriber answered 410 Gone"
	default:
		if st.failingSince.IsZero() {
			st.failingSince = now
		}
		if failing := now.Sub(st.failingSince); failing >= d.cfg.DisableAfter {
			disable = fmt.Sprintf("no successful delivery for %v: every real attempt failed", failing.Round(time.Millisecond))
		}
	}
	st.mu.Unlock()
	if disable != "" {
		d.disable(ctx, st, disable)
	}
}

// disable marks a subscription disabled in the registry, unless an
// operator changed it since the dispatcher last saw it (their word
// stands) or deleted it; the registry's watcher then stops its worker.
// It reports whether it disabled the subscription.
func (d *Dispatcher) disable(ctx context.Context, st *subState, reason string) bool {
	st.mu.Lock()
	seen := st.sub
	if !seen.Enabled || st.disabling {
		st.mu.Unlock()
		return false
	}
	st.disabling = true
	st.mu.Unlock()
	defer func() {
		st.mu.Lock()
		st.disabling = false
		st.mu.Unlock()
	}()
	// The write does not end with the delivery that decided it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	updated, err := d.registry.Update(ctx, seen.ID, func(s *subscriptions.Subscription) error {
		if !s.Enabled || !s.UpdatedAt.Equal(seen.UpdatedAt) {
			return errSuperseded
		}
		s.Enabled, s.DisabledReason = false, reason
		return nil
	})
	switch {
	case errors.Is(err, errSuperseded), errors.Is(err, subscriptions.ErrNotFound):
		d.log.Info("subscription not disabled: changed or deleted meanwhile", "subscription", seen.ID, "reason", reason)
		return false
	case err != nil:
		d.log.Error("could not record the disabled subscription", "subscription", seen.ID, "err", err)
		return false
	default:
		d.log.Warn("subscription disabled", "subscription", seen.ID, "reason", reason)
		st.mu.Lock()
		if st.sub.UpdatedAt.Equal(seen.UpdatedAt) {
			st.sub = updated
		}
		st.mu.Unlock()
	}
	return true
}

// delay is the wait before retry attempt (1-based) of schedule with ±20%
// jitter, or false once the schedule is exhausted. A Retry-After is
// honoured within [delay, 2×delay].
func delay(schedule []time.Duration, retry int, retryAfter time.Duration) (time.Duration, bool) {
	if retry > len(schedule) {
		return 0, false
	}
	base := schedule[retry-1]
	jittered := time.Duration(float64(base) * (0.8 + 0.4*rand.Float64()))
	if retryAfter > 0 {
		jittered = min(max(retryAfter, base), 2*base)
	}
	return jittered, true
}

// deadLetter writes a message that exhausted its attempts, with the
// subscriber's last answer, or whose transform failed (stage transform,
// its error for cause): one letter per event, each carrying the batch id
// when the message is a batch.
func (d *Dispatcher) deadLetter(ctx context.Context, subID string, m *message, attempts int, last Result) error {
	cause, stage := "delivery failed", topics.StageDeliver
	switch {
	case m.failed != nil:
		cause, stage, last = errorText(m.failed), topics.StageTransform, Result{}
	case last.Err != nil:
		cause = errorText(last.Err)
	}
	for ; m.lettered < len(m.events); m.lettered++ {
		letter := &topics.DeadLetter{
			Stage:        stage,
			Error:        cause,
			FailedAt:     d.now(),
			Subscription: subID,
			Attempts:     attempts,
			LastStatus:   last.Status,
		}
		if m.batch {
			letter.BatchID = m.id
		}
		e := m.events[m.lettered]
		written, err := d.writeLetter(ctx, letter, e)
		if err != nil {
			return err
		}
		if err := d.deadLettered(ctx, subID, e.id, attempts, last, cause, written); err != nil {
			return err
		}
	}
	d.log.Warn("delivery dead-lettered", "subscription", subID, "event_id", m.id, d.traceID(m), "events", len(m.events), "attempts", attempts, "err", cause)
	return nil
}

// writeLetter writes the dead letter of one event and returns it as
// written, with its partition and offset. A dead letter too large for the
// delivery DLQ is cut to fit (HeaderTruncated says so); one the broker
// keeps refusing for good, even cut, is logged and given up rather than
// blocking its partition forever (nil, no error).
func (d *Dispatcher) writeLetter(ctx context.Context, letter *topics.DeadLetter, e event) (*kgo.Record, error) {
	letter.Key, letter.Value = topics.RetryKey(letter.Subscription, e.id), e.envelope
	letter.OrigTopic, letter.OrigPartition, letter.OrigOffset = e.orig.Topic, e.orig.Partition, e.orig.Offset
	whole := letter.Record(d.cfg.Names.DeliveryDLQ)
	limit := d.cfg.MaxRecordBytes
	if limit <= 0 {
		limit = topics.RecordBytes(whole)
	}
	for {
		rec := *whole
		topics.Fit(&rec, limit)
		err := d.produce(ctx, &rec)
		switch {
		case err == nil:
			d.metrics.dlq.WithLabelValues(letter.Subscription).Inc()
			d.note(topics.Attempt{Subscription: letter.Subscription, EventID: e.id, N: letter.Attempts, Outcome: topics.OutcomeDeadLettered,
				Status: letter.LastStatus, Error: letter.Error, At: letter.FailedAt})
			return &rec, nil
		case !topics.IsPermanentProduceErr(err):
			return nil, fmt.Errorf("delivery dlq: %w", err)
		case limit <= minDeadLetterBytes:
			d.log.Error("delivery dead letter refused for good, given up", "subscription", letter.Subscription, "event_id", e.id,
				tracing.TraceID(d.cfg.Tracing.Extract(ctx, e.orig.Headers)), "attempts", letter.Attempts, "cause", letter.Error, "err", err)
			return nil, nil
		}
		// The topic takes less than the configured limit (created by an
		// older version, or changed): cut further.
		limit = max(min(limit, topics.RecordBytes(&rec))/2, minDeadLetterBytes)
	}
}

// minDeadLetterBytes is the smallest size a dead letter is cut to; topics.Fit
// always meets it.
const minDeadLetterBytes = 8 << 10

// maxErrorText bounds the error a hand-off carries in a header: a
// subscriber's answer (a redirect's Location, say) must not make it too
// large to write.
const maxErrorText = 1 << 10

func errorText(err error) string {
	s := err.Error()
	if len(s) <= maxErrorText {
		return s
	}
	return strings.ToValidUTF8(s[:maxErrorText], "") + "…"
}

// produce writes a hand-off record. One larger than MaxRecordBytes fails
// with kerr.MessageTooLarge without being sent: it can never be written.
func (d *Dispatcher) produce(ctx context.Context, rec *kgo.Record) error {
	if limit := d.cfg.MaxRecordBytes; limit > 0 && topics.RecordBytes(rec) > limit {
		return fmt.Errorf("%d bytes, over the %d-byte limit: %w", topics.RecordBytes(rec), limit, kerr.MessageTooLarge)
	}
	return d.producer.ProduceSync(ctx, rec).FirstErr()
}

// scheduleRetry hands a failed delivery to the retry topic: a batch goes
// whole, as one record.
func (d *Dispatcher) scheduleRetry(ctx context.Context, subID string, m *message, attempts int, wait time.Duration, last Result) error {
	now := d.now() // decided now: before the retry can be read and tried
	retry := &topics.Retry{
		Subscription: subID,
		EventID:      m.id,
		Batch:        m.batch,
		Resend:       m.resend,
		Attempts:     attempts,
		DueAt:        now.Add(wait),
		LastStatus:   last.Status,
		Body:         m.carried(),
	}
	if last.Err != nil {
		retry.Error = errorText(last.Err)
	}
	rec := retry.Record(d.cfg.Names.DeliveryRetry)
	// The retry continues the trace of the events record, or of the retry
	// it follows: its attempts are siblings of the first.
	d.cfg.Tracing.Inject(d.cfg.Tracing.Extract(ctx, m.events[0].orig.Headers), rec)
	if err := d.produce(ctx, rec); err != nil {
		return fmt.Errorf("delivery retry: %w", err)
	}
	d.noteEach(topics.Attempt{Subscription: subID, N: attempts, Outcome: topics.OutcomeRetrying, Status: last.Status, Error: retry.Error, At: now, DueAt: retry.DueAt}, m)
	return nil
}

// fail handles a failed first attempt of an unordered delivery or a failed
// retry: the next retry if schedule allows, else the DLQ.
func (d *Dispatcher) fail(ctx context.Context, subID string, schedule []time.Duration, m *message, attempts int, last Result) error {
	if last.Gone() || m.lettered > 0 {
		return d.deadLetter(ctx, subID, m, attempts, last)
	}
	wait, ok := delay(schedule, attempts, last.RetryAfter)
	if !ok {
		return d.deadLetter(ctx, subID, m, attempts, last)
	}
	err := d.scheduleRetry(ctx, subID, m, attempts, wait, last)
	if topics.IsPermanentProduceErr(err) {
		// The retry topic will never take it: its retries end here.
		d.log.Warn("retry cannot be written, dead-lettering", "subscription", subID, "event_id", m.id, d.traceID(m), "err", err)
		return d.deadLetter(ctx, subID, m, attempts, last)
	}
	return err
}
