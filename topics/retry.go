package topics

import (
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Retry is a record of <prefix>.delivery-retry: a delivery of one event,
// or of one batch of events, to one subscription, due again at DueAt. Its
// key is RetryKey(Subscription, EventID) and its value the envelope, or
// the batch body.
type Retry struct {
	Subscription string
	// EventID is the event's id, or the batch id when Batch is set.
	EventID string
	// Batch says the body is a batch, {"events":[envelope,...]}, retried
	// as a unit (HeaderBatchID holds its id).
	Batch bool
	// Attempts is how many attempts were made; 0 for a redriven letter,
	// which starts the schedule again.
	Attempts int
	DueAt    time.Time
	// LastStatus and Error are the subscriber's last answer: its HTTP
	// status (0 without a response) and the error, if any.
	LastStatus int
	Error      string
	// RedrivenFrom names the dead letter a redrive copied, if any.
	RedrivenFrom string
	// Resend says an operator asked for this delivery (events resend):
	// its attempts are recorded as a resend's.
	Resend bool
	Body   []byte
}

// RetryKey is the key of a subscription's retries and dead letters of one
// event: <subscription>:<event id>.
func RetryKey(subscription, eventID string) []byte {
	return []byte(subscription + ":" + eventID)
}

// SplitRetryKey returns the subscription and the event id of a RetryKey.
// A subscription id has no ':', event ids may; subscription, when not
// empty, is the one the key must start with.
func SplitRetryKey(key, subscription string) (sub, eventID string, ok bool) {
	if subscription == "" {
		subscription, _, _ = strings.Cut(key, ":")
	}
	eventID, ok = strings.CutPrefix(key, subscription+":")
	if subscription == "" || !ok || eventID == "" {
		return "", "", false
	}
	return subscription, eventID, true
}

// Record encodes the retry as a record of topic. RecordBytes of the
// result is its whole size on the wire.
func (r *Retry) Record(topic Topic) *kgo.Record {
	headers := make([]kgo.RecordHeader, 0, 8)
	headers = append(headers,
		kgo.RecordHeader{Key: HeaderSubscription, Value: []byte(r.Subscription)},
		kgo.RecordHeader{Key: HeaderEventID, Value: []byte(r.EventID)},
		kgo.RecordHeader{Key: HeaderAttempts, Value: []byte(strconv.Itoa(r.Attempts))},
		kgo.RecordHeader{Key: HeaderDueAt, Value: []byte(r.DueAt.UTC().Format(TimeFormat))},
	)
	if r.Attempts > 0 || r.LastStatus != 0 {
		headers = append(headers, kgo.RecordHeader{Key: HeaderLastStatus, Value: []byte(strconv.Itoa(r.LastStatus))})
	}
	if r.Error != "" {
		headers = append(headers, kgo.RecordHeader{Key: HeaderError, Value: []byte(r.Error)})
	}
	if r.RedrivenFrom != "" {
		headers = append(headers, kgo.RecordHeader{Key: HeaderRedrivenFrom, Value: []byte(r.RedrivenFrom)})
	}
	if r.Batch {
		headers = append(headers, kgo.RecordHeader{Key: HeaderBatchID, Value: []byte(r.EventID)})
	}
	if r.Resend {
		headers = append(headers, kgo.RecordHeader{Key: HeaderResend, Value: []byte("1")})
	}
	return &kgo.Record{Topic: string(topic), Key: RetryKey(r.Subscription, r.EventID), Value: r.Body, Headers: headers}
}

// ParseRetry decodes a retry record. It never fails: a header that is
// missing or unreadable leaves its field zero, so a retry without a
// readable due time is due at once and its attempt decides what becomes of
// it.
func ParseRetry(rec *kgo.Record) *Retry {
	value := func(key string) string {
		for i := len(rec.Headers) - 1; i >= 0; i-- {
			if rec.Headers[i].Key == key {
				return string(rec.Headers[i].Value)
			}
		}
		return ""
	}
	r := &Retry{
		Subscription: value(HeaderSubscription),
		EventID:      value(HeaderEventID),
		Error:        value(HeaderError),
		RedrivenFrom: value(HeaderRedrivenFrom),
		Batch:        value(HeaderBatchID) != "",
		Resend:       value(HeaderResend) != "",
		Body:         rec.Value,
	}
	r.Attempts, _ = strconv.Atoi(value(HeaderAttempts))
	r.LastStatus, _ = strconv.Atoi(value(HeaderLastStatus))
	if t, err := time.Parse(time.RFC3339Nano, value(HeaderDueAt)); err == nil {
		r.DueAt = t.UTC()
	}
	return r
}
