package dispatch

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/backoff"
	"github.com/hookstream/hookstream/topics"
)

// Operational events reach <prefix>.events through the ingest topic and
// the processor, like any event. Each is keyed by a deterministic id made
// of the facts that identify its occurrence, so whatever writes one twice
// (a retried hand-off, a restarted dispatcher) writes the same key and the
// processor's deduplication keeps one. subscription.disabled and
// subscription.enabled are written by the subscriptions registry, in its
// transaction with the change itself.

// notify writes an operational event, trying again while Kafka refuses,
// until ctx ends.
func (d *Dispatcher) notify(ctx context.Context, ir *topics.IngestRecord) error {
	rec := ir.Record(d.cluster.Names.Ingest)
	wait := backoff.New(100*time.Millisecond, 10*time.Second)
	for {
		err := d.cluster.Client.ProduceSync(ctx, rec).FirstErr()
		if err == nil {
			return nil
		}
		d.log.Error("could not write an operational event; retrying", "event_id", ir.EventID, "err", err)
		if !wait.Wait(ctx) {
			return err
		}
	}
}

// deadLettered writes the delivery.dead_lettered event of letter, the dead
// letter as written (nil: given up). Its id includes the letter's place in
// the delivery DLQ, so each dead-lettering has its own, though a redrive or
// a replay of the subscription dead-letters the same event after as many
// attempts again, while notify's retries write the same id. A letter has
// at most one event: a dispatcher that stops after the letter, before its
// offsets are committed, tries the delivery anew after the restart, and a
// second letter follows with its own event (the letter it wrote first may
// then have none).
// Dead letters of operational events say nothing: a notification
// subscription that fails would otherwise feed itself.
func (d *Dispatcher) deadLettered(ctx context.Context, subID, eventID string, attempts int, last result, cause string, letter *kgo.Record) error {
	if strings.HasPrefix(eventID, topics.OperationalSource+":") {
		return nil
	}
	o := &topics.Operational{Type: topics.OpDeliveryDeadLettered, SubscriptionID: subID, Event: eventID,
		Attempts: attempts, LastStatus: last.status, Error: cause, At: d.now().UTC()}
	facts := []string{subID, eventID, strconv.Itoa(attempts)}
	if letter != nil {
		facts = append(facts, strconv.Itoa(int(letter.Partition)), strconv.FormatInt(letter.Offset, 10))
	}
	return d.notify(ctx, o.IngestRecord(facts...))
}

// circuitChanged writes the circuit.opened or circuit.closed event of a
// subscription whose circuit in this dispatcher instance just changed;
// last is the attempt that changed it. The delivery that changed it waits
// for the write: circuits change at most once a cooldown, and an event
// queued in memory could be lost.
func (d *Dispatcher) circuitChanged(ctx context.Context, subID string, opened bool, last result) {
	o := &topics.Operational{Type: topics.OpCircuitClosed, SubscriptionID: subID, At: d.now().UTC()}
	if opened {
		o.Type, o.LastStatus = topics.OpCircuitOpened, last.status
		if last.err != nil {
			o.Error = errorText(last.err)
		}
	}
	ir := o.IngestRecord(subID, o.At.Format(time.RFC3339Nano))
	if err := d.notify(ctx, ir); err != nil && ctx.Err() == nil {
		d.log.Warn("operational event not written", "event_id", ir.EventID, "err", err)
	}
}
