package topics

import "github.com/twmb/franz-go/pkg/kgo"

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
