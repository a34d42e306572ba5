// Rendering: what a subscription sends for an event, built in one place
// for the dispatcher and for `subscriptions test`: whether the
// subscription receives the event and why, the body (the envelope, or the
// transform's JSON; a batch {"events":[...]} of either) and every header
// of an attempt but the trace context.

package subscriptions

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/expr"
	"github.com/hookstream/hookstream/signature"
	"github.com/hookstream/hookstream/topics"
)

// Compiled is one version of a subscription (its id and UpdatedAt) with
// its filter and transform compiled: built once per version, not per
// event, and safe for concurrent use.
type Compiled struct {
	sub       Subscription
	filter    *expr.Filter
	transform *expr.Transform
	// filterErr and transformErr: a stored expression that does not
	// compile (written by another version of hookstream). Every event is
	// then no match, or a transform failure, with this error.
	filterErr, transformErr error
	header                  http.Header // the static headers
}

// Compile compiles s's filter and transform. It never fails: an
// expression that does not compile fails each event it meets instead,
// as one that fails when evaluated does.
func Compile(s Subscription) *Compiled {
	c := &Compiled{sub: s, header: make(http.Header, len(s.Headers)+6)}
	if s.Filter != "" {
		if c.filter, c.filterErr = expr.CompileFilter(s.Filter); c.filterErr != nil {
			c.filterErr = fmt.Errorf("the stored filter does not compile: %w", c.filterErr)
		}
	}
	if s.Transform != "" {
		if c.transform, c.transformErr = expr.CompileTransform(s.Transform); c.transformErr != nil {
			c.transformErr = fmt.Errorf("the stored transform does not compile: %w", c.transformErr)
		}
	}
	for name, value := range s.Headers {
		c.header[http.CanonicalHeaderKey(name)] = []string{value}
	}
	return c
}

// Of reports whether c is the compiled form of s's version.
func (c *Compiled) Of(s Subscription) bool {
	return c != nil && c.sub.ID == s.ID && c.sub.UpdatedAt.Equal(s.UpdatedAt)
}

// Subscription returns the subscription c was compiled from.
func (c *Compiled) Subscription() Subscription { return c.sub }

// Transforms reports whether c delivers transform results rather than
// envelopes.
func (c *Compiled) Transforms() bool { return c.sub.Transform != "" }

// Evaluates reports whether judging an event for c runs an expression (a
// filter or a transform), whose cost depends on the event's payload.
func (c *Compiled) Evaluates() bool { return c.sub.Filter != "" || c.sub.Transform != "" }

// Event is one event as a subscription judges and renders it: an events
// record, or an envelope given to test a subscription. Its envelope is
// parsed only when a filter or a transform reads it, and at most once. An
// Event is safe for concurrent use: the lanes of a dispatcher judge one
// event each on their own goroutine.
type Event struct {
	rec         *kgo.Record
	typeOnce    sync.Once
	source, typ string
	inputOnce   sync.Once
	input       *expr.Input
	err         error // the envelope does not parse
}

// NewEvent returns the event of an events record, or of a record holding
// an envelope as its value and nothing else.
func NewEvent(r *kgo.Record) *Event { return &Event{rec: r} }

// Record returns the record the event was made of.
func (e *Event) Record() *kgo.Record { return e.rec }

func (e *Event) sourceType() (string, string) {
	e.typeOnce.Do(func() { e.source, e.typ = topics.EventSourceType(e.rec) })
	return e.source, e.typ
}

// Input returns the event as expressions see it.
func (e *Event) Input() (*expr.Input, error) {
	e.inputOnce.Do(func() {
		env, err := topics.ParseEnvelope(e.rec.Value)
		if err != nil {
			e.err = fmt.Errorf("the event's envelope: %w", err)
		} else {
			e.input = expr.NewInput(env)
		}
	})
	return e.input, e.err
}

// Rule is what decided whether a subscription receives an event.
type Rule uint8

