package dispatch_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// fanSink is one endpoint for many subscriptions, each at its own path:
// it records the event ids each path received and answers as respond
// says for the path.
type fanSink struct {
	srv     *httptest.Server
	mu      sync.Mutex
	got     map[string]map[string]int // path -> webhook-id -> deliveries
	respond func(path string) int
}

func newFanSink(t *testing.T, respond func(path string) int) *fanSink {
	s := &fanSink{got: make(map[string]map[string]int), respond: respond}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := strings.TrimPrefix(r.URL.Path, "/")
		status := s.respond(path)
		if status == http.StatusOK {
			s.mu.Lock()
			if s.got[path] == nil {
				s.got[path] = make(map[string]int)
			}
			s.got[path][r.Header.Get("webhook-id")]++
			s.mu.Unlock()
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// missing counts, over paths, the ids not yet received.
func (s *fanSink) missing(paths []string, ids []string) (n int, example string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range paths {
		for _, id := range ids {
			if s.got[p][id] == 0 {
				n++
				example = p + " " + id
			}
		}
	}
	return n, example
}

// TestFanOutIsolatesSubscriptions: 200 subscriptions on one dispatcher,
// one of them held by its subscriber, one ordered and failing: the 198
// others receive every event, the dispatcher reads the events topic in
// one group (<prefix>-dispatch, no member in any subscription's group),
// and each subscription's cursor is its group's committed offsets, as
// `hookstream lag` reports them.
func TestFanOutIsolatesSubscriptions(t *testing.T) {
	h := newHarness(t, true)
	hold := make(chan struct{})
	sink := newFanSink(t, func(path string) int {
		switch path {
		case "slow":
			<-hold
			return http.StatusOK
		case "failing":
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	t.Cleanup(func() { close(hold) }) // before the sink closes
	var healthy, healthyIDs []string
	for i := range 198 {
		path := fmt.Sprintf("s%d", i)
		s := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL + "/" + path})
		healthy, healthyIDs = append(healthy, path), append(healthyIDs, s.ID)
	}
	h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL + "/slow", MaxInFlight: 1})
	hour := subscriptions.Duration(time.Hour)
	h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL + "/failing", Ordered: true,
		Schedule: []subscriptions.Duration{hour}})

	var ids []string
	for range 30 {
		ids = append(ids, h.event(t, "shop", "order"))
	}
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		if n, example := sink.missing(healthy, ids); n > 0 {
			return fmt.Errorf("%d deliveries missing, %s among them", n, example)
		}
		return nil
	})

	// One read of the events topic: the dispatcher is a member of the
	// dispatch group alone.
	if m := h.members(t, h.env.Names.DispatchGroup()); len(m) != 1 {
		t.Errorf("dispatch group members %v, want the one dispatcher", m)
	}
	described, err := kadm.NewClient(h.cl).DescribeGroups(context.Background(), string(h.env.Names.SubscriptionGroup(healthyIDs[0])))
	if err != nil {
		t.Fatal(err)
	}
	for g, d := range described {
		if len(d.Members) > 0 {
			t.Errorf("group %s has members %d, want none", g, len(d.Members))
		}
	}
	// Each healthy subscription's cursor reaches the end, as lag shows.
	for _, id := range []string{healthyIDs[0], healthyIDs[99], healthyIDs[197]} {
		kafkatest.WaitFor(t, 30*time.Second, func() error {
			lags, err := groups.New(h.env.ClusterOf(h.cl), h.registry).Lags(context.Background(), "sub:"+id)
			if err != nil {
				return err
			}
			if len(lags) != 1 || lags[0].Total != 0 || len(lags[0].Partitions) == 0 {
				return fmt.Errorf("lag of %s: %+v, want 0 on every partition", id, lags)
			}
			for _, p := range lags[0].Partitions {
				if p.Committed < 0 {
					return fmt.Errorf("lag of %s: partition %d has no cursor", id, p.Partition)
				}
			}
			return nil
		})
	}
}

// TestSubscriptionBehindCatchesUp: a subscription created from the
// earliest offset while the others are at the head reads its backlog
// through the catch-up path, while new events keep reaching the others.
func TestSubscriptionBehindCatchesUp(t *testing.T) {
	h := newHarness(t, true)
	sink := newFanSink(t, func(string) int { return http.StatusOK })
	ctx := context.Background()
	head := subscriptions.Subscription{URL: sink.srv.URL + "/head"}
	if err := h.registry.Create(ctx, &head, "latest"); err != nil {
		t.Fatal(err)
	}
	var old []string
	for range 40 {
		old = append(old, h.event(t, "shop", "order"))
	}
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if n, example := sink.missing([]string{"head"}, old); n > 0 {
			return fmt.Errorf("%d missing, %s among them", n, example)
		}
		return nil
	})
	h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL + "/late"})
	var fresh []string
	for range 10 {
		fresh = append(fresh, h.event(t, "shop", "order"))
	}
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if n, example := sink.missing([]string{"late"}, append(old, fresh...)); n > 0 {
			return fmt.Errorf("%d missing, %s among them", n, example)
		}
		if n, example := sink.missing([]string{"head"}, fresh); n > 0 {
			return fmt.Errorf("%d missing, %s among them", n, example)
		}
		return nil
	})
}

