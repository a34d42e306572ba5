// Compiled subscriptions: what a subscription sends for an event, built
// in one place for the dispatcher and for `subscriptions test`: whether
// the subscription receives the event and why, the body (the envelope, or
// the transform's JSON; a batch {"events":[...]} of either) and every
// header of an attempt but the trace context.

package subscriptions

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

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
