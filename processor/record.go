package processor

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// errDecode marks a record that is not a hookstream ingest record.
var errDecode = errors.New("decode")

// envelope builds the events envelope of an ingest record.
func envelope(r *kgo.Record, processedAt time.Time) (*topics.Envelope, error) {
	e := &topics.Envelope{ID: string(r.Key), ProcessedAt: processedAt}
	for _, h := range r.Headers {
		switch {
		case h.Key == topics.HeaderSource:
			e.Source = string(h.Value)
		case h.Key == topics.HeaderEventID:
			e.EventID = string(h.Value)
		case h.Key == topics.HeaderEventType:
			e.Type = string(h.Value)
		case h.Key == topics.HeaderContentType:
			e.ContentType = string(h.Value)
		case h.Key == topics.HeaderReceivedAt:
			t, err := time.Parse(time.RFC3339Nano, string(h.Value))
			if err != nil {
				return nil, fmt.Errorf("%w: header %s: %q is not RFC 3339", errDecode, topics.HeaderReceivedAt, h.Value)
			}
			e.ReceivedAt = t
		case strings.HasPrefix(h.Key, topics.HeaderProviderPrefix):
			if e.Headers == nil {
				e.Headers = make(map[string]string, 4)
			}
			e.Headers[h.Key[len(topics.HeaderProviderPrefix):]] = string(h.Value)
		}
	}
	switch {
	case e.Source == "":
		return nil, fmt.Errorf("%w: header %s is missing", errDecode, topics.HeaderSource)
	case e.EventID == "":
		return nil, fmt.Errorf("%w: header %s is missing", errDecode, topics.HeaderEventID)
	case e.ID != e.Source+":"+e.EventID:
		return nil, fmt.Errorf("%w: key %q is not %s:%s", errDecode, e.ID, e.Source, e.EventID)
	case len(r.Value) == 0:
		return nil, fmt.Errorf("%w: empty value", errDecode)
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

// dlqRecord is the dead letter of r: the original key, value and headers
// plus why and where it failed.
func dlqRecord(dlq topics.Topic, r *kgo.Record, stage string, cause error, failedAt time.Time) *kgo.Record {
	headers := make([]kgo.RecordHeader, 0, len(r.Headers)+6)
	for _, h := range r.Headers {
		switch h.Key {
		case topics.HeaderError, topics.HeaderErrorStage, topics.HeaderOrigTopic,
			topics.HeaderOrigPartition, topics.HeaderOrigOffset, topics.HeaderFailedAt:
			// A redriven record failing again gets fresh error headers.
		default:
			headers = append(headers, h)
		}
	}
	headers = append(headers,
		kgo.RecordHeader{Key: topics.HeaderError, Value: []byte(cause.Error())},
		kgo.RecordHeader{Key: topics.HeaderErrorStage, Value: []byte(stage)},
		kgo.RecordHeader{Key: topics.HeaderOrigTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: topics.HeaderOrigPartition, Value: []byte(strconv.Itoa(int(r.Partition)))},
		kgo.RecordHeader{Key: topics.HeaderOrigOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))},
		kgo.RecordHeader{Key: topics.HeaderFailedAt, Value: []byte(failedAt.UTC().Format(topics.TimeFormat))},
	)
	return &kgo.Record{Topic: string(dlq), Partition: r.Partition, Key: r.Key, Value: r.Value, Headers: headers}
}
