package processor

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// dlqRecord is the dead letter of r: the original key, value and headers
// plus why and where it failed. It can exceed the record limit as r could;
// callers cut it with topics.Fit.
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
