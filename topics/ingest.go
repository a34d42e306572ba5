package topics

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// IngestRecord is a record of <prefix>.ingest: one webhook as the receiver
// accepted it. Its key is IngestKey(Source, EventID) and its value the
// body as it arrived.
type IngestRecord struct {
	Source    string
	EventID   string
	EventType string
	// ReceivedAt is when the receiver took the request.
	ReceivedAt time.Time
	// RequestID is the receiver's request id; written only when set.
	RequestID   string
	ContentType string
	// RedrivenFrom names the dead letter this record was redriven from,
	// if any (see HeaderRedrivenFrom).
	RedrivenFrom string
	// Provider are the provider headers carried, each keyed
	// ProviderHeaderKey(name), in the order they were carried.
	Provider []kgo.RecordHeader
	Body     []byte
	// Violations mark a payload that does not match its source's schema
	// (HeaderViolations); the processor dead-letters such a record.
	Violations []Violation
}

// IngestKey is the key of an event's records: <source>:<event-id>.
func IngestKey(source, eventID string) string { return source + ":" + eventID }

// ProviderHeaderKey is the record header key that carries the provider
// header name: HeaderProviderPrefix and the lowercased name.
func ProviderHeaderKey(name string) string { return HeaderProviderPrefix + strings.ToLower(name) }

// Record encodes the ingest record as a record of topic. RecordBytes of
// the result is its whole size on the wire.
func (ir *IngestRecord) Record(topic Topic) *kgo.Record {
	// Room for the trace context the receiver adds.
	headers := make([]kgo.RecordHeader, 0, 9+len(ir.Provider))
	headers = append(headers,
		kgo.RecordHeader{Key: HeaderSource, Value: []byte(ir.Source)},
		kgo.RecordHeader{Key: HeaderEventID, Value: []byte(ir.EventID)},
		kgo.RecordHeader{Key: HeaderEventType, Value: []byte(ir.EventType)},
		kgo.RecordHeader{Key: HeaderReceivedAt, Value: []byte(ir.ReceivedAt.UTC().Format(TimeFormat))},
	)
	if ir.RequestID != "" {
		headers = append(headers, kgo.RecordHeader{Key: HeaderRequestID, Value: []byte(ir.RequestID)})
	}
	headers = append(headers, kgo.RecordHeader{Key: HeaderContentType, Value: []byte(ir.ContentType)})
	if ir.RedrivenFrom != "" {
		headers = append(headers, kgo.RecordHeader{Key: HeaderRedrivenFrom, Value: []byte(ir.RedrivenFrom)})
	}
	headers = append(headers, ir.Provider...)
	if len(ir.Violations) > 0 {
		// Strings only: marshalling cannot fail.
		v, _ := json.Marshal(ir.Violations)
		headers = append(headers, kgo.RecordHeader{Key: HeaderViolations, Value: v})
	}
	return &kgo.Record{Topic: string(topic), Key: []byte(IngestKey(ir.Source, ir.EventID)), Value: ir.Body, Headers: headers}
}

// ParseIngestRecord decodes an ingest record. It fails with ErrDecode when
// r is not one: hs-source or hs-event-id missing, a key that is not
// <source>:<event-id>, an hs-received-at that is not RFC 3339, or an empty
// value. Of a header written twice the last counts; the dead-letter
// headers (hs-error and the others) are skipped. An hs-violations that is not a non-empty JSON array of
// violations is ErrDecode too. A missing hs-received-at or hs-event-type
// is left zero.
func ParseIngestRecord(r *kgo.Record) (*IngestRecord, error) {
	ir := &IngestRecord{Body: r.Value}
	for _, h := range r.Headers {
		switch {
		case h.Key == HeaderSource:
			ir.Source = string(h.Value)
		case h.Key == HeaderEventID:
			ir.EventID = string(h.Value)
		case h.Key == HeaderEventType:
			ir.EventType = string(h.Value)
		case h.Key == HeaderRequestID:
			ir.RequestID = string(h.Value)
		case h.Key == HeaderContentType:
			ir.ContentType = string(h.Value)
		case h.Key == HeaderRedrivenFrom:
			ir.RedrivenFrom = string(h.Value)
		case h.Key == HeaderReceivedAt:
			t, err := time.Parse(time.RFC3339Nano, string(h.Value))
			if err != nil {
				return nil, fmt.Errorf("%w: header %s: %q is not RFC 3339", ErrDecode, HeaderReceivedAt, h.Value)
			}
			ir.ReceivedAt = t
		case h.Key == HeaderViolations:
			if err := json.Unmarshal(h.Value, &ir.Violations); err != nil || len(ir.Violations) == 0 {
				return nil, fmt.Errorf("%w: header %s: %q is not a JSON array of violations", ErrDecode, HeaderViolations, h.Value)
			}
		case strings.HasPrefix(h.Key, HeaderProviderPrefix):
			ir.Provider = append(ir.Provider, h)
		}
	}
	switch {
	case ir.Source == "":
		return nil, fmt.Errorf("%w: header %s is missing", ErrDecode, HeaderSource)
	case ir.EventID == "":
		return nil, fmt.Errorf("%w: header %s is missing", ErrDecode, HeaderEventID)
	case string(r.Key) != IngestKey(ir.Source, ir.EventID):
		return nil, fmt.Errorf("%w: key %q is not %s:%s", ErrDecode, r.Key, ir.Source, ir.EventID)
	case len(r.Value) == 0:
		return nil, fmt.Errorf("%w: empty value", ErrDecode)
	}
	return ir, nil
}
