package subscriptions

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

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

// MaxTestEnvelope bounds an envelope given to test a subscription: a
// 1 MiB body's, in base64, with room for its headers.
const MaxTestEnvelope = 4 << 20

// TestEvent is the event a test names: key, <source>:<event-id>, found on
// c's events topic (topics.Cluster.FindEvent), or envelope, given whole (at most
// MaxTestEnvelope bytes); exactly one of the two. An envelope that is not
// one, or both or neither given, is ErrInvalid.
func TestEvent(ctx context.Context, c topics.Cluster, key string, envelope []byte) (*Event, error) {
	switch {
	case (key == "") == (len(envelope) == 0):
		return nil, fmt.Errorf("%w: name an event (SOURCE:ID) or give an envelope, not both", ErrInvalid)
	case key != "":
		if _, id, ok := strings.Cut(key, ":"); !ok || id == "" || strings.HasPrefix(key, ":") {
			return nil, fmt.Errorf("%w: event %q is not SOURCE:ID", ErrInvalid, key)
		}
		r, err := c.FindEvent(ctx, key)
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
