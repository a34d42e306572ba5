package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/webhook"
)

// bulk writes n events to one partition of the events topic and returns
// their ids.
func (h *harness) bulk(t *testing.T, partition int32, n int) []string {
	t.Helper()
	cl := h.env.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ids := make([]string, 0, n)
	var wg sync.WaitGroup
	for range n {
		h.seq++
		id := "bulk:" + strconv.Itoa(h.seq)
		ids = append(ids, id)
		e := &topics.Envelope{ID: id, Source: "bulk", EventID: strconv.Itoa(h.seq), Type: "e",
			ReceivedAt: time.Now().UTC(), ProcessedAt: time.Now().UTC(), Data: []byte(`{}`)}
		v, err := e.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		cl.Produce(context.Background(), &kgo.Record{Topic: string(h.env.Names.Events), Partition: partition, Key: []byte(id), Value: v},
			func(_ *kgo.Record, err error) {
				defer wg.Done()
				if err != nil {
					t.Errorf("produce: %v", err)
				}
			})
	}
	wg.Wait()
	return ids
}

// assignment returns the partitions of topic each member of group holds,
// by member id.
func (h *harness) assignment(t *testing.T, group topics.Group, topic topics.Topic) map[string][]int32 {
	t.Helper()
	groups, err := kadm.NewClient(h.cl).DescribeGroups(context.Background(), string(group))
	if err != nil {
		t.Fatalf("describe %s: %v", group, err)
	}
	out := make(map[string][]int32)
	for _, m := range groups[string(group)].Members {
		c, _ := m.Assigned.AsConsumer()
		out[m.MemberID] = nil
		for _, tp := range c.Topics {
			if tp.Topic == string(topic) {
				parts := append([]int32(nil), tp.Partitions...)
				sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
				out[m.MemberID] = parts
			}
		}
	}
	return out
}

// sole waits until one member of group holds all n partitions of topic
// and returns its id.
func (h *harness) sole(t *testing.T, group topics.Group, topic topics.Topic, n int) string {
	t.Helper()
	var id string
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		a := h.assignment(t, group, topic)
		for m, parts := range a {
			if len(a) == 1 && len(parts) == n {
				id = m
				return nil
			}
		}
		return fmt.Errorf("assignment %v, want one member with %d partitions", a, n)
	})
	return id
}

// shared waits until two members of group each hold one partition of
// topic and returns the partition of member.
func (h *harness) shared(t *testing.T, group topics.Group, topic topics.Topic, member string) int32 {
	t.Helper()
	var p int32
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		a := h.assignment(t, group, topic)
		if len(a) != 2 || len(a[member]) != 1 {
			return fmt.Errorf("assignment %v, want one partition each", a)
		}
		for _, parts := range a {
			if len(parts) != 1 {
				return fmt.Errorf("assignment %v, want one partition each", a)
			}
		}
		p = a[member][0]
		return nil
	})
	return p
}

// gate is a subscriber that holds every request until opened.
type gate struct {
	open chan struct{}
	once sync.Once
}

func newGate(t *testing.T) *gate {
	g := &gate{open: make(chan struct{})}
	t.Cleanup(g.release)
	return g
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

func (g *gate) respond(string, int) int {
	<-g.open
	return http.StatusOK
}

// TestPausedPartitionResumesAfterRebalance: a slow subscriber fills its
// lanes until they fall behind the head; a second dispatcher joins and
// leaves, moving partitions away and back; every event is still
// delivered once the subscriber speeds up.
func TestPausedPartitionResumesAfterRebalance(t *testing.T) {
	h := newHarnessOn(t, kafkatest.New(t, 2, 1<<20), dispatch.Config{Client: webhook.Config{AllowPrivate: true}})
	slow := newGate(t)
	sink := newSubscriber(t, slow.respond)
	// Over the queue's high mark in each partition: both pause.
	ids := append(h.bulk(t, 0, 2500), h.bulk(t, 1, 2500)...)
	sub := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL})
	_ = sub
	group := h.env.Names.DispatchGroup()
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if got := sink.received(); !(got["bulk:1"] > 0 && got["bulk:2501"] > 0) {
			return fmt.Errorf("deliveries of both partitions not started: %d ids", len(got))
		}
		return nil
	})
	first := h.sole(t, group, h.env.Names.Events, 2)
	stop := h.another(t)
	h.shared(t, group, h.env.Names.Events, first)
	stop()
	h.sole(t, group, h.env.Names.Events, 2)
	slow.release()
	sink.waitFor(t, ids, 60*time.Second)
}

