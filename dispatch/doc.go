// Package dispatch takes the events of <prefix>.events to the
// destinations of the subscriptions that receive them, one sink per
// destination kind: webhooks (signed HTTP POSTs, Standard Webhooks, of one
// event or of a batch of one partition's events, through package
// webhook's client) and Kafka topics. It also emits the operational
// events of deliveries and circuits (operational.go).
//
// # Fan-out (fanout.go)
//
// A dispatcher's cost does not grow by a consumer group per subscription.
// Dispatchers share the events partitions in one group, <prefix>-dispatch,
// which commits nothing. The head reads each owned partition once and
// hands every record to the lane of each subscription at the head: the
// record is parsed once (subscriptions.Event, shared by every lane) and
// queued to each lane unjudged. A lane (one subscription on one partition)
// judges its queue on its own goroutine (judge.go: each subscription's
// compiled filter and transform judge each record once, within the
// subscription's share of a core), keeps what its subscription receives,
// plus the last record of each read so its cursor passes the others, and
// hands that to its sink.
//
// # Sinks (sink.go)
//
// A subscription's worker (its lanes on this dispatcher) chooses its sink
// once, as it starts, by the subscription's kind; the fan-out, the
// retries and the outcomes do not ask it. (Pull subscriptions have no
// worker: their consumers read and move their cursors.)
//
//   - The delivery sink (deliver.go), at least once, for every kind that
//     takes one message at a time and answers: events or batches,
//     ordered or not, the rate limit, the circuit breaker of each
//     subscription, retries on a schedule (in place when ordered, else
//     through the delivery-retry topic: retry.go), the delivery DLQ and
//     the attempts ledger (outcome.go: what becomes of each attempt). The
//     kinds differ only in their sender, which makes one attempt:
//     webhook.go, the signed POST; NATS JetStream and AMQP will be a
//     sender each.
//   - The topic sink (topic.go), exactly once: records written to the
//     subscription's Kafka topic in transactions that also move its
//     cursor.
//
// # Cursors
//
// Each subscription's cursor is the committed offset of <prefix>-sub-<id>,
// a group with no members: a lane's cursor moves only past records whose
// messages are done (delivered, handed to the retry topic or
// dead-lettered), and moved cursors are committed every second, on
// revocation and when a lane stops; a sink that moves them itself (the
// topic sink) commits them in its transactions instead. At least once
// holds: a partition lost is not committed, its new owner delivers again
// from the last commit. lag and replay --group sub:<id> read and write
// these offsets as before.
//
// Isolation: the head never waits, neither for a delivery nor for an
// expression: however long one subscription's filter takes, only its own
// cursor falls behind. A lane holding laneHigh records falls
// behind; so does a lane whose cursor is behind the head when it starts (a
// subscription re-enabled, replayed, new with --from earliest, or far
// behind when the partition is taken: the head starts at the furthest
// cursor but for those within headWindow records of it). Lanes behind read
// through the catch-up path: CatchUpReaders clients, each reading one
// fetch for one lane from its own offset per turn, the lanes taking turns
// in order (fair), a lane queued only while it holds fewer than laneLow
// records (bounded memory). A lane that reaches the head joins it.
//
// Subscriptions created, changed or deleted while running start or stop
// their lanes without a rebalance; a lane reads its cursor once the lanes
// of the version it replaces have committed theirs. A replay executed
// while dispatchers run (groups.Service.Replay) is handed to them as the
// subscription's Rewind in the subscriptions topic: each dispatcher moves
// the lanes of the partitions it owns to the rewind's offsets once and
// commits every cursor after with the rewind's tag as metadata, which is
// how the replay knows it applied and how a restart knows not to apply it
// again. Migration: the old dispatcher's per-subscription groups hold the
// same offsets, so a new dispatcher starts every subscription where the
// old one left it.
//
// It owns delivery; it does not own the subscriptions themselves (package
// subscriptions: the record, its validation, the registry and its topic,
// which this package watches and updates through the Registry), the HTTP
// exchange with a subscriber (package webhook), the events topic's
// content (the processor does), nor the admin API's HTTP surface.
package dispatch
