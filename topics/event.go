package topics

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrDecode marks a record that is not a hookstream ingest record: a
// missing or malformed hs-* header, a key that is not <source>:<event-id>,
// or an empty value. Such a record can never be processed.
var ErrDecode = errors.New("decode")

// NewEnvelope builds the events envelope of an ingest record r, stamped
// processedAt. It fails with ErrDecode when r is not an ingest record.
func NewEnvelope(r *kgo.Record, processedAt time.Time) (*Envelope, error) {
	e := &Envelope{ID: string(r.Key), ProcessedAt: processedAt}
	for _, h := range r.Headers {
		switch {
		case h.Key == HeaderSource:
			e.Source = string(h.Value)
		case h.Key == HeaderEventID:
			e.EventID = string(h.Value)
		case h.Key == HeaderEventType:
			e.Type = string(h.Value)
		case h.Key == HeaderContentType:
			e.ContentType = string(h.Value)
		case h.Key == HeaderReceivedAt:
			t, err := time.Parse(time.RFC3339Nano, string(h.Value))
			if err != nil {
				return nil, fmt.Errorf("%w: header %s: %q is not RFC 3339", ErrDecode, HeaderReceivedAt, h.Value)
			}
			e.ReceivedAt = t
		case strings.HasPrefix(h.Key, HeaderProviderPrefix):
			if e.Headers == nil {
				e.Headers = make(map[string]string, 4)
			}
			e.Headers[h.Key[len(HeaderProviderPrefix):]] = string(h.Value)
		}
	}
	switch {
	case e.Source == "":
		return nil, fmt.Errorf("%w: header %s is missing", ErrDecode, HeaderSource)
	case e.EventID == "":
		return nil, fmt.Errorf("%w: header %s is missing", ErrDecode, HeaderEventID)
	case e.ID != e.Source+":"+e.EventID:
		return nil, fmt.Errorf("%w: key %q is not %s:%s", ErrDecode, e.ID, e.Source, e.EventID)
	case len(r.Value) == 0:
		return nil, fmt.Errorf("%w: empty value", ErrDecode)
	}
	if e.ReceivedAt.IsZero() {
		e.ReceivedAt = r.Timestamp.UTC()
	}
	if e.Type == "" {
		e.Type = e.Source
	}
	e.SetBody(r.Value, e.ContentType, gjson.ValidBytes(r.Value))
	return e, nil
}

// EventRecord is the events record of ingest record r: its key and
// partition, env encoded as the value, and the identifying headers so
// consumers can filter without decoding the envelope. RecordBytes of the
// result is its whole size on the wire, which must fit the record limit.
func EventRecord(events Topic, r *kgo.Record, env *Envelope) (*kgo.Record, error) {
	value, err := env.Marshal()
	if err != nil {
		return nil, err
	}
	headers := make([]kgo.RecordHeader, 0, 3)
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderSource, HeaderEventID, HeaderEventType:
			headers = append(headers, h)
		}
	}
	return &kgo.Record{Topic: string(events), Partition: r.Partition, Key: r.Key, Value: value, Headers: headers}, nil
}
