// The delivery sink: at least once, for every destination kind that
// takes one message at a time and answers (webhooks; NATS JetStream and
// AMQP to come). It cuts each lane's records into messages of one event
// or batches, sends them through its kind's sender, ordered or with up
// to max_in_flight in flight, and takes each to a final state: delivered,
// handed to the retry topic, or dead-lettered (outcome.go). A lane's
// cursor moves past records only once the messages that carry them are
// done; its commits are the lanes' (fanout.go).

package dispatch

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/hookstream/hookstream/subscriptions"
)

// deliverySink is the at-least-once sink of one subscription.
type deliverySink struct {
	d    *Dispatcher
	st   *subState
	sub  subscriptions.Subscription // as its worker started
	send sender
	sem  chan struct{} // bounds concurrent deliveries (unordered), across the lanes
}

func newDeliverySink(d *Dispatcher, st *subState, sub subscriptions.Subscription) *deliverySink {
	return &deliverySink{d: d, st: st, sub: sub, send: d.senderFor(sub), sem: make(chan struct{}, max(1, sub.MaxInFlight))}
}

func (s *deliverySink) movesCursor() bool { return false }

// drain delivers a lane's queue until ctx ends, as messages of one event
// or batches. A partial batch waits up to batch_wait for more events
// (measured from when the batches before it were sent); the cursor moves
// past records only once the messages that carry them are done.
func (s *deliverySink) drain(ctx context.Context, l *lane) {
	var pending []item  // read and judged, not yet done
	var since time.Time // when the partial batch at the end of pending began to wait
	wait := time.Duration(s.sub.BatchWait)
	maxBytes := s.d.maxBodyBytes()
	for {
		pending = append(pending, l.takeQueue(ctx, len(pending))...)
		if len(pending) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-l.wake:
				continue
			}
		}
		// A partial batch waits no longer than batch_wait, nor while the
		// records behind it pile up past the lane's bound (a filter that
		// takes few of them): pending stays bounded as the queue is.
		flush := wait <= 0 || len(pending) >= laneHigh || !since.IsZero() && time.Since(since) >= wait
		msgs, covered := cut(s.st.compiled(), pending, maxBytes, flush)
		if covered == 0 {
			if since.IsZero() {
				since = time.Now()
			}
			t := time.NewTimer(time.Until(since.Add(wait)))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-l.wake:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		for len(msgs) > 0 {
			n := min(len(msgs), max(1, s.sub.MaxInFlight))
			if s.sub.Ordered {
				n = 1
			}
			if !s.deliverChunk(ctx, msgs[:n]) {
				return // stopping: the cursor stays before the message
			}
			l.advance(pending[msgs[n-1].upto-1].rec, len(pending)-msgs[n-1].upto)
			msgs = msgs[n:]
		}
		l.advance(pending[covered-1].rec, len(pending)-covered) // filtered records after the last message
		pending = slices.Delete(pending, 0, covered)
		since = time.Time{}
		if len(pending) > 0 {
			since = time.Now()
		}
	}
}

// deliverChunk delivers messages concurrently (one, when ordered) and
// reports whether every one reached a final state for this consumer.
func (s *deliverySink) deliverChunk(ctx context.Context, msgs []*message) bool {
	if len(msgs) == 1 {
		return s.deliver(ctx, msgs[0], func() {})
	}
	var wg sync.WaitGroup
	ok := make([]bool, len(msgs))
	for i, m := range msgs {
		select {
		case s.sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return false
		}
		// The lane, not a parked attempt, waits while the destination
		// is busy.
		room, err := s.send.room(ctx, s.sub)
		if err != nil {
			<-s.sem
			wg.Wait()
			return false
		}
		wg.Go(func() {
			defer func() { <-s.sem }()
			ok[i] = s.deliver(ctx, m, room)
		})
	}
	wg.Wait()
	for _, v := range ok {
		if !v {
			return false
		}
	}
	return true
}

// deliver takes a message to a final state: delivered, handed to the
// retry topic, or (ordered) retried in place and finally dead-lettered;
// one whose transform failed is dead-lettered with no attempt. It returns
// false only when ctx ended first. room is the first attempt's place in
// its destination's queue (sender.room), given back once that attempt
// went or did not.
func (s *deliverySink) deliver(ctx context.Context, m *message, room func()) bool {
	subID := s.sub.ID
	if m.failed != nil {
		room()
		return s.d.handOff(ctx, subID, m, func(ctx context.Context) error {
			return s.d.deadLetter(ctx, subID, m, 0, result{})
		})
	}
	for attempt := 1; ; {
		res, refusedUntil := s.d.attempt(ctx, s.st, m, attempt, room)
		room()
		if ctx.Err() != nil {
			return false
		}
		if !refusedUntil.IsZero() {
			// Not an attempt: wait for the probe, then ask again.
			if !s.st.circuit.wait(ctx, refusedUntil) {
				return false
			}
			continue
		}
		if res.ok {
			return true
		}
		if !s.sub.Ordered {
			return s.d.handOff(ctx, subID, m, func(ctx context.Context) error {
				return s.d.fail(ctx, subID, s.d.schedule(s.st.current()), m, attempt, res)
			})
		}
		wait, more := delay(s.d.schedule(s.st.current()), attempt, res.retryAfter)
		if !more || res.gone {
			return s.d.handOff(ctx, subID, m, func(ctx context.Context) error {
				return s.d.deadLetter(ctx, subID, m, attempt, res)
			})
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		attempt++
	}
}
