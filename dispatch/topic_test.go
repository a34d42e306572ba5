package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// topicSub creates a topic subscription to the orders of source shop.
func (h *harness) topicSub(t *testing.T, name string) subscriptions.Subscription {
	t.Helper()
	return h.subscribe(t, subscriptions.Subscription{Topic: h.env.Names.Prefix + "-" + name, Sources: []string{"shop"}, Filter: `type == "order"`})
}

// exactlyOnce waits until sub's cursor has passed every events record,
// then checks that its topic holds each of want exactly once, read
// committed, and nothing else, each record as the events record was, and
// each with one delivered attempt in the attempts topic.
func (h *harness) exactlyOnce(t *testing.T, sub subscriptions.Subscription, want []string) {
	t.Helper()
	h.env.WaitCommitted(t, h.env.Names.SubscriptionGroup(sub.ID), h.env.Names.Events)
	events := make(map[string]*kgo.Record)
	for _, r := range h.env.Records(t, h.env.Names.Events) {
		events[string(r.Key)] = r
	}
	count := make(map[string]int)
	for _, r := range h.env.Records(t, topics.Topic(sub.Topic)) {
		key := string(r.Key)
		count[key]++
		e := events[key]
		switch {
		case e == nil:
			t.Errorf("%s holds %s, which is no event", sub.Topic, key)
		case string(r.Value) != string(e.Value):
			t.Errorf("%s: %s: got value %s, want the envelope %s", sub.Topic, key, r.Value, e.Value)
		}
		hs := kafkatest.Headers(r)
		if hs[topics.HeaderSource] != "shop" || hs[topics.HeaderEventType] != "order" || !strings.HasSuffix(key, ":"+hs[topics.HeaderEventID]) {
			t.Errorf("%s: %s: got headers %v, want hs-source, hs-event-type and hs-event-id of the event", sub.Topic, key, hs)
		}
	}
	for _, id := range want {
		if count[id] != 1 {
			t.Errorf("%s holds %s %d times, want once", sub.Topic, id, count[id])
		}
		delete(count, id)
	}
	if len(count) > 0 {
		t.Errorf("%s holds events its filter refuses: %v", sub.Topic, count)
	}
	// The ledger: each write is one delivered attempt, committed with it.
	attempts := h.attemptsOf(t, sub.ID)
	for _, id := range want {
		if as := attempts[id]; len(as) != 1 || as[0].Outcome != topics.OutcomeDelivered {
			t.Errorf("attempts of %s for %s: got %d, want one delivered", id, sub.ID, len(as))
		}
	}
}

// TestTopicSubscriptionExactlyOnce: a topic subscription with a filter
// holds every matching event once, read committed, through a dispatcher
// killed with -9 mid-transaction and restarted, and through rebalances of
// the dispatch group as a third dispatcher joins and leaves.
func TestTopicSubscriptionExactlyOnce(t *testing.T) {
	h := newHarness(t, true)
	h.stop()
	sub := h.topicSub(t, "orders")
	group := h.env.Names.DispatchGroup()
	members := func(n int) {
		kafkatest.WaitFor(t, 60*time.Second, func() error {
			if m := h.members(t, group); len(m) != n {
				return fmt.Errorf("members %v, want %d", m, n)
			}
			return nil
		})
	}
	var want []string
	send := func(n int) {
		for range n {
			want = append(want, h.event(t, "shop", "order"))
			h.event(t, "shop", "refund")
			h.event(t, "other", "order")
		}
	}
	h.proc(t, "a")
	b := h.proc(t, "b")
	members(2)
	send(30)
	b.plug.Pull() // kill -9: its transaction is left open
	send(15)
	h.proc(t, "b")
	send(15)
	c := h.proc(t, "c")
	members(3)
	h.onePartitionEach(t, group)
	send(15)
	c.stop()
	send(15)
	h.exactlyOnce(t, sub, want)
}

