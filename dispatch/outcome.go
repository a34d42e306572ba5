// Outcomes: what becomes of an at-least-once delivery attempt, whatever
// its destination: the attempt itself (the circuit and the rate limit
// around its sender), its record in the attempts ledger, the
// subscription disabled when its subscriber is gone or keeps failing,
// and the hand-offs of a failure: to the retry topic or, its schedule
// spent, to the delivery DLQ.

package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookstream/hookstream/internal/backoff"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/tracing"
)

// attempt makes attempt n of delivering m (an event or a batch) to st's
// subscriber, honouring its circuit and rate limit, and records the
// outcome. An attempt the open circuit refuses is not made: then retryAt
// says when to ask again, with the same n.
func (d *Dispatcher) attempt(ctx context.Context, st *subState, m *message, n int, room func()) (res result, retryAt time.Time) {
	st.mu.Lock()
	sub, render, limiter := st.sub, st.render, st.limiter
	st.mu.Unlock()
	ok, probe, retryAt := st.circuit.admit(d.now(), n)
	if !ok {
		room() // waiting for the probe is not waiting for the host
		d.metrics.refused.WithLabelValues(sub.ID).Inc()
		return result{}, retryAt
	}
	if limiter != nil {
		room()
		if err := limiter.Wait(ctx); err != nil {
			st.circuit.abandon(probe)
			return result{err: err}, time.Time{}
		}
	}
	res = d.senderFor(sub).send(ctx, sub, render, m, n, room)
	if ctx.Err() != nil && !res.ok {
		st.circuit.abandon(probe) // stopping says nothing of the subscriber
		return res, time.Time{}
	}
	outcome := "success"
	if !res.ok {
		outcome = "failure"
	}
	d.metrics.attempts.WithLabelValues(sub.ID, outcome).Inc()
	d.metrics.latency.Observe(res.latency.Seconds())
	switch opened, closed := st.circuit.report(d.now(), probe, res.ok); {
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

// attemptSpan starts the span, called name, of attempt n of delivering
// m: a child of the context its first event's record carries; the other
// events' records of a batch are links. The sender adds what its kind
// says of the attempt.
func (d *Dispatcher) attemptSpan(ctx context.Context, name string, sub subscriptions.Subscription, m *message, n int) (context.Context, trace.Span) {
	ctx = d.cfg.Tracing.Extract(ctx, m.events[0].orig.Headers)
	ctx, span := d.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient))
	if !span.IsRecording() {
		return ctx, span
	}
	span.SetAttributes(tracing.Subscription.String(sub.ID), tracing.Attempt.Int(n))
	if !m.batch {
		span.SetAttributes(tracing.EventID.String(m.id))
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

// endAttemptSpan ends an attempt's span with its outcome.
func endAttemptSpan(span trace.Span, res result) {
	if span.IsRecording() && res.err != nil {
		span.SetStatus(codes.Error, errorText(res.err))
	}
	span.End()
}

// record writes the attempt to the attempts topic, once for each event of
// m, and tracks the subscription's health: its run of failures (failing
// from subscriptions.FailingAfter on); 410 Gone disables it at once; real
// attempts all failing, with no success, for DisableAfter disable it too.
func (d *Dispatcher) record(ctx context.Context, st *subState, sub subscriptions.Subscription, m *message, n int, res result) {
	now := d.now()
	a := topics.Attempt{Subscription: sub.ID, N: n, Outcome: topics.OutcomeDelivered, Status: res.status, Latency: res.latency, At: now}
	if !res.ok {
		a.Outcome = topics.OutcomeFailed
	}
	if res.err != nil {
		a.Error = errorText(res.err)
	}
	d.noteEach(a, m)
	var disable string
	st.mu.Lock()
	switch {
	case res.ok:
		st.failingSince, st.failures = time.Time{}, failureRun{}
	case res.gone:
		st.failures.fail(now, attemptReason(res))
		disable = "subscriber answered 410 Gone"
	default:
		st.failures.fail(now, attemptReason(res))
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
func (d *Dispatcher) deadLetter(ctx context.Context, subID string, m *message, attempts int, last result) error {
	cause, stage := "delivery failed", topics.StageDeliver
	switch {
	case m.failed != nil:
		cause, stage, last = errorText(m.failed), topics.StageTransform, result{}
	case last.err != nil:
		cause = errorText(last.err)
	}
	for ; m.lettered < len(m.events); m.lettered++ {
		letter := &topics.DeadLetter{
			Stage:        stage,
			Error:        cause,
			FailedAt:     d.now(),
			Subscription: subID,
			Attempts:     attempts,
			LastStatus:   last.status,
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
	if stage == topics.StageTransform {
		d.transformFailed(subID, cause)
	}
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
	whole := letter.Record(d.cluster.Names.DeliveryDLQ)
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
	return d.cluster.Client.ProduceSync(ctx, rec).FirstErr()
}

// scheduleRetry hands a failed delivery to the retry topic: a batch goes
// whole, as one record.
func (d *Dispatcher) scheduleRetry(ctx context.Context, subID string, m *message, attempts int, wait time.Duration, last result) error {
	now := d.now() // decided now: before the retry can be read and tried
	retry := &topics.Retry{
		Subscription: subID,
		EventID:      m.id,
		Batch:        m.batch,
		Resend:       m.resend,
		Attempts:     attempts,
		DueAt:        now.Add(wait),
		LastStatus:   last.status,
		Body:         m.carried(),
	}
	if last.err != nil {
		retry.Error = errorText(last.err)
	}
	rec := retry.Record(d.cluster.Names.DeliveryRetry)
	// The retry continues the trace of the events record, or of the retry
	// it follows: its attempts are siblings of the first.
	d.cfg.Tracing.Inject(d.cfg.Tracing.Extract(ctx, m.events[0].orig.Headers), rec)
	if err := d.produce(ctx, rec); err != nil {
		return fmt.Errorf("delivery retry: %w", err)
	}
	d.noteEach(topics.Attempt{Subscription: subID, N: attempts, Outcome: topics.OutcomeRetrying, Status: last.status, Error: retry.Error, At: now, DueAt: retry.DueAt}, m)
	return nil
}

// fail handles a failed first attempt of an unordered delivery or a failed
// retry: the next retry if schedule allows, else the DLQ.
func (d *Dispatcher) fail(ctx context.Context, subID string, schedule []time.Duration, m *message, attempts int, last result) error {
	if last.gone || m.lettered > 0 {
		return d.deadLetter(ctx, subID, m, attempts, last)
	}
	wait, ok := delay(schedule, attempts, last.retryAfter)
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

// handOff writes m to the retry topic or the DLQ, retrying while Kafka
// refuses: a failed delivery is never skipped silently.
func (d *Dispatcher) handOff(ctx context.Context, subID string, m *message, write func(context.Context) error) bool {
	wait := backoff.New(100*time.Millisecond, 10*time.Second)
	for {
		err := write(ctx)
		if err == nil {
			return true
		}
		d.log.Error("could not hand off a failed delivery; retrying", "subscription", subID, "event_id", m.id, d.traceID(m), "err", err)
		if !wait.Wait(ctx) {
			return false
		}
	}
}