// retryRecords writes n retry records of subscription sub, due at due, to
// one partition of the retry topic, as a dispatcher hands failures over,
// and returns their event ids.
func (h *harness) retryRecords(t *testing.T, sub string, partition int32, n int, due time.Time) []string {
	t.Helper()
	cl := h.env.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var ids []string
	for range n {
		h.seq++
		id := "retry:" + strconv.Itoa(h.seq)
		ids = append(ids, id)
		e := &topics.Envelope{ID: id, Source: "retry", EventID: strconv.Itoa(h.seq), Type: "e",
			ReceivedAt: time.Now().UTC(), ProcessedAt: time.Now().UTC(), Data: []byte(`{}`)}
		v, err := e.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		rec := &kgo.Record{Topic: string(h.env.Names.DeliveryRetry), Partition: partition, Key: []byte(sub + ":" + id), Value: v,
			Headers: []kgo.RecordHeader{
				{Key: topics.HeaderSubscription, Value: []byte(sub)},
				{Key: topics.HeaderEventID, Value: []byte(id)},
				{Key: topics.HeaderAttempts, Value: []byte("1")},
				{Key: topics.HeaderDueAt, Value: []byte(due.UTC().Format(topics.TimeFormat))},
				{Key: topics.HeaderLastStatus, Value: []byte("503")},
			}}
		if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// gauge reads a gauge of the first dispatcher instance.
func (h *harness) gauge(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := h.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

// TestRetriesResumeAfterRevokeWhilePaused: the retry consumer holds
// MaxPendingRetries and pauses; the partition holding them moves to a
// second dispatcher and back; every retry still happens.
func TestRetriesResumeAfterRevokeWhilePaused(t *testing.T) {
	h := newHarnessOn(t, kafkatest.New(t, 2, 1<<20), dispatch.Config{Client: webhook.Config{AllowPrivate: true}, MaxPendingRetries: 4})
	sink := newSubscriber(t, nil)
	sub := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL})
	group := h.env.Names.RetryGroup()
	first := h.sole(t, group, h.env.Names.DeliveryRetry, 2)
	// Due once partitions have moved away and back.
	due := time.Now().Add(3 * time.Second)
	var ids []string
	for moved := false; !moved; {
		ids = append(ids, h.retryRecords(t, sub.ID, 1, 6, due)...)
		kafkatest.WaitFor(t, 10*time.Second, func() error {
			if n := h.gauge(t, "hookstream_delivery_retries_pending"); n < 4 {
				return fmt.Errorf("%v retries pending, want the limit", n)
			}
			return nil
		})
		stop := h.another(t)
		moved = h.shared(t, group, h.env.Names.DeliveryRetry, first) == 0
		stop()
		first = h.sole(t, group, h.env.Names.DeliveryRetry, 2)
	}
	if time.Now().After(due) {
		t.Fatalf("partitions moved after the retries were due: the test proves nothing; make them due later")
	}
	sink.waitFor(t, ids, 30*time.Second)
}

// TestDueRetryWaitsForRegistry: with many subscription records to read at
// start, a due retry is delivered, not taken for a deleted subscription's.
func TestDueRetryWaitsForRegistry(t *testing.T) {
	h := newHarnessOn(t, kafkatest.New(t, 1, 1<<20), dispatch.Config{Client: webhook.Config{AllowPrivate: true}})
	h.stop()
	cl := h.env.Client(t)
	var wg sync.WaitGroup
	for i := range 3000 {
		s := subscriptions.Subscription{ID: fmt.Sprintf("filler-%d", i), URL: "https://example.com/hook", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
			MaxInFlight: 1, Description: strings.Repeat("x", 200)}
		v, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		cl.Produce(context.Background(), &kgo.Record{Topic: string(h.env.Names.Subscriptions), Key: []byte(s.ID), Value: v}, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				t.Errorf("produce: %v", err)
			}
		})
	}
	wg.Wait()
	sink := newSubscriber(t, nil)
	sub := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL})
	ids := h.retryRecords(t, sub.ID, 0, 3, time.Now())
	h.start(t)
	sink.waitFor(t, ids, 30*time.Second)
}