const (
	// RuleMatch: every rule let the event through.
	RuleMatch Rule = iota
	// RuleSelf: an operational event about the subscription itself.
	RuleSelf
	// RuleOperational: an operational event, and the subscription's
	// sources do not name hookstream.
	RuleOperational
	// RuleSources: the event's source matches no glob of sources.
	RuleSources
	// RuleEventTypes: the event's type matches no glob of event_types.
	RuleEventTypes
	// RuleFilter: the filter is false.
	RuleFilter
	// RuleFilterError: the filter failed (Decision.Err): no match.
	RuleFilterError
)

// Decision is whether a subscription receives an event, and why. It
// costs no allocation unless the filter failed; Reason spells it out.
type Decision struct {
	Match bool
	Rule  Rule
	// Err is the filter's failure, with RuleFilterError.
	Err error

	source, typ          string
	sourceGlob, typeGlob string // the globs that matched; "" for none given
	sources, types       []string
	filtered             bool
}

// Match decides whether the subscription receives e: an operational event
// about itself never, then the sources and event_types globs, then the
// filter. A filter that fails is no match, with the error.
func (c *Compiled) Match(e *Event) Decision {
	source, typ := e.sourceType()
	d := Decision{source: source, typ: typ, sources: c.sub.Sources, types: c.sub.EventTypes, filtered: c.sub.Filter != ""}
	var ok bool
	switch {
	case source == topics.OperationalSource && topics.OperationalSubject(e.rec) == c.sub.ID:
		d.Rule = RuleSelf
		return d
	case source == topics.OperationalSource && !slices.Contains(c.sub.Sources, source):
		d.Rule = RuleOperational
		return d
	}
	if d.sourceGlob, ok = firstMatch(c.sub.Sources, source); !ok {
		d.Rule = RuleSources
		return d
	}
	if d.typeGlob, ok = firstMatch(c.sub.EventTypes, typ); !ok {
		d.Rule = RuleEventTypes
		return d
	}
	if c.filterErr != nil {
		d.Rule, d.Err = RuleFilterError, c.filterErr
		return d
	}
	if c.filter != nil {
		in, err := e.Input()
		if err == nil {
			ok, err = c.filter.Match(in)
		}
		switch {
		case err != nil:
			d.Rule, d.Err = RuleFilterError, err
			return d
		case !ok:
			d.Rule = RuleFilter
			return d
		}
	}
	d.Match, d.Rule = true, RuleMatch
	return d
}

// firstMatch returns the first of globs that v matches; none given
// matches everything.
func firstMatch(globs []string, v string) (string, bool) {
	if len(globs) == 0 {
		return "", true
	}
	for _, g := range globs {
		if ok, _ := path.Match(g, v); ok {
			return g, true
		}
	}
	return "", false
}

// Reason says in a sentence why the event is received or not.
func (d Decision) Reason() string {
	switch d.Rule {
	case RuleSelf:
		return "an operational event about this subscription: none is sent to the subscription it is about"
	case RuleOperational:
		return fmt.Sprintf("an operational event: only subscriptions whose sources name %q receive them", topics.OperationalSource)
	case RuleSources:
		return fmt.Sprintf("source %q matches none of sources %q", d.source, d.sources)
	case RuleEventTypes:
		return fmt.Sprintf("type %q matches none of event_types %q", d.typ, d.types)
	case RuleFilter:
		return fmt.Sprintf("%s, %s, but the filter is false", d.sourceWhy(), d.typeWhy())
	case RuleFilterError:
		return fmt.Sprintf("%s, %s, but the filter failed, which is no match: %v", d.sourceWhy(), d.typeWhy(), d.Err)
	}
	filter := "no filter"
	if d.filtered {
		filter = "the filter is true"
	}
	return fmt.Sprintf("%s, %s, %s", d.sourceWhy(), d.typeWhy(), filter)
}

