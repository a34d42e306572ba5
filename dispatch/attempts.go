package dispatch

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// note writes a to the delivery-attempts topic, where the attempts API
// and the processor's ledger read it. The write does not hold up delivery:
// a failure is logged and counted, and Run flushes what is pending before
// it returns. Keyed by the event, it lands in the partition of the event's
// ingest and events records (the producers share the default
// partitioner).
func (d *Dispatcher) note(a topics.Attempt) {
	d.cluster.Client.Produce(context.Background(), a.Record(d.cluster.Names.DeliveryAttempts), func(r *kgo.Record, err error) {
		if err != nil {
			d.metrics.attemptWriteErrors.Inc()
			d.log.Warn("delivery attempt not recorded", "subscription", a.Subscription, "event_id", a.EventID, "attempt", a.N, "err", err)
		}
	})
}

// noteEach notes a for each event of m: a batch's attempt is an attempt of
// each of its events.
func (d *Dispatcher) noteEach(a topics.Attempt, m *message) {
	a.Resend = m.resend
	for _, e := range m.events {
		a.EventID = e.id
		d.note(a)
	}
}

// flushAttempts waits, a bounded time, for the attempts noted so far.
func (d *Dispatcher) flushAttempts() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.cluster.Client.Flush(ctx); err != nil {
		d.log.Warn("delivery attempts not all recorded at shutdown", "err", err)
	}
}