// TestTopicSubscriptionFencesZombie: a dispatcher whose heartbeats stop
// reaching the group while it goes on reading and writing (a long pause,
// a partial partition) loses its partitions to the other; its writes
// after that are refused, and the topic holds every event once. kfake
// only: the broker holds the zombie's heartbeats.
func TestTopicSubscriptionFencesZombie(t *testing.T) {
	if kafkatest.Real() {
		t.Skip("holds heartbeats in kfake")
	}
	h := newHarness(t, true)
	h.stop()
	sub := h.topicSub(t, "orders")
	var held atomic.Bool
	h.env.Cluster.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.env.Cluster.KeepControl()
		hb := req.(*kmsg.HeartbeatRequest)
		if held.Load() && hb.InstanceID != nil && *hb.InstanceID == "zombie" {
			return nil, nil, true // never answered: the session runs out
		}
		return nil, nil, false
	})
	start := func(instance string) {
		cfg := h.cfg
		cfg.InstanceID = instance
		opts := []kgo.Opt{kgo.SeedBrokers(h.env.Seeds...), kgo.HeartbeatInterval(200 * time.Millisecond), kgo.SessionTimeout(6 * time.Second)}
		d := dispatch.New(cfg, topics.Cluster{Client: h.producer, Opts: opts, Names: h.env.Names}, h.registry, kafkatest.Logger(t), prometheus.NewRegistry())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = d.Run(ctx)
		}()
		t.Cleanup(func() {
			cancel()
			<-done
		})
	}
	start("zombie")
	var want []string
	send := func(n int) {
		for range n {
			want = append(want, h.event(t, "shop", "order"))
		}
	}
	send(20)
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if got := len(h.env.Records(t, topics.Topic(sub.Topic))); got < 20 {
			return fmt.Errorf("%d records written, want 20", got)
		}
		return nil
	})
	held.Store(true)
	start("heir")
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		a := h.assignment(t, h.env.Names.DispatchGroup(), h.env.Names.Events)
		if len(a) != 1 {
			return fmt.Errorf("assignment %v, want the heir alone", a)
		}
		return nil
	})
	send(40) // the zombie reads and writes them too
	h.exactlyOnce(t, sub, want)
}

// TestTopicSubscriptionCommitAnswerLost: a transaction whose commit
// reached the broker but whose answer never came back (a network black
// hole at the wrong moment) committed: the dispatcher must not write its
// records again. kfake only: the broker forwards the commit and holds its
// answer.
func TestTopicSubscriptionCommitAnswerLost(t *testing.T) {
	if kafkatest.Real() {
		t.Skip("holds an EndTxn answer in kfake")
	}
	h := newHarness(t, true)
	h.stop()
	sub := h.topicSub(t, "orders")
	writer := h.env.Names.TopicWriter("a")
	var armed, produced, forwarded, lost atomic.Bool
	h.env.Cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.env.Cluster.KeepControl()
		if p := req.(*kmsg.ProduceRequest); armed.Load() && p.TransactionID != nil && *p.TransactionID == writer {
			produced.Store(true)
		}
		return nil, nil, false
	})
	side := h.env.Client(t)
	h.env.Cluster.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.env.Cluster.KeepControl()
		end := req.(*kmsg.EndTxnRequest)
		if end.TransactionalID != writer || !end.Commit || !produced.Load() {
			return nil, nil, false
		}
		if forwarded.Swap(true) {
			return nil, nil, false // the copy, and every commit after it
		}
		// The commit reaches the broker; its answer is lost.
		h.env.Cluster.SleepControl(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cp := *end
			resp, err := cp.RequestWith(ctx, side)
			if err == nil {
				err = kerr.ErrorForCode(resp.ErrorCode)
			}
			if err != nil {
				t.Errorf("forwarding the commit: %v", err)
			}
		})
		lost.Store(true)
		return nil, nil, true // never answered
	})
	h.proc(t, "a")
	var want []string
	for range 5 {
		want = append(want, h.event(t, "shop", "order"))
	}
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if got := len(h.env.Records(t, topics.Topic(sub.Topic))); got < 5 {
			return fmt.Errorf("%d records written, want 5", got)
		}
		return nil
	})
	armed.Store(true)
	for range 5 {
		want = append(want, h.event(t, "shop", "order"))
	}
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		if !lost.Load() {
			return errors.New("no commit answer lost yet")
		}
		return nil
	})
	for range 5 {
		want = append(want, h.event(t, "shop", "order"))
	}
	h.exactlyOnce(t, sub, want)
}