func (d Decision) sourceWhy() string {
	if d.sourceGlob == "" {
		return fmt.Sprintf("source %q (no sources: all)", d.source)
	}
	return fmt.Sprintf("source %q matches %q", d.source, d.sourceGlob)
}

func (d Decision) typeWhy() string {
	if d.typeGlob == "" {
		return fmt.Sprintf("type %q (no event_types: all)", d.typ)
	}
	return fmt.Sprintf("type %q matches %q", d.typ, d.typeGlob)
}

// TransformError is a transform that failed for an event: the event is
// dead-lettered for the subscription at stage transform, without an
// attempt.
type TransformError struct{ Err error }

func (e *TransformError) Error() string { return "transform: " + e.Err.Error() }
func (e *TransformError) Unwrap() error { return e.Err }

// Render returns what a delivery of e alone sends: its envelope, or the
// transform's JSON, no larger than limit bytes (0: no limit but the
// transform's own). A failing transform, or a result over limit, is a
// *TransformError.
func (c *Compiled) Render(e *Event, limit int) ([]byte, error) {
	if c.sub.Transform == "" {
		return e.rec.Value, nil
	}
	if c.transformErr != nil {
		return nil, &TransformError{c.transformErr}
	}
	in, err := e.Input()
	if err != nil {
		return nil, &TransformError{err}
	}
	body, err := c.transform.Apply(in)
	if err != nil {
		return nil, &TransformError{err}
	}
	if limit > 0 && len(body) > limit {
		return nil, &TransformError{fmt.Errorf("its JSON is %d bytes, over the %d-byte limit of a delivery", len(body), limit)}
	}
	return body, nil
}

// BatchID is the webhook-id of a batch: derived from the subscription, the
// partition, and the first and last offsets, so every retry of the batch
// carries the same id. The first and last event ids are in it too: an
// events topic created again starts its offsets over, and its batches
// must not pass for the old ones with a subscriber that deduplicates.
func BatchID(sub string, first, last *kgo.Record) string {
	h := sha256.New()
	for _, part := range []string{sub, strconv.Itoa(int(first.Partition)), strconv.FormatInt(first.Offset, 10),
		strconv.FormatInt(last.Offset, 10), string(first.Key), string(last.Key)} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return "batch_" + hex.EncodeToString(h.Sum(nil)[:16])
}

// TraceContext is the W3C Trace Context the event's record carries: its
// traceparent and tracestate headers, those it has. A webhook attempt
// continues it; a pull answer serves it beside the event.
func (e *Event) TraceContext() map[string]string {
	tc := make(map[string]string, 2)
	for _, h := range e.rec.Headers {
		if h.Key == topics.HeaderTraceparent || h.Key == topics.HeaderTracestate {
			tc[h.Key] = string(h.Value)
		}
	}
	return tc
}

// ErrNoSigningKey: the subscription has no secret that decodes; nothing
// is sent unsigned.
var ErrNoSigningKey = errors.New("no signing key")

// Header returns every header of an attempt that sends body as webhook-id
// id at now, but the trace context (traceparent, which is the attempt's
// own): the subscription's static headers, Content-Type, User-Agent when
// userAgent is not empty, and webhook-id, webhook-timestamp and
// webhook-signature, signed with each key in force at now (Standard
// Webhooks). A static header never replaces one of these.
func (c *Compiled) Header(id string, body []byte, now time.Time, userAgent string) (http.Header, error) {
	keys := c.sub.Keys(now)
	if len(keys) == 0 {
		return nil, ErrNoSigningKey
	}
	h := maps.Clone(c.header)
	h["Content-Type"] = []string{"application/json"}
	if userAgent != "" {
		h["User-Agent"] = []string{userAgent}
	}
	signature.SignRequest(h, keys, id, now, body)
	return h, nil
}

