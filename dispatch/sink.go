// Sinks: what a lane hands its records to. Each kind of subscription a
// dispatcher serves has one, chosen once, when its worker starts
// (newSink); the engine (fanout.go, the dispatcher, the retries) asks no
// kind beyond this file, but to leave pull subscriptions, which their
// consumers read, alone.
//
//   - The delivery sink (deliver.go), at least once: messages of one
//     event or batches, ordered or not, retries, the circuit, the rate
//     limit, dead letters and the attempts ledger. The destinations it
//     serves differ only in how one attempt sends a message: a sender,
//     one file each (webhook.go: a signed HTTP POST).
//   - The topic sink (topic.go), exactly once: records written to a
//     Kafka topic in transactions that move the cursor.
//
// A new at-least-once kind is one file implementing sender, a case in
// senderFor, and its subscription's fields and validation (package
// subscriptions); a new exactly-once kind is a sink of its own, in one
// file, and a case in newSink.

package dispatch

import (
	"context"
	"time"

	"github.com/hookstream/hookstream/subscriptions"
)

// sink takes a worker's lanes' records to its subscription's
// destination.
type sink interface {
	// drain takes l's records, as its queue fills, to the destination
	// until ctx ends, moving l's cursor past each record once it is
	// done.
	drain(ctx context.Context, l *lane)
	// movesCursor reports whether the sink commits its lanes' cursors
	// itself, in the transactions that write their records: the lanes'
	// own commits (every commitEvery, on revocation, as a lane ends)
	// leave them alone.
	movesCursor() bool
}

// newSink returns the sink of w's subscription's kind.
func newSink(w *worker) sink {
	if w.sub.Kind() == subscriptions.KindTopic {
		return &topicSink{d: w.d, st: w.st, sub: w.sub, tw: w.d.topics}
	}
	return newDeliverySink(w.d, w.st, w.sub)
}

// sinkChanged reports whether a subscription changed from old to s needs
// its worker, and so its sink, started anew: another kind, or another
// topic (the topic sink writes the one it started with). A webhook's URL
// applies live.
func sinkChanged(old, s subscriptions.Subscription) bool {
	return old.Kind() != s.Kind() || old.Topic != s.Topic
}

// sender makes the attempts of one at-least-once destination kind: the
// one step in which those kinds differ. The delivery sink and the retry
// consumer do the rest alike for all of them.
type sender interface {
	// room waits, as long as ctx allows, until an attempt to sub's
	// destination may start, and returns what gives that place back:
	// send calls it once the attempt holds what it waits for, or the
	// caller when the attempt does not go; more than once is fine.
	room(ctx context.Context, sub subscriptions.Subscription) (release func(), err error)
	// send makes attempt n of m, rendered by c, to sub's destination,
	// a child span of ctx, and calls room as room says.
	send(ctx context.Context, sub subscriptions.Subscription, c *subscriptions.Compiled, m *message, n int, room func()) result
}

// senderFor returns the sender of sub's kind. Webhooks are the only
// at-least-once kind so far; NATS JetStream and AMQP add a case each.
func (d *Dispatcher) senderFor(subscriptions.Subscription) sender {
	return webhookSender{d}
}

// result is the outcome of one attempt, whatever the destination.
type result struct {
	// ok: the destination took the message (a webhook: a 2xx received
	// in full). The zero result is not ok.
	ok bool
	// status is the destination's answer, when it has numbers (HTTP's
	// for a webhook); 0 without an answer.
	status int
	// latency runs from sending the message to the end of the answer.
	latency time.Duration
	// err says why the attempt failed; nil when ok.
	err error
	// retryAfter is how long the destination asked to be left alone (a
	// webhook's Retry-After on 429 or 503); 0 when it did not.
	retryAfter time.Duration
	// gone: the destination asks to be disabled (a webhook's 410 Gone).
	gone bool
}