// TestReplayWhileRunning: a subscription's replay executed while the
// dispatcher runs is handed to it and applied before the replay returns:
// the subscriber gets the replayed range again, exactly once more, and
// the dispatcher goes on from there.
func TestReplayWhileRunning(t *testing.T) {
	h := newHarness(t, true)
	sink := newFanSink(t, func(string) int { return http.StatusOK })
	sub := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL + "/r"})
	h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL + "/other"})
	var ids []string
	for range 12 {
		ids = append(ids, h.event(t, "shop", "order"))
	}
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if n, example := sink.missing([]string{"r", "other"}, ids); n > 0 {
			return fmt.Errorf("%d missing, %s among them", n, example)
		}
		return nil
	})
	h.caughtUp(t, sub.ID)
	target, err := groups.ParseTarget("earliest", "")
	if err != nil {
		t.Fatal(err)
	}
	api := groups.New(h.env.ClusterOf(h.cl), h.registry)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r, err := api.Replay(ctx, "sub:"+sub.ID, "", nil, target, true)
	if err != nil {
		t.Fatalf("replay while running: %v", err)
	}
	if !r.Executed {
		t.Fatal("replay not executed")
	}
	after := h.event(t, "shop", "order")
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		for _, id := range ids {
			if n := sink.got["r"][id]; n != 2 {
				return fmt.Errorf("%s delivered %d times, want twice", id, n)
			}
		}
		if sink.got["r"][after] != 1 || sink.got["other"][after] != 1 {
			return fmt.Errorf("the event after the replay delivered %d and %d times, want once to each", sink.got["r"][after], sink.got["other"][after])
		}
		return nil
	})
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for _, id := range ids {
		if n := sink.got["other"][id]; n != 1 {
			t.Errorf("%s delivered %d times to the other subscription, want once", id, n)
		}
	}
}

// TestKillAndRebalanceLoseNothing: two dispatchers share 20
// subscriptions; one is killed with -9 mid-delivery and restarted, a third
// joins and leaves under load: every subscription receives every event
// (at least once).
func TestKillAndRebalanceLoseNothing(t *testing.T) {
	h := newHarness(t, true)
	h.stop()
	sink := newFanSink(t, func(string) int { return http.StatusOK })
	var paths []string
	for i := range 20 {
		path := fmt.Sprintf("k%d", i)
		h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL + "/" + path})
		paths = append(paths, path)
	}
	group := h.env.Names.DispatchGroup()
	members := func(n int) {
		kafkatest.WaitFor(t, 60*time.Second, func() error {
			if m := h.members(t, group); len(m) != n {
				return fmt.Errorf("members %v, want %d", m, n)
			}
			return nil
		})
	}
	h.proc(t, "a")
	b := h.proc(t, "b")
	members(2)
	var ids []string
	send := func(n int) {
		for range n {
			ids = append(ids, h.event(t, "shop", "order"))
		}
	}
	send(40)
	b.plug.Pull() // kill -9
	send(20)
	h.proc(t, "b")
	send(20)
	c := h.proc(t, "c")
	members(3)
	h.onePartitionEach(t, group)
	send(20)
	c.stop()
	send(20)
	kafkatest.WaitFor(t, 90*time.Second, func() error {
		if n, example := sink.missing(paths, ids); n > 0 {
			return fmt.Errorf("%d deliveries missing, %s among them", n, example)
		}
		return nil
	})
}

// TestUpgradeStartsFromTheOldGroupsOffsets: a subscription whose group
// holds the offsets an earlier dispatcher committed (one consumer group
// per subscription, plain commits) is delivered from those offsets by
// the fan-out dispatcher: nothing before them again, everything after.
func TestUpgradeStartsFromTheOldGroupsOffsets(t *testing.T) {
	h := newHarness(t, true)
	h.stop()
	sink := newFanSink(t, func(string) int { return http.StatusOK })
	sub := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL + "/upgraded"})
	var delivered, fresh []string
	for range 15 {
		delivered = append(delivered, h.event(t, "shop", "order"))
	}
	ctx := context.Background()
	adm := kadm.NewClient(h.cl)
	ends, err := adm.ListEndOffsets(ctx, string(h.env.Names.Events))
	if err != nil {
		t.Fatal(err)
	}
	if err := adm.CommitAllOffsets(ctx, string(h.env.Names.SubscriptionGroup(sub.ID)), ends.Offsets()); err != nil {
		t.Fatal(err)
	}
	for range 15 {
		fresh = append(fresh, h.event(t, "shop", "order"))
	}
	h.start(t)
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if n, example := sink.missing([]string{"upgraded"}, fresh); n > 0 {
			return fmt.Errorf("%d missing, %s among them", n, example)
		}
		return nil
	})
	h.stop() // every record read is judged before the cursors are committed
	if n, _ := sink.missing([]string{"upgraded"}, delivered); n != len(delivered) {
		t.Errorf("%d of the %d events the old dispatcher delivered came again, want none", len(delivered)-n, len(delivered))
	}
}

// onePartitionEach waits until every member of group holds one partition
// of the events topic.
func (h *harness) onePartitionEach(t *testing.T, group topics.Group) {
	t.Helper()
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		for m, parts := range h.assignment(t, group, h.env.Names.Events) {
			if len(parts) != 1 {
				return fmt.Errorf("member %s holds %v, want one partition each", m, parts)
			}
		}
		return nil
	})
}
