package dispatch_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// proc is a dispatcher as its own process runs it: its consumers reach
// the broker through their own plug, so a test can kill it with -9.
type proc struct {
	plug  *kafkatest.Plug
	joins atomic.Int64 // JoinGroup requests its consumers sent
	stop  func()
}

// OnBrokerWrite implements kgo.HookBrokerWrite.
func (p *proc) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == 11 && err == nil { // JoinGroup
		p.joins.Add(1)
	}
}

// proc starts a dispatcher under instance id.
func (h *harness) proc(t *testing.T, instance string) *proc {
	t.Helper()
	p := &proc{plug: &kafkatest.Plug{}}
	cfg := h.cfg
	cfg.InstanceID = instance
	opts := []kgo.Opt{kgo.SeedBrokers(h.env.Seeds...), kgo.HeartbeatInterval(200 * time.Millisecond), p.plug.Dial(), kgo.WithHooks(p)}
	d := dispatch.New(cfg, topics.Cluster{Client: h.producer, Opts: opts, Names: h.env.Names}, h.registry, kafkatest.Logger(t), prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = d.Run(ctx)
	}()
	p.stop = func() {
		cancel()
		<-done
		if err != nil {
			t.Errorf("dispatcher Run: %v", err)
		}
	}
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return p
}

// members returns the member ids of group.
func (h *harness) members(t *testing.T, group topics.Group) []string {
	t.Helper()
	described, err := kadm.NewClient(h.cl).DescribeGroups(context.Background(), string(group))
	if err != nil {
		t.Fatalf("describe %s: %v", group, err)
	}
	var ids []string
	for _, m := range described[string(group)].Members {
		ids = append(ids, m.MemberID)
	}
	return ids
}

// joined waits until group has a member not in before, and returns its
// members.
func (h *harness) joined(t *testing.T, group topics.Group, before []string) []string {
	t.Helper()
	var now []string
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		now = h.members(t, group)
		for _, id := range now {
			if !slices.Contains(before, id) {
				return nil
			}
		}
		return fmt.Errorf("members %v: no one new since %v", now, before)
	})
	return now
}

// member starts a plain consumer in group, through plug when not nil.
// Its client context ends before its Close, so a join the group holds
// does not hold up the test's end.
func (h *harness) member(t *testing.T, group topics.Group, plug *kafkatest.Plug, opts ...kgo.Opt) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	opts = append(opts, kgo.WithContext(ctx), kgo.ConsumerGroup(string(group)), kgo.ConsumeTopics(string(h.env.Names.Events)))
	if plug != nil {
		opts = append(opts, plug.Dial())
	}
	h.env.Client(t, opts...)
	t.Cleanup(cancel) // before the Close env.Client registered
}

// hang leaves p's consumer of group waiting in a JoinGroup the group holds
// for minutes: a member that joined with a 5-minute rebalance timeout dies,
// another member joins, and the group waits for the dead one to rejoin.
func (h *harness) hang(t *testing.T, group topics.Group, p *proc) {
	t.Helper()
	ghost := &kafkatest.Plug{}
	h.member(t, group, ghost, kgo.SessionTimeout(5*time.Minute), kgo.RebalanceTimeout(5*time.Minute))
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		a := h.assignment(t, group, h.env.Names.Events)
		if len(a) != 2 {
			return fmt.Errorf("assignment %v, want the dispatcher and the ghost", a)
		}
		for _, parts := range a {
			if len(parts) == 0 {
				return fmt.Errorf("assignment %v, want partitions for both", a)
			}
		}
		return nil
	})
	ghost.Pull()
	joins := p.joins.Load()
	h.member(t, group, nil)
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if p.joins.Load() == joins {
			return fmt.Errorf("the dispatcher has not rejoined %s", group)
		}
		return nil
	})
}

// TestKilledDispatchersRestartInPlace replays the fault campaign's quick
// succession of kill -9s of two dispatchers: b killed and restarted, the
// restart killed once it joined and restarted again, then a killed and
// restarted. Each restart, under its instance id, takes its
// predecessor's place in the subscription's group: the subscriber gets
// new events on every partition without waiting for the dead members'
// session timeout (45 s), let alone for a group stuck rebalancing.
func TestKilledDispatchersRestartInPlace(t *testing.T) {
	h := newHarness(t, true)
	h.stop()
	sink := newSubscriber(t, nil)
	sub := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL})
	_ = sub
	group := h.env.Names.DispatchGroup()
	a, b := h.proc(t, "a"), h.proc(t, "b")
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if m := h.members(t, group); len(m) != 2 {
			return fmt.Errorf("members %v, want 2", m)
		}
		return nil
	})
	sink.waitFor(t, []string{h.event(t, "shop", "order")}, 30*time.Second)

	members := h.members(t, group)
	b.plug.Pull()
	b = h.proc(t, "b")
	members = h.joined(t, group, members)
	b.plug.Pull()
	h.proc(t, "b")
	h.joined(t, group, members)
	a.plug.Pull()
	h.proc(t, "a")
	var ids []string
	for range 12 {
		ids = append(ids, h.event(t, "shop", "order"))
	}
	sink.waitFor(t, ids, 30*time.Second)
}

// TestStopBoundedWhileJoinHangs: a dispatcher whose consumer waits in a
// join the group holds for minutes still stops within seconds.
func TestStopBoundedWhileJoinHangs(t *testing.T) {
	h := newHarness(t, true)
	h.stop()
	h.subscribe(t, subscriptions.Subscription{URL: newSubscriber(t, nil).srv.URL})
	p := h.proc(t, "a")
	h.hang(t, h.env.Names.DispatchGroup(), p)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		p.stop()
	}()
	select {
	case <-stopped:
	case <-time.After(15 * time.Second):
		t.Fatal("dispatcher still stopping 15s after its context ended")
	}
}

// TestStoppingSubscriptionStallsNoOther: while a subscription is
// disabled, another subscription's deliveries, retries included, go on:
// stopping one subscription touches no group.
func TestStoppingSubscriptionStallsNoOther(t *testing.T) {
	h := newHarness(t, true)
	h.stop()
	toggled := h.subscribe(t, subscriptions.Subscription{URL: newSubscriber(t, nil).srv.URL})
	flaky := newSubscriber(t, func(_ string, n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	h.subscribe(t, subscriptions.Subscription{URL: flaky.srv.URL})
	h.proc(t, "a")

	if _, err := h.registry.Update(context.Background(), toggled.ID, func(s *subscriptions.Subscription) error {
		subscriptions.Patch{Enabled: new(false)}.Apply(s)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 6 {
		ids = append(ids, h.event(t, "shop", "order"))
	}
	kafkatest.WaitFor(t, 15*time.Second, func() error {
		got := flaky.received()
		for _, id := range ids {
			if got[id] < 2 {
				return fmt.Errorf("%s delivered %d times, want its retry too", id, got[id])
			}
		}
		return nil
	})
}