// Preview is what a subscription would send for one event, sent nowhere:
// the answer of `subscriptions test`.
type Preview struct {
	Match  bool   `json:"match"`
	Reason string `json:"reason"`
	// Error is the transform's failure: the event would be dead-lettered
	// for the subscription at stage transform, and nothing sent; a pull
	// answer lists it in its errors instead.
	Error string `json:"error,omitempty"`
	// Body and Headers are the request's, when the event would be sent;
	// for a pull subscription, Body is the event's item in a pull
	// answer's events, and there are no headers.
	Body    json.RawMessage   `json:"body,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// TraceContext is what a pull answer carries beside the event: its
	// trace_contexts item, or its errors entry's trace_context.
	TraceContext map[string]string `json:"trace_context,omitempty"`
}

// Preview decides whether the subscription receives e and, when it does,
// builds the body and the headers of its first attempt at now as the
// dispatcher would: for a subscription that batches, those of a batch
// holding e alone; for a topic subscription, the record's value and
// headers. The trace context is e's record's: an attempt sends the same
// trace, with its own span id when spans are exported. For a pull
// subscription it is what a pull answer serves of e: its body and its
// trace context.
func (c *Compiled) Preview(e *Event, now time.Time, userAgent string) Preview {
	d := c.Match(e)
	p := Preview{Match: d.Match, Reason: d.Reason()}
	if !d.Match {
		return p
	}
	pull := c.sub.Kind() == KindPull
	if pull {
		p.TraceContext = e.TraceContext()
	}
	body, err := c.Render(e, 0)
	switch {
	case err != nil && pull:
		p.Error = err.Error()
		p.Reason += "; the transform failed: a pull answer lists the event in its errors, not its events, and its cursor passes it"
		return p
	case err != nil:
		p.Error = err.Error()
		p.Reason += "; the transform failed: the event is dead-lettered for this subscription at stage transform, nothing is sent"
		return p
	case pull:
		p.Body = body
		return p
	}
	if c.sub.Topic != "" {
		// A topic subscription's record: the body and the record's headers.
		rec := topics.SubscriptionRecord(topics.Topic(c.sub.Topic), e.rec, body)
		p.Body, p.Headers = body, make(map[string]string, len(rec.Headers))
		for _, h := range rec.Headers {
			p.Headers[h.Key] = string(h.Value)
		}
		return p
	}
	id := string(e.rec.Key)
	if c.sub.BatchMax > 1 {
		id, body = BatchID(c.sub.ID, e.rec, e.rec), topics.BatchBody([][]byte{body})
	}
	h, err := c.Header(id, body, now, userAgent)
	if err != nil {
		p.Error = err.Error()
		return p
	}
	for k, v := range e.TraceContext() {
		h.Set(k, v)
	}
	p.Body, p.Headers = body, make(map[string]string, len(h))
	for name, values := range h {
		p.Headers[strings.ToLower(name)] = strings.Join(values, ", ")
	}
	return p
}

// Redact hides the values of the subscription's own headers in p, as
// Subscription.Redacted hides them.
func (c *Compiled) Redact(p Preview) Preview {
	if p.Headers == nil || len(c.header) == 0 {
		return p
	}
	p.Headers = maps.Clone(p.Headers)
	for name := range c.header {
		if _, ok := p.Headers[strings.ToLower(name)]; ok {
			p.Headers[strings.ToLower(name)] = "…"
		}
	}
	return p
}

// Bounds of a test.
const (
	// MaxTestEnvelope bounds an envelope given to test a subscription: a
	// 1 MiB body's, in base64, with room for its headers.
	MaxTestEnvelope = 4 << 20
	// findEventLimit bounds the records read to find an event on the
	// events topic.
	findEventLimit = 100_000
)

// ErrEventNotFound: the event is not among the records of the events
// topic read to find it.
var ErrEventNotFound = errors.New("event not found")

// TestEvent is the event a test names: key, <source>:<event-id>, found on
// the events topic (FindEvent), or envelope, given whole (at most
// MaxTestEnvelope bytes); exactly one of the two. An envelope that is not
// one, or both or neither given, is ErrInvalid.
func TestEvent(ctx context.Context, cl *kgo.Client, opts []kgo.Opt, names topics.Names, key string, envelope []byte) (*Event, error) {
	switch {
	case (key == "") == (len(envelope) == 0):
		return nil, fmt.Errorf("%w: name an event (SOURCE:ID) or give an envelope, not both", ErrInvalid)
	case key != "":
		if _, id, ok := strings.Cut(key, ":"); !ok || id == "" || strings.HasPrefix(key, ":") {
			return nil, fmt.Errorf("%w: event %q is not SOURCE:ID", ErrInvalid, key)
		}
		r, err := FindEvent(ctx, cl, opts, names, key)
		if err != nil {
			return nil, err
		}
		return NewEvent(r), nil
	case len(envelope) > MaxTestEnvelope:
		return nil, fmt.Errorf("%w: the envelope is %d bytes, over %d", ErrInvalid, len(envelope), MaxTestEnvelope)
	}
	if err := topics.CheckJSON(envelope); err != nil {
		return nil, fmt.Errorf("%w: the envelope: %w", ErrInvalid, err)
	}
	env, err := topics.ParseEnvelope(envelope)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return NewEvent(&kgo.Record{Key: []byte(env.ID), Value: envelope}), nil
}

// FindEvent returns the latest record of the event key on the events
// topic, read_committed: its partition is read back from its end, in
// doubling steps, at most findEventLimit records in all. An event not
// among them is ErrEventNotFound.
func FindEvent(ctx context.Context, cl *kgo.Client, opts []kgo.Opt, names topics.Names, key string) (*kgo.Record, error) {
	rs, err := topics.Span{Key: []byte(key), Stable: true}.Ranges(ctx, cl, names.Events)
	if err != nil {
		return nil, fmt.Errorf("events topic: %w", err)
	}
	for p, r := range rs { // one partition, the key's, unless it is empty
		to, step, read := r.To, int64(1000), int64(0)
		for to > r.From && read < findEventLimit {
			from := max(r.From, to-min(step, findEventLimit-read))
			var found *kgo.Record
			err := topics.ReadRanges(ctx, opts, names.Events, topics.Ranges{p: {From: from, To: to}}, func(rec *kgo.Record) bool {
				if string(rec.Key) == key {
					found = rec
				}
				return true
			}, nil)
			if err != nil {
				return nil, fmt.Errorf("events topic: %w", err)
			}
			if found != nil {
				return found, nil
			}
			read += to - from
			to, step = from, 2*step
		}
		return nil, fmt.Errorf("%w: %s is not among the last %d records of partition %d of %s (use an envelope instead: events search prints them)",
			ErrEventNotFound, key, read, p, names.Events)
	}
	return nil, fmt.Errorf("%w: %s: the events topic holds nothing in its partition", ErrEventNotFound, key)
}

// testSubscription answers POST /api/subscriptions/{id}/test, body
// {"event": "SOURCE:ID"} or {"envelope": {...}}, with the Preview of the
// event for the subscription, its own headers' values hidden as every
// answer but the one that set them hides them: nothing is delivered.
func (a API) testSubscription(c *echo.Context) error {
	var in struct {
		Event    string          `json:"event"`
		Envelope json.RawMessage `json:"envelope"`
	}
	if err := admin.DecodeJSONStrict(c, &in, MaxTestEnvelope+4<<10); err != nil {
		return err
	}
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	s, err := a.Registry.Get(ctx, c.Param("id"))
	if err != nil {
		return httpError(err)
	}
	e, err := TestEvent(ctx, a.Kafka, a.Opts, a.Names, in.Event, in.Envelope)
	if errors.Is(err, ErrEventNotFound) {
		return echo.NewHTTPError(http.StatusNotFound, err.Error())
	}
	if err != nil {
		return httpError(err)
	}
	compiled := Compile(s)
	return c.JSON(http.StatusOK, compiled.Redact(compiled.Preview(e, time.Now(), a.UserAgent)))
}
