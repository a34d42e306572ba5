package topics

import (
	"errors"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// RecordFraming is the room a record needs beyond its key, value and
// headers: the record's own varints and attributes, the record batch
// header and the produce request's topic and partition framing. Kafka's
// max.message.bytes and kgo's ProducerBatchMaxBytes both count a whole
// batch, so a record is only sure to fit when these bytes fit beside it.
const RecordFraming = 1 << 10

// headerFraming bounds the varints that frame one header (its key and
// value lengths).
const headerFraming = 10

// RecordBytes is the most a record can take on the wire alone in a batch:
// key, value, headers and framing. A record with RecordBytes(r) <= limit
// fits a batch of limit bytes; a larger one may be refused by the producer
// or the broker with MESSAGE_TOO_LARGE, every time.
func RecordBytes(r *kgo.Record) int64 {
	n := int64(RecordFraming + len(r.Key) + len(r.Value))
	for _, h := range r.Headers {
		n += int64(headerFraming + len(h.Key) + len(h.Value))
	}
	return n
}

// fitHeaderValue is the most of a header value Fit keeps once the value
// alone could not make a record fit.
const fitHeaderValue = 256

// Fit cuts r until RecordBytes(r) <= limit, giving up first what matters
// least: the end of the value, then every header that is not one of
// hookstream's own (provider headers included), then all but the last of
// each repeated header and the tail of values past 256 bytes, then the end
// of the key. A cut record carries HeaderTruncated with its value's
// original size. Fit reports whether it cut anything; it never writes to
// r's original slices. Any limit of 8 KiB or more is always met.
func Fit(r *kgo.Record, limit int64) bool {
	if RecordBytes(r) <= limit {
		return false
	}
	r.Headers = append(slices.Clip(r.Headers), kgo.RecordHeader{Key: HeaderTruncated, Value: []byte(strconv.Itoa(len(r.Value)))})
	cuts := []func(over int64){
		func(over int64) { r.Value = r.Value[:len(r.Value)-int(min(over, int64(len(r.Value))))] },
		func(int64) {
			r.Headers = slices.DeleteFunc(slices.Clone(r.Headers), func(h kgo.RecordHeader) bool { return !isOwnHeader(h.Key) })
		},
		func(int64) { r.Headers = lastOfEach(r.Headers, fitHeaderValue) },
		func(over int64) { r.Key = r.Key[:len(r.Key)-int(min(over, int64(len(r.Key))))] },
	}
	for _, cut := range cuts {
		cut(RecordBytes(r) - limit)
		if RecordBytes(r) <= limit {
			break
		}
	}
	return true
}

// lastOfEach keeps the last header of each key, its value cut to n bytes.
func lastOfEach(headers []kgo.RecordHeader, n int) []kgo.RecordHeader {
	last := make(map[string]int, len(headers))
	for i, h := range headers {
		last[h.Key] = i
	}
	out := make([]kgo.RecordHeader, 0, len(last))
	for i, h := range headers {
		if last[h.Key] == i {
			out = append(out, kgo.RecordHeader{Key: h.Key, Value: h.Value[:min(len(h.Value), n)]})
		}
	}
	return out
}

// IsPermanentProduceErr reports whether a produce error is caused by the
// record itself, so producing the same record again can only fail again:
// too large for the topic or the batch, or refused by the broker's
// validation (a keyless record on a compacted topic, a timestamp out of
// range, a corrupt batch). Errors about the cluster or the topic
// (authorization, unknown or invalid topic, timeouts, fencing) are not: they
// concern every record, and retrying after an operator's fix can succeed.
func IsPermanentProduceErr(err error) bool {
	for _, e := range []*kerr.Error{kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord, kerr.CorruptMessage, kerr.InvalidTimestamp} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
