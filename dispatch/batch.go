// Messages: what one delivery attempt sends. Without batching it is one
// event, its envelope signed with its event id; with batch_max above 1 it
// is a batch of events of one partition, in order, as
// {"events":[envelope,...]} signed with a batch id. A message is retried
// and dead-lettered as a unit: its retry record carries it whole, its dead
// letters are one per event.

package dispatch

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// message is one delivery's content, the same on every attempt.
type message struct {
	id    string // webhook-id: the event id, or the batch id
	body  []byte // the envelope, or the batch body
	batch bool
	// events are what the message carries, one per event, for its dead
	// letters.
	events []event
	// lettered counts the events dead-lettered so far: a hand-off that is
	// tried again writes no letter twice.
	lettered int
	// upto counts the records cut that the message accounts for with the
	// messages before it, filtered ones included: the last of them is
	// marked once the message is done.
	upto int
}

// event is one event of a message.
type event struct {
	id       string // <source>:<event-id>
	envelope []byte
	orig     *kgo.Record // where it was read: the events record, or the retry record carrying it
}

// batchID is the webhook-id of a batch: derived from the subscription, the
// partition, and the first and last offsets, so every retry of the batch
// carries the same id. The first and last event ids are in it too: an
// events topic created again starts its offsets over, and its batches
// must not pass for the old ones with a subscriber that deduplicates.
func batchID(sub string, first, last *kgo.Record) string {
	h := sha256.New()
	for _, part := range []string{sub, strconv.Itoa(int(first.Partition)), strconv.FormatInt(first.Offset, 10),
		strconv.FormatInt(last.Offset, 10), string(first.Key), string(last.Key)} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return "batch_" + hex.EncodeToString(h.Sum(nil)[:16])
}

// newMessage is the message of events records read from one partition: the
// envelope of one, or a batch when the subscription batches.
func newMessage(sub subscriptions.Subscription, recs []*kgo.Record) *message {
	m := &message{events: make([]event, len(recs))}
	for i, r := range recs {
		m.events[i] = event{id: string(r.Key), envelope: r.Value, orig: r}
	}
	if sub.BatchMax <= 1 {
		m.id, m.body = m.events[0].id, m.events[0].envelope
		return m
	}
	envelopes := make([][]byte, len(recs))
	for i, r := range recs {
		envelopes[i] = r.Value
	}
	m.id, m.body, m.batch = batchID(sub.ID, recs[0], recs[len(recs)-1]), topics.BatchBody(envelopes), true
	return m
}

// retryMessage is the message a retry record carries for sub: the same
// message as its first attempt. One event for a subscription that batches
// (a redriven dead letter, or a retry from before it batched) goes as a
// batch of one, whose id the retry record derives. The events of a batch
// are read from its body; one that cannot be split (written by something
// else) is dead-lettered whole, as one event.
func retryMessage(retry *topics.Retry, rec *kgo.Record, sub subscriptions.Subscription) *message {
	m := &message{id: retry.EventID, body: rec.Value, batch: retry.Batch}
	envelopes, err := topics.SplitBatch(rec.Value)
	if !retry.Batch || err != nil {
		m.events = []event{{id: retry.EventID, envelope: rec.Value, orig: rec}}
		if !retry.Batch && sub.BatchMax > 1 {
			m.id, m.body, m.batch = batchID(sub.ID, rec, rec), topics.BatchBody([][]byte{rec.Value}), true
		}
		return m
	}
	m.events = make([]event, len(envelopes))
	for i, e := range envelopes {
		id := retry.EventID
		if env, err := topics.ParseEnvelope(e); err == nil {
			id = env.ID
		}
		m.events[i] = event{id: id, envelope: e, orig: rec}
	}
	return m
}

// cut turns the records read from a partition into messages for sub, in
// order: each event that passes the filters (operational events about sub
// never do), or batches of up to
// batch_max of them whose body stays within maxBytes (0: no bound). A
// last batch not full is left for more records unless flush. covered
// counts the records the messages account for, filtered ones included.
func cut(sub subscriptions.Subscription, recs []*kgo.Record, maxBytes int, flush bool) (msgs []*message, covered int) {
	var batch []*kgo.Record
	size, end := 0, 0 // body bytes of batch; index after its last record
	send := func(upto int) {
		m := newMessage(sub, batch)
		m.upto = upto
		msgs = append(msgs, m)
		batch, size, covered = nil, 0, upto
	}
	for i, r := range recs {
		source, eventType := topics.EventSourceType(r)
		if !sub.Matches(source, eventType) || topics.OperationalSubject(r) == sub.ID {
			if len(batch) == 0 {
				covered = i + 1
			}
			continue
		}
		if len(batch) > 0 && maxBytes > 0 && topics.BatchBodyBytes(size+len(r.Value), len(batch)+1) > maxBytes {
			send(end)
		}
		batch, size, end = append(batch, r), size+len(r.Value), i+1
		if len(batch) >= max(1, sub.BatchMax) {
			send(end)
		}
	}
	if len(batch) > 0 && flush {
		send(len(recs))
	}
	return msgs, covered
}
