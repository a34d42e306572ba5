package topics

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrDecode marks a record that is not a hookstream ingest record: a
// missing or malformed hs-* header, a key that is not <source>:<event-id>,
// or an empty value. Such a record can never be processed.
var ErrDecode = errors.New("decode")

// PayloadError is NewEnvelope's error for an ingest record the receiver
// marked with violations: its payload does not match its source's schema,
// so it never becomes an event.
type PayloadError struct {
	Violations []Violation // at least one
}

func (e *PayloadError) Error() string {
	first := e.Violations[0]
	msg := "payload does not match the schema: " + first.Message
	if first.Path != "" {
		msg = "payload does not match the schema: " + first.Path + ": " + first.Message
	}
	if n := len(e.Violations) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more)", n)
	}
	return msg
}

// NewEnvelope builds the events envelope of an ingest record r, stamped
// processedAt. It fails with ErrDecode when r is not an ingest record (see
// ParseIngestRecord), and with a PayloadError when r carries violations.
// Without hs-received-at the event was received at the record's
// timestamp; without hs-event-type its type is its source.
func NewEnvelope(r *kgo.Record, processedAt time.Time) (*Envelope, error) {
	ir, err := ParseIngestRecord(r)
	if err != nil {
		return nil, err
	}
	if len(ir.Violations) > 0 {
		return nil, &PayloadError{Violations: ir.Violations}
	}
	e := &Envelope{
		ID:           string(r.Key),
		Source:       ir.Source,
		EventID:      ir.EventID,
		Type:         cmp.Or(ir.EventType, ir.Source),
		ReceivedAt:   ir.ReceivedAt,
		ProcessedAt:  processedAt,
		ContentType:  ir.ContentType,
		RedrivenFrom: ir.RedrivenFrom,
	}
	if e.ReceivedAt.IsZero() {
		e.ReceivedAt = r.Timestamp.UTC()
	}
	if len(ir.Provider) > 0 {
		e.Headers = make(map[string]string, len(ir.Provider))
		for _, h := range ir.Provider {
			e.Headers[h.Key[len(HeaderProviderPrefix):]] = string(h.Value)
		}
	}
	// Whatever the record says of its body, a writer of the ingest topic
	// is not trusted to embed JSON verbatim: the body is checked here.
	e.SetBody(r.Value, e.ContentType, CheckJSON(r.Value) == nil)
	return e, nil
}

// EventRecord is the events record of ingest record r: its key and
// partition, env encoded as the value, and the headers consumers filter
// on without decoding the envelope: the identifying ones, and the marks
// of a redriven (HeaderRedrivenFrom) or re-emitted (HeaderReplay) event.
// RecordBytes of the result is its whole size on the wire, which must fit
// the record limit.
func EventRecord(events Topic, r *kgo.Record, env *Envelope) (*kgo.Record, error) {
	value, err := env.Marshal()
	if err != nil {
		return nil, err
	}
	headers := make([]kgo.RecordHeader, 0, 5)
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderSource, HeaderEventID, HeaderEventType, HeaderRedrivenFrom:
			headers = append(headers, h)
		}
	}
	if env.Replay > 0 {
		headers = append(headers, kgo.RecordHeader{Key: HeaderReplay, Value: strconv.AppendInt(nil, int64(env.Replay), 10)})
	}
	return &kgo.Record{Topic: string(events), Partition: r.Partition, Key: r.Key, Value: value, Headers: headers}, nil
}

// EventSourceType returns the source and type of an events record, from
// the headers EventRecord writes, else (a record written without them)
// from its envelope; empty when neither says.
func EventSourceType(r *kgo.Record) (source, eventType string) {
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderSource:
			if source == "" {
				source = string(h.Value)
			}
		case HeaderEventType:
			if eventType == "" {
				eventType = string(h.Value)
			}
		}
	}
	if source == "" {
		if env, err := ParseEnvelope(r.Value); err == nil {
			source, eventType = env.Source, env.Type
		}
	}
	return source, eventType
}

// SubscriptionRecord is the record a topic subscription writes to topic
// for events record r: r's key (<source>:<event-id>), value (the envelope
// or the subscription's transform result), and r's identifying headers,
// its marks (HeaderReplay, HeaderRedrivenFrom) and trace context.
func SubscriptionRecord(topic Topic, r *kgo.Record, value []byte) *kgo.Record {
	headers := make([]kgo.RecordHeader, 0, 7)
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderSource, HeaderEventID, HeaderEventType, HeaderReplay, HeaderRedrivenFrom, HeaderTraceparent, HeaderTracestate:
			headers = append(headers, h)
		}
	}
	return &kgo.Record{Topic: string(topic), Key: r.Key, Value: value, Headers: headers}
}
