package dispatch_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/webhook"
)

// enableParked enables subscription id, whose retry of event parked
// waited, and checks that sink gets it once and the retry group's lag
// returns to 0.
func (h *harness) enableParked(t *testing.T, id string, sink *subscriber, parked string) {
	t.Helper()
	h.setEnabled(t, id, true)
	sink.waitFor(t, []string{parked}, 30*time.Second)
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if committed, end := h.retryOffsets(t); committed != end {
			return fmt.Errorf("retry group committed offset %d of %d, want lag 0", committed, end)
		}
		return nil
	})
	if n := sink.received()[parked]; n != 1 {
		t.Errorf("parked retry delivered %d times, want once", n)
	}
}

// retryOffsets returns the retry group's committed offset of partition 0
// of the retry topic (-1 before its first commit) and the partition's end.
func (h *harness) retryOffsets(t *testing.T) (committed, end int64) {
	t.Helper()
	adm := kadm.NewClient(h.cl)
	topic := string(h.env.Names.DeliveryRetry)
	fetched, err := adm.FetchOffsets(context.Background(), string(h.env.Names.RetryGroup()))
	if err == nil {
		err = fetched.Error()
	}
	if err != nil {
		t.Fatalf("retry group offsets: %v", err)
	}
	committed = -1
	if o, ok := fetched.Lookup(topic, 0); ok {
		committed = o.At
	}
	ends, err := adm.ListEndOffsets(context.Background(), topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	o, _ := ends.Lookup(topic, 0)
	return committed, o.Offset
}

// setEnabled enables or disables a subscription as the dispatcher does
// (a disabled one with a reason) and waits until the dispatcher follows.
func (h *harness) setEnabled(t *testing.T, id string, enabled bool) {
	t.Helper()
	if _, err := h.registry.Update(context.Background(), id, func(s *subscriptions.Subscription) error {
		s.Enabled, s.DisabledReason = enabled, ""
		if !enabled {
			s.DisabledReason = "subscriber answered 410 Gone"
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := 1.0
	if enabled {
		want = 0
	}
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		if n := h.gauge(t, "hookstream_delivery_disabled_subscriptions"); n != want {
			return fmt.Errorf("%v subscriptions disabled, want %v", n, want)
		}
		return nil
	})
}

// retriesOf returns the records of the retry topic that are retries of
// subscription sub, in order.
func (h *harness) retriesOf(t *testing.T, sub string) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	for _, rec := range h.env.Records(t, h.env.Names.DeliveryRetry) {
		if s, _, _ := topics.SplitRetryKey(string(rec.Key), ""); s == sub {
			out = append(out, rec)
		}
	}
	return out
}

// TestParkedRetryDoesNotPinRetryOffsets: a disabled subscription's retry
// waits for enable while another subscription's retries finish after it.
// Each time RetryReappendAfter of them sit after it, it is written again,
// unchanged, at the end of the retry topic, and the retry group commits
// past it; a restart delivers the finished retries no more than that many
// times again; after enable the waiting retry is delivered once, and the
// retry group's lag is 0.
func TestParkedRetryDoesNotPinRetryOffsets(t *testing.T) {
	const after = 20
	h := newHarnessOn(t, kafkatest.New(t, 1, 1<<20), dispatch.Config{Client: webhook.Config{AllowPrivate: true},
		RetryReappendAfter: after})
	parkedSink, otherSink := newSubscriber(t, nil), newSubscriber(t, nil)
	parkedSub := h.subscribe(t, subscriptions.Subscription{URL: parkedSink.srv.URL})
	other := h.subscribe(t, subscriptions.Subscription{URL: otherSink.srv.URL})
	h.setEnabled(t, parkedSub.ID, false)
	parked := h.retryRecords(t, parkedSub.ID, 0, 1, time.Now())

	var ids []string
	pin := int64(0) // the parked retry's offset, then its latest copy's
	for wave := 1; wave <= 3; wave++ {
		ids = append(ids, h.retryRecords(t, other.ID, 0, 2*after, time.Now())...)
		otherSink.waitFor(t, ids, 30*time.Second)
		// Settled: every retry but the parked one's latest copy, the last
		// record, is finished and committed past.
		kafkatest.WaitFor(t, 30*time.Second, func() error {
			committed, end := h.retryOffsets(t)
			if committed <= pin || committed != end-1 {
				return fmt.Errorf("wave %d: retry group committed offset %d of %d, held at the parked retry's %d", wave, committed, end, pin)
			}
			if copies := len(h.retriesOf(t, parkedSub.ID)) - 1; copies != wave {
				return fmt.Errorf("wave %d: %d copies of the parked retry, want %d", wave, copies, wave)
			}
			pin = committed
			return nil
		})
	}

	before := otherSink.received()
	h.stop()
	h.start(t)
	last := h.retryRecords(t, other.ID, 0, 1, time.Now())
	otherSink.waitFor(t, last, 30*time.Second)
	again := 0
	for id, n := range otherSink.received() {
		again += n - max(before[id], 1)
	}
	if again > after {
		t.Errorf("after a restart the other subscription got %d retries again, want at most %d", again, after)
	}

	h.enableParked(t, parkedSub.ID, parkedSink, parked[0])
	recs := h.retriesOf(t, parkedSub.ID)
	for _, rec := range recs[1:] {
		if !bytes.Equal(rec.Key, recs[0].Key) || !bytes.Equal(rec.Value, recs[0].Value) ||
			!maps.Equal(kafkatest.Headers(rec), kafkatest.Headers(recs[0])) {
			t.Errorf("copy at offset %d: key %s headers %v, want the retry at offset %d unchanged: key %s headers %v",
				rec.Offset, rec.Key, kafkatest.Headers(rec), recs[0].Offset, recs[0].Key, kafkatest.Headers(recs[0]))
		}
	}
}

// TestFarRetryReappendedFiresWhenDue: a retry due beyond the horizon with
// RetryReappendAfter finished retries after it is written again at the end
// of the retry topic, so the retry group commits past it, and still fires
// at its due time, once.
func TestFarRetryReappendedFiresWhenDue(t *testing.T) {
	const after = 20
	h := newHarnessOn(t, kafkatest.New(t, 1, 1<<20), dispatch.Config{Client: webhook.Config{AllowPrivate: true},
		RetryHorizon: time.Second, RetryReappendAfter: after})
	var mu sync.Mutex
	var firedAt time.Time
	farSink := newSubscriber(t, func(string, int) int {
		mu.Lock()
		defer mu.Unlock()
		if firedAt.IsZero() {
			firedAt = time.Now()
		}
		return http.StatusOK
	})
	otherSink := newSubscriber(t, nil)
	farSub := h.subscribe(t, subscriptions.Subscription{URL: farSink.srv.URL})
	other := h.subscribe(t, subscriptions.Subscription{URL: otherSink.srv.URL})
	due := time.Now().Add(15 * time.Second)
	far := h.retryRecords(t, farSub.ID, 0, 1, due)
	otherSink.waitFor(t, h.retryRecords(t, other.ID, 0, 2*after, time.Now()), time.Until(due))
	kafkatest.WaitFor(t, time.Until(due), func() error {
		if committed, end := h.retryOffsets(t); committed <= 0 || committed != end-1 {
			return fmt.Errorf("retry group committed offset %d of %d, held at the far retry's 0", committed, end)
		}
		return nil
	})
	farSink.waitFor(t, far, 30*time.Second)
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if committed, end := h.retryOffsets(t); committed != end {
			return fmt.Errorf("retry group committed offset %d of %d, want lag 0", committed, end)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if firedAt.Before(due) {
		t.Errorf("far retry fired at %v, %v before its due time", firedAt, due.Sub(firedAt))
	}
	if n := farSink.received()[far[0]]; n != 1 {
		t.Errorf("far retry delivered %d times, want once", n)
	}
}

// TestParkedRetryReappendedAfterFailedWrite: the broker refuses the first
// write of the parked retry's copy; the retry keeps holding the committed
// offset, is written again later, once, and is delivered after enable.
func TestParkedRetryReappendedAfterFailedWrite(t *testing.T) {
	const after = 20
	env := kafkatest.New(t, 1, 1<<20)
	if env.Cluster == nil {
		t.Skip("injects a broker error into the in-process broker")
	}
	h := newHarnessOn(t, env, dispatch.Config{Client: webhook.Config{AllowPrivate: true},
		RetryHorizon: time.Second, RetryReappendAfter: after})
	held := newGate(t) // no retry finishes before the refusal is set up
	parkedSink, otherSink := newSubscriber(t, nil), newSubscriber(t, held.respond)
	parkedSub := h.subscribe(t, subscriptions.Subscription{URL: parkedSink.srv.URL})
	other := h.subscribe(t, subscriptions.Subscription{URL: otherSink.srv.URL})
	h.setEnabled(t, parkedSub.ID, false)
	parked := h.retryRecords(t, parkedSub.ID, 0, 1, time.Now())
	ids := h.retryRecords(t, other.ID, 0, 2*after, time.Now())

	topic := string(env.Names.DeliveryRetry)
	details, err := env.Admin(t).ListTopics(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	topicID := details[topic].ID
	var refused atomic.Int32
	env.Cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		pr := req.(*kmsg.ProduceRequest)
		if len(pr.Topics) != 1 || (pr.Topics[0].Topic != topic && pr.Topics[0].TopicID != topicID) {
			return nil, nil, false // kept: only the handled request drops it
		}
		refused.Add(1)
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = pr.Topics[0].Topic, pr.Topics[0].TopicID
		for _, p := range pr.Topics[0].Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.BaseOffset = p.Partition, kerr.InvalidRecord.Code, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
	held.release()
	otherSink.waitFor(t, ids, 30*time.Second)
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		committed, end := h.retryOffsets(t)
		if committed <= 0 || committed != end-1 {
			return fmt.Errorf("retry group committed offset %d of %d, held at the parked retry's 0 (%d writes refused)", committed, end, refused.Load())
		}
		return nil
	})
	if n := refused.Load(); n != 1 {
		t.Errorf("%d writes refused, want the first copy's", n)
	}
	if copies := len(h.retriesOf(t, parkedSub.ID)) - 1; copies != 1 {
		t.Errorf("%d copies of the parked retry, want 1", copies)
	}
	h.enableParked(t, parkedSub.ID, parkedSink, parked[0])
}

// TestSpilledRetriesBounded: retries due beyond the horizon are spilled
// up to MaxSpilledRetries; past it their partition's reading stops at the
// next one, while another partition's retries go on. As the spilled ones
// come due there is room again, the partition is read on, and every retry
// is delivered once.
func TestSpilledRetriesBounded(t *testing.T) {
	const bound, n = 5, 40
	h := newHarnessOn(t, kafkatest.New(t, 2, 1<<20), dispatch.Config{Client: webhook.Config{AllowPrivate: true},
		RetryHorizon: time.Second, MaxSpilledRetries: bound})
	farSink, nearSink := newSubscriber(t, nil), newSubscriber(t, nil)
	farSub := h.subscribe(t, subscriptions.Subscription{URL: farSink.srv.URL})
	nearSub := h.subscribe(t, subscriptions.Subscription{URL: nearSink.srv.URL})
	far := h.retryRecords(t, farSub.ID, 0, n, time.Now().Add(6*time.Second))
	near := h.retryRecords(t, nearSub.ID, 1, 1, time.Now())
	peak := 0.0
	wait := func(sink *subscriber, ids []string) {
		kafkatest.WaitFor(t, 60*time.Second, func() error {
			peak = max(peak, h.gauge(t, "hookstream_delivery_retries_spilled"))
			got := sink.received()
			for _, id := range ids {
				if got[id] == 0 {
					return fmt.Errorf("%s not delivered", id)
				}
			}
			return nil
		})
	}
	wait(nearSink, near)
	wait(farSink, far)
	if peak > bound {
		t.Errorf("spilled retries: %v at most, want at most %d", peak, bound)
	}
	for _, id := range far {
		if c := farSink.received()[id]; c != 1 {
			t.Errorf("far retry %s delivered %d times, want once", id, c)
		}
	}
}

// TestParkedRetriesBounded: a disabled subscription's retries are spilled
// up to MaxSpilledRetries and the others kept among the retries held in
// memory; after enable each is delivered once.
func TestParkedRetriesBounded(t *testing.T) {
	const bound, n = 5, 20
	h := newHarnessOn(t, kafkatest.New(t, 1, 1<<20), dispatch.Config{Client: webhook.Config{AllowPrivate: true},
		RetryHorizon: time.Second, MaxSpilledRetries: bound})
	parkedSink, otherSink := newSubscriber(t, nil), newSubscriber(t, nil)
	parkedSub := h.subscribe(t, subscriptions.Subscription{URL: parkedSink.srv.URL})
	other := h.subscribe(t, subscriptions.Subscription{URL: otherSink.srv.URL})
	h.setEnabled(t, parkedSub.ID, false)
	parked := h.retryRecords(t, parkedSub.ID, 0, n, time.Now())
	// Read after the parked ones: they were all read, and parked, before.
	after := h.retryRecords(t, other.ID, 0, 1, time.Now())
	peak := 0.0
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		peak = max(peak, h.gauge(t, "hookstream_delivery_retries_spilled"))
		if otherSink.received()[after[0]] == 0 {
			return fmt.Errorf("%s not delivered", after[0])
		}
		return nil
	})
	if peak > bound {
		t.Errorf("spilled retries: %v at most, want at most %d", peak, bound)
	}
	h.setEnabled(t, parkedSub.ID, true)
	parkedSink.waitFor(t, parked, 30*time.Second)
	for _, id := range parked {
		if c := parkedSink.received()[id]; c != 1 {
			t.Errorf("parked retry %s delivered %d times, want once", id, c)
		}
	}
}