// TestRevokedRetriesNotRepeated: retries under way for a slow subscriber
// when their partition moves to a second dispatcher are finished and
// committed by the first before the second reads them, and the first
// starts none it lost: each is delivered once.
func TestRevokedRetriesNotRepeated(t *testing.T) {
	h := newHarnessOn(t, kafkatest.New(t, 2, 1<<20), dispatch.Config{Client: webhook.Config{AllowPrivate: true}})
	sink := newSubscriber(t, func(string, int) int {
		time.Sleep(300 * time.Millisecond) // a slow subscriber
		return http.StatusOK
	})
	sub := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL})
	group := h.env.Names.RetryGroup()
	first := h.sole(t, group, h.env.Names.DeliveryRetry, 2)
	const n, inFlight = 150, 64 // inFlight: the retry consumer's concurrency
	ids := h.retryRecords(t, sub.ID, 1, n, time.Now())
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if got := len(sink.received()); got < inFlight {
			return fmt.Errorf("%d retries started", got)
		}
		return nil
	})
	h.another(t)
	if p := h.shared(t, group, h.env.Names.DeliveryRetry, first); p != 0 {
		t.Fatalf("the first dispatcher kept partition %d; this test needs it to lose partition 1", p)
	}
	sink.waitFor(t, ids, 30*time.Second)
	// Give a dispatcher that goes on with what it lost the time to: what
	// must not happen has no event to wait for.
	time.Sleep(time.Second)
	for id, c := range sink.received() {
		if c != 1 {
			t.Errorf("%s delivered %d times, want once", id, c)
		}
	}
}

// TestFarRetriesDoNotHoldUpNearOnes: retries due later than the horizon
// do not take the in-memory budget: a subscription's retries due now are
// delivered at once behind many of another's due later, and those are
// delivered when they come due.
func TestFarRetriesDoNotHoldUpNearOnes(t *testing.T) {
	h := newHarnessOn(t, kafkatest.New(t, 1, 1<<20), dispatch.Config{Client: webhook.Config{AllowPrivate: true},
		MaxPendingRetries: 10, RetryHorizon: time.Second})
	far, near := newSubscriber(t, nil), newSubscriber(t, nil)
	farSub := h.subscribe(t, subscriptions.Subscription{URL: far.srv.URL})
	nearSub := h.subscribe(t, subscriptions.Subscription{URL: near.srv.URL})
	farDue := time.Now().Add(5 * time.Second)
	farIDs := h.retryRecords(t, farSub.ID, 0, 40, farDue)
	nearIDs := h.retryRecords(t, nearSub.ID, 0, 3, time.Now())
	near.waitFor(t, nearIDs, time.Until(farDue)-time.Second)
	if got := len(far.received()); got != 0 {
		t.Errorf("%d retries delivered before they were due", got)
	}
	far.waitFor(t, farIDs, 30*time.Second)
	for id, c := range far.received() {
		if c != 1 {
			t.Errorf("%s delivered %d times, want once", id, c)
		}
	}
}

// TestDeletedSubscriptionReleasesRetries: the retries a disabled
// subscription keeps waiting are dropped once it is deleted, and the
// retry consumer's committed offsets move past them.
func TestDeletedSubscriptionReleasesRetries(t *testing.T) {
	h := newHarnessOn(t, kafkatest.New(t, 1, 1<<20), dispatch.Config{Client: webhook.Config{AllowPrivate: true}})
	sink := newSubscriber(t, nil)
	sub := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL})
	if _, err := h.registry.Update(context.Background(), sub.ID, func(s *subscriptions.Subscription) error {
		s.Enabled = false
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	h.retryRecords(t, sub.ID, 0, 3, time.Now())
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		if n := h.gauge(t, "hookstream_delivery_retries_pending"); n != 3 {
			return fmt.Errorf("%v retries pending, want the 3 waiting for enable", n)
		}
		return nil
	})
	if err := h.registry.Delete(context.Background(), sub.ID); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(h.cl)
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		committed, err := adm.FetchOffsets(context.Background(), string(h.env.Names.RetryGroup()))
		if err != nil {
			return err
		}
		o, _ := committed.Lookup(string(h.env.Names.DeliveryRetry), 0)
		if o.At != 3 {
			return fmt.Errorf("retry group committed offset %d, want 3", o.At)
		}
		return nil
	})
	if n := len(sink.received()); n != 0 {
		t.Errorf("deleted subscription got %d deliveries", n)
	}
}
