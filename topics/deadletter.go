package topics

import (
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// DeadLetter is a record of <prefix>.dlq or <prefix>.delivery-dlq: an
// original record wrapped with why, where and when it failed. Processor
// letters keep the ingest record's key, value and headers; delivery letters
// are keyed RetryKey(subscription, event id), hold the envelope and say
// which subscription gave up after how many attempts.
type DeadLetter struct {
	Key   []byte
	Value []byte
	// Headers are the original record's headers, without the error
	// headers of any earlier failure.
	Headers []kgo.RecordHeader

	Stage         string // hs-error-stage: StageDecode, StageValidate, StageProcess, StageDeliver, StageTransform
	Error         string // hs-error
	OrigTopic     string // hs-orig-topic
	OrigPartition int32  // hs-orig-partition
	OrigOffset    int64  // hs-orig-offset
	FailedAt      time.Time

	// Subscription, Attempts and LastStatus are set on delivery letters
	// only (Subscription is what makes a letter one).
	Subscription string
	Attempts     int
	LastStatus   int
	// BatchID is the batch the event was delivered in, if any.
	BatchID string
}

// errorHeaders are the headers a DeadLetter adds to its original.
var errorHeaders = []string{
	HeaderError, HeaderErrorStage, HeaderOrigTopic, HeaderOrigPartition, HeaderOrigOffset, HeaderFailedAt,
	HeaderSubscription, HeaderAttempts, HeaderLastStatus, HeaderBatchID,
}

func isErrorHeader(h kgo.RecordHeader) bool { return slices.Contains(errorHeaders, h.Key) }

// NewDeadLetter wraps orig, which failed at stage with cause at failedAt.
// A redriven record failing again loses the error headers of its first
// failure: the letter carries the fresh ones.
func NewDeadLetter(orig *kgo.Record, stage, cause string, failedAt time.Time) *DeadLetter {
	return &DeadLetter{
		Key:           orig.Key,
		Value:         orig.Value,
		Headers:       slices.DeleteFunc(slices.Clone(orig.Headers), isErrorHeader),
		Stage:         stage,
		Error:         cause,
		OrigTopic:     orig.Topic,
		OrigPartition: orig.Partition,
		OrigOffset:    orig.Offset,
		FailedAt:      failedAt,
	}
}

// Record encodes the letter as a record of topic: the original key, value
// and headers, then the error headers. RecordBytes of the result is its
// whole size; it can exceed the record limit as its original could, so
// callers cut it with Fit.
func (l *DeadLetter) Record(topic Topic) *kgo.Record {
	headers := make([]kgo.RecordHeader, 0, len(l.Headers)+len(errorHeaders))
	headers = append(headers, l.Headers...)
	headers = append(headers,
		kgo.RecordHeader{Key: HeaderError, Value: []byte(l.Error)},
		kgo.RecordHeader{Key: HeaderErrorStage, Value: []byte(l.Stage)},
		kgo.RecordHeader{Key: HeaderOrigTopic, Value: []byte(l.OrigTopic)},
		kgo.RecordHeader{Key: HeaderOrigPartition, Value: []byte(strconv.Itoa(int(l.OrigPartition)))},
		kgo.RecordHeader{Key: HeaderOrigOffset, Value: []byte(strconv.FormatInt(l.OrigOffset, 10))},
		kgo.RecordHeader{Key: HeaderFailedAt, Value: []byte(l.FailedAt.UTC().Format(TimeFormat))},
	)
	if l.Subscription != "" {
		headers = append(headers,
			kgo.RecordHeader{Key: HeaderSubscription, Value: []byte(l.Subscription)},
			kgo.RecordHeader{Key: HeaderAttempts, Value: []byte(strconv.Itoa(l.Attempts))},
			kgo.RecordHeader{Key: HeaderLastStatus, Value: []byte(strconv.Itoa(l.LastStatus))},
		)
	}
	if l.BatchID != "" {
		headers = append(headers, kgo.RecordHeader{Key: HeaderBatchID, Value: []byte(l.BatchID)})
	}
	return &kgo.Record{Topic: string(topic), Key: l.Key, Value: l.Value, Headers: headers}
}

// ParseDeadLetter decodes a dead-letter record. It never fails: a letter
// is shown as it is, so an error header that is missing or unreadable
// leaves its field zero, and a letter without hs-failed-at failed at the
// record's timestamp.
func ParseDeadLetter(r *kgo.Record) *DeadLetter {
	l := &DeadLetter{Key: r.Key, Value: r.Value, FailedAt: r.Timestamp.UTC()}
	for _, h := range r.Headers {
		v := string(h.Value)
		switch h.Key {
		case HeaderError:
			l.Error = v
		case HeaderErrorStage:
			l.Stage = v
		case HeaderOrigTopic:
			l.OrigTopic = v
		case HeaderOrigPartition:
			p, _ := strconv.ParseInt(v, 10, 32)
			l.OrigPartition = int32(p)
		case HeaderOrigOffset:
			l.OrigOffset, _ = strconv.ParseInt(v, 10, 64)
		case HeaderFailedAt:
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				l.FailedAt = t.UTC()
			}
		case HeaderSubscription:
			l.Subscription = v
		case HeaderAttempts:
			l.Attempts, _ = strconv.Atoi(v)
		case HeaderLastStatus:
			l.LastStatus, _ = strconv.Atoi(v)
		case HeaderBatchID:
			l.BatchID = v
		default:
			l.Headers = append(l.Headers, h)
		}
	}
	return l
}

// Unwrap returns the original record, in topic, for a redrive: its key,
// value and headers without the error headers, without the
// HeaderRedrivenFrom of an earlier redrive, and without HeaderViolations:
// redriving a payload that failed validation is the decision that it may
// pass.
func (l *DeadLetter) Unwrap(topic Topic) *kgo.Record {
	headers := slices.DeleteFunc(slices.Clone(l.Headers), func(h kgo.RecordHeader) bool {
		return h.Key == HeaderRedrivenFrom || h.Key == HeaderViolations
	})
	return &kgo.Record{Topic: string(topic), Key: l.Key, Value: l.Value, Headers: headers}
}
