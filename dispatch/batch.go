// Messages: what one delivery attempt sends. Without batching it is one
// event, its envelope (or its transform's JSON) signed with its event id;
// with batch_max above 1 it is a batch of events of one partition, in
// order, as {"events":[...]} signed with a batch id. A message is retried
// and dead-lettered as a unit: its retry record carries its envelopes
// whole (every attempt renders them anew), its dead letters are one per
// event. An event whose transform fails is a message of its own that is
// dead-lettered at once, without an attempt.

package dispatch

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// message is one delivery's content, the same on every attempt.
type message struct {
	id    string // webhook-id: the event id, or the batch id
	body  []byte // what is sent: the envelope, the transform's JSON, or a batch of either
	batch bool
	// transformed: body holds transform results, not the envelopes.
	transformed bool
	// resend: an operator asked for this delivery again (events resend);
	// its attempt records and retries say so.
	resend bool
	// failed is the transform's failure for the message's one event: it
	// is dead-lettered at stage transform and nothing is sent.
	failed error
	// events are what the message carries, one per event, for its retry
	// record and its dead letters.
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

// carried is what the message's retry record holds: its envelope, or a
// batch of its envelopes.
func (m *message) carried() []byte {
	switch {
	case !m.transformed:
		return m.body
	case !m.batch:
		return m.events[0].envelope
	}
	envelopes := make([][]byte, len(m.events))
	for i, e := range m.events {
		envelopes[i] = e.envelope
	}
	return topics.BatchBody(envelopes)
}

// newMessage is the message of items read from one partition: one event
// alone, or a batch when the subscription batches.
func newMessage(c *subscriptions.Compiled, items []item) *message {
	sub := c.Subscription()
	m := &message{events: make([]event, len(items)), transformed: c.Transforms()}
	for i, it := range items {
		m.events[i] = event{id: string(it.rec.Key), envelope: it.rec.Value, orig: it.rec}
	}
	if sub.BatchMax <= 1 {
		m.id, m.body = m.events[0].id, items[0].part
		return m
	}
	parts := make([][]byte, len(items))
	for i, it := range items {
		parts[i] = it.part
	}
	m.id, m.body, m.batch = subscriptions.BatchID(sub.ID, items[0].rec, items[len(items)-1].rec), topics.BatchBody(parts), true
	return m
}

// retryMessage is the message a retry record carries for c's
// subscription: the same message as its first attempt, rendered anew. One
// event for a subscription that batches (a redriven dead letter, or a
// retry from before it batched) goes as a batch of one, whose id the
// retry record derives. The events of a batch are read from its body; one
// that cannot be split (written by something else) is one event. The
// events whose transform fails now are failed, messages of their own.
func retryMessage(retry *topics.Retry, rec *kgo.Record, c *subscriptions.Compiled, limit int) (m *message, failed []*message) {
	sub := c.Subscription()
	m = &message{id: retry.EventID, batch: retry.Batch, transformed: c.Transforms(), resend: retry.Resend}
	envelopes, err := topics.SplitBatch(rec.Value)
	split := retry.Batch && err == nil
	if !split {
		envelopes = [][]byte{rec.Value}
		if !retry.Batch && sub.BatchMax > 1 {
			m.id, m.batch = subscriptions.BatchID(sub.ID, rec, rec), true
		}
	}
	wrap := split || !retry.Batch && m.batch // else one event, or a batch sent as it is
	parts := make([][]byte, 0, len(envelopes))
	for _, envelope := range envelopes {
		e := event{id: retry.EventID, envelope: envelope, orig: rec}
		if split {
			if env, err := topics.ParseEnvelope(envelope); err == nil {
				e.id = env.ID
			}
		}
		part, err := c.Render(subscriptions.NewEvent(&kgo.Record{Key: []byte(e.id), Value: envelope}), limit)
		if err != nil {
			failed = append(failed, &message{id: e.id, failed: err, events: []event{e}})
			continue
		}
		m.events, parts = append(m.events, e), append(parts, part)
	}
	switch {
	case len(m.events) == 0:
		return nil, failed
	case wrap:
		m.body = topics.BatchBody(parts)
	default:
		m.body = parts[0]
	}
	return m, failed
}

// cut turns the items judged from a partition into messages for c, in
// order: each event that c receives, or batches of up to batch_max of
// them whose body, and whose retry record, stay within maxBytes (0: no
// bound). An event whose transform failed is a message of its own, after
// the batch before it. A last batch not full is left for more records
// unless flush. covered counts the records the messages account for,
// filtered ones included.
func cut(c *subscriptions.Compiled, items []item, maxBytes int, flush bool) (msgs []*message, covered int) {
	batchMax := max(1, c.Subscription().BatchMax)
	var batch []item
	size, end := 0, 0 // body bytes of batch; index after its last record
	send := func(upto int) {
		m := newMessage(c, batch)
		m.upto = upto
		msgs = append(msgs, m)
		batch, size, covered = nil, 0, upto
	}
	for i, it := range items {
		switch {
		case !it.match:
			if len(batch) == 0 {
				covered = i + 1
			}
			continue
		case it.err != nil:
			if len(batch) > 0 {
				send(end)
			}
			msgs = append(msgs, &message{id: string(it.rec.Key), failed: it.err, upto: i + 1,
				events: []event{{id: string(it.rec.Key), envelope: it.rec.Value, orig: it.rec}}})
			covered = i + 1
			continue
		}
		n := max(len(it.part), len(it.rec.Value))
		if len(batch) > 0 && maxBytes > 0 && topics.BatchBodyBytes(size+n, len(batch)+1) > maxBytes {
			send(end)
		}
		batch, size, end = append(batch, it), size+n, i+1
		if len(batch) >= batchMax {
			send(end)
		}
	}
	if len(batch) > 0 && flush {
		send(len(items))
	}
	return msgs, covered
}