// TestTopicDeletedStopsSubscription: a topic subscription whose topic is
// deleted while it runs is disabled with the reason and counted; another
// topic subscription goes on; enabling it creates the topic again and
// writes what waited.
func TestTopicDeletedStopsSubscription(t *testing.T) {
	h := newHarness(t, true)
	gone := h.topicSub(t, "gone")
	kept := h.topicSub(t, "kept")
	var want []string
	for range 5 {
		want = append(want, h.event(t, "shop", "order"))
	}
	h.exactlyOnce(t, kept, want)
	ctx := context.Background()
	if _, err := h.env.Admin(t).DeleteTopics(ctx, gone.Topic); err != nil {
		t.Fatalf("delete %s: %v", gone.Topic, err)
	}
	var later []string
	for range 5 {
		later = append(later, h.event(t, "shop", "order"))
	}
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		if s := h.get(t, gone.ID); s.Enabled || !strings.Contains(s.DisabledReason, gone.Topic) {
			return fmt.Errorf("subscription enabled %v, reason %q; want disabled naming its topic", s.Enabled, s.DisabledReason)
		}
		if got := h.counter(t, "hookstream_delivery_topic_stopped_total", gone.ID); got != 1 {
			return fmt.Errorf("hookstream_delivery_topic_stopped_total{subscription=%s}: got %v, want 1", gone.ID, got)
		}
		if got := h.subGauge(t, "hookstream_delivery_subscription_disabled", gone.ID); got != 1 {
			return fmt.Errorf("hookstream_delivery_subscription_disabled{subscription=%s}: got %v, want 1", gone.ID, got)
		}
		return nil
	})
	all := slices.Concat(want, later)
	h.exactlyOnce(t, kept, all)
	if _, err := h.registry.Update(ctx, gone.ID, func(s *subscriptions.Subscription) error {
		s.Enabled, s.DisabledReason = true, ""
		return nil
	}); err != nil {
		t.Fatalf("enable: %v", err)
	}
	h.exactlyOnce(t, gone, later)
}

// TestTopicSubscriptionReplayWhileRunning: a topic subscription's replay
// while dispatchers run writes the replayed range again, each record
// marked hs-replay 1, and what follows once, unmarked.
func TestTopicSubscriptionReplayWhileRunning(t *testing.T) {
	h := newHarness(t, true)
	sub := h.topicSub(t, "replayed")
	var ids []string
	for range 6 {
		ids = append(ids, h.event(t, "shop", "order"))
	}
	h.exactlyOnce(t, sub, ids)
	target, err := groups.ParseTarget("earliest", "")
	if err != nil {
		t.Fatal(err)
	}
	api := groups.New(h.env.ClusterOf(h.cl), h.registry)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if r, err := api.Replay(ctx, "sub:"+sub.ID, "", nil, target, true); err != nil || !r.Executed {
		t.Fatalf("replay while running: executed %v, %v", r.Executed, err)
	}
	after := h.event(t, "shop", "order")
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		first, replayed := make(map[string]int), make(map[string]int)
		for _, r := range h.env.Records(t, topics.Topic(sub.Topic)) {
			switch mark := kafkatest.Headers(r)[topics.HeaderReplay]; mark {
			case "":
				first[string(r.Key)]++
			case "1":
				replayed[string(r.Key)]++
			default:
				return fmt.Errorf("%s marked %s=%q, want 1", r.Key, topics.HeaderReplay, mark)
			}
		}
		for _, id := range ids {
			if first[id] != 1 || replayed[id] != 1 {
				return fmt.Errorf("%s written %d times, %d marked replayed; want once each", id, first[id], replayed[id])
			}
		}
		if first[after] != 1 || replayed[after] != 0 {
			return fmt.Errorf("the event after the replay written %d times, %d marked; want once, unmarked", first[after], replayed[after])
		}
		return nil
	})
}
