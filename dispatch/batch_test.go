package dispatch_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// batchEvents decodes a batch body, {"events":[envelope,...]}, as a
// subscriber would; ok is false for any other body.
func batchEvents(body []byte) (events []topics.Envelope, ok bool) {
	var b struct {
		Events *[]topics.Envelope `json:"events"`
	}
	if err := json.Unmarshal(body, &b); err != nil || b.Events == nil {
		return nil, false
	}
	return *b.Events, true
}

// posts returns the deliveries the subscriber got, in arrival order, with
// the event ids of each batch.
func (s *subscriber) posts(t *testing.T) []post {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]post, 0, len(s.got))
	for _, d := range s.got {
		events, ok := batchEvents(d.body)
		if !ok {
			t.Fatalf("delivery %s: body is not a batch: %.200s", d.id, d.body)
		}
		p := post{id: d.id, body: string(d.body)}
		for _, e := range events {
			p.events = append(p.events, e.ID)
		}
		out = append(out, p)
	}
	return out
}

type post struct {
	id     string
	body   string
	events []string
}

// batchedEvents counts the events of every batch received, by event id.
func (s *subscriber) batchedEvents(t *testing.T) map[string]int {
	t.Helper()
	got := make(map[string]int)
	for _, p := range s.posts(t) {
		for _, id := range p.events {
			got[id]++
		}
	}
	return got
}

func (s *subscriber) waitForBatched(t *testing.T, ids []string, timeout time.Duration) {
	t.Helper()
	kafkatest.WaitFor(t, timeout, func() error {
		got := s.batchedEvents(t)
		for _, id := range ids {
			if got[id] == 0 {
				return fmt.Errorf("%s not delivered (got %d events)", id, len(got))
			}
		}
		return nil
	})
}

// events writes n events and returns their ids in the order written.
func (h *harness) events(t *testing.T, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = h.event(t, "shop", "order")
	}
	return ids
}

// onePartition starts a dispatcher on a broker whose topics have one
// partition, so that the batches of all events can be counted exactly.
func onePartition(t *testing.T, cfg dispatch.Config) *harness {
	t.Helper()
	cfg.Client.AllowPrivate = true
	return newHarnessOn(t, kafkatest.New(t, 1, 1<<20), cfg)
}

// TestBatchesOfOnePartitionInOrder: 250 events to a subscription with
// batch_max 100 arrive as 3 signed POSTs of 100, 100 and 50 events, each
// in the order they were written and each with its own batch id. (An
// unordered subscription may have the batches themselves arrive in any
// order, as single events may.)
func TestBatchesOfOnePartitionInOrder(t *testing.T) {
	h := onePartition(t, dispatch.Config{})
	sink := newSubscriber(t, nil)
	ids := h.events(t, 250)
	sub := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL, BatchMax: 100, BatchWait: subscriptions.Duration(5 * time.Second)})
	sink.mu.Lock()
	sink.secrets = []string{sub.Secret}
	sink.mu.Unlock()
	sink.waitForBatched(t, ids, 30*time.Second)

	posts := sink.posts(t)
	pos := map[string]int{}
	for i, id := range ids {
		pos[id] = i
	}
	slices.SortFunc(posts, func(a, b post) int { return pos[a.events[0]] - pos[b.events[0]] })
	var sizes []int
	var got []string
	seen := map[string]bool{}
	for _, p := range posts {
		sizes = append(sizes, len(p.events))
		got = append(got, p.events...)
		if seen[p.id] || !strings.HasPrefix(p.id, "batch_") {
			t.Errorf("webhook-id %q: want a distinct batch id", p.id)
		}
		seen[p.id] = true
	}
	if !slices.Equal(sizes, []int{100, 100, 50}) {
		t.Errorf("batch sizes: got %v, want [100 100 50]", sizes)
	}
	if !slices.Equal(got, ids) {
		t.Errorf("events of the batches in order of their first: got %v, want the order written %v", got, ids)
	}
}

// TestFailingBatchRetriedWhole: a batch that fails twice is retried whole,
// through the retry topic, with the same webhook-id and the same body, and
// then succeeds; nothing is dead-lettered.
func TestFailingBatchRetriedWhole(t *testing.T) {
	h := onePartition(t, dispatch.Config{})
	sink := newSubscriber(t, func(_ string, n int) int {
		if n <= 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	ids := h.events(t, 25)
	h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL, BatchMax: 10, BatchWait: subscriptions.Duration(5 * time.Second)})
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		got := sink.received()
		if len(got) != 3 {
			return fmt.Errorf("batch ids: got %v, want 3", got)
		}
		for id, n := range got {
			if n != 3 {
				return fmt.Errorf("batch %s: %d attempts, want 3 (two failures, then success)", id, n)
			}
		}
		return nil
	})
	bodies := map[string]string{}
	var delivered []string
	for _, p := range sink.posts(t) {
		if first, ok := bodies[p.id]; ok && first != p.body {
			t.Errorf("batch %s: a retry sent another body:\n%s\nwant\n%s", p.id, p.body, first)
		}
		if _, ok := bodies[p.id]; !ok {
			bodies[p.id] = p.body
			delivered = append(delivered, p.events...)
		}
	}
	slices.Sort(delivered)
	want := slices.Sorted(slices.Values(ids))
	if !slices.Equal(delivered, want) {
		t.Errorf("events in the batches: got %v, want each of %v once", delivered, want)
	}
	if dlq := h.env.Records(t, h.env.Names.DeliveryDLQ); len(dlq) != 0 {
		t.Errorf("delivery DLQ: got %d records, want none", len(dlq))
	}
}

// TestDeadBatchLettersEachEvent: a batch whose attempts are exhausted
// becomes one dead letter per event, each keyed and valued as a single
// event's letter and carrying the batch id.
func TestDeadBatchLettersEachEvent(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			h := onePartition(t, dispatch.Config{})
			sink := newSubscriber(t, func(string, int) int { return http.StatusInternalServerError })
			ids := h.events(t, 5)
			sub := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL, BatchMax: 5, BatchWait: subscriptions.Duration(5 * time.Second), Ordered: ordered})
			var dlq []map[string]string
			kafkatest.WaitFor(t, 30*time.Second, func() error {
				dlq = nil
				for _, r := range h.env.Records(t, h.env.Names.DeliveryDLQ) {
					hd := kafkatest.Headers(r)
					hd["key"], hd["value"] = string(r.Key), string(r.Value)
					dlq = append(dlq, hd)
				}
				if len(dlq) < len(ids) {
					return fmt.Errorf("delivery DLQ: %d of %d", len(dlq), len(ids))
				}
				return nil
			})
			got := sink.received()
			if len(got) != 1 {
				t.Fatalf("webhook-ids received: got %v, want one batch", got)
			}
			var batchID string
			for id, n := range got {
				batchID = id
				if attempts := 1 + len(testSchedule); n != attempts {
					t.Errorf("batch %s: %d attempts, want %d", id, n, attempts)
				}
			}
			if len(dlq) != len(ids) {
				t.Errorf("delivery DLQ: got %d letters, want %d (one per event)", len(dlq), len(ids))
			}
			for i, l := range dlq {
				if i >= len(ids) {
					break
				}
				env, err := topics.ParseEnvelope([]byte(l["value"]))
				if err != nil || env.ID != ids[i] || l["key"] != sub.ID+":"+ids[i] {
					t.Errorf("letter %d: key %q, envelope %v (err %v), want the event %s", i, l["key"], env, err, ids[i])
				}
				if l[topics.HeaderBatchID] != batchID || l[topics.HeaderAttempts] != fmt.Sprint(1+len(testSchedule)) ||
					l[topics.HeaderLastStatus] != "500" || l[topics.HeaderSubscription] != sub.ID {
					t.Errorf("letter %d headers: %v, want batch id %s, %d attempts, last status 500", i, l, batchID, 1+len(testSchedule))
				}
			}
		})
	}
}

// TestBatchMaxOneSendsEnvelopes: batch_max 1 is delivery as without
// batching: the body is the envelope and webhook-id its event id.
func TestBatchMaxOneSendsEnvelopes(t *testing.T) {
	h := onePartition(t, dispatch.Config{})
	sink := newSubscriber(t, nil)
	ids := h.events(t, 3)
	sub := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL, BatchMax: 1, BatchWait: subscriptions.Duration(time.Second)})
	sink.mu.Lock()
	sink.secrets = []string{sub.Secret}
	sink.mu.Unlock()
	sink.waitFor(t, ids, 30*time.Second)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for _, d := range sink.got {
		env, err := topics.ParseEnvelope(d.body)
		if _, batch := batchEvents(d.body); batch || err != nil || env.ID != d.id {
			t.Errorf("delivery %s: body %s, want the envelope of %s", d.id, d.body, d.id)
		}
	}
}

// TestOrderedBatchesHoldTheirPartition: a failing batch of an ordered
// subscription is retried in place; no later event is delivered before it
// succeeds.
func TestOrderedBatchesHoldTheirPartition(t *testing.T) {
	h := onePartition(t, dispatch.Config{})
	var mu sync.Mutex
	sink := newSubscriber(t, nil)
	calls := 0
	sink.respond = func(string, int) int {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 2 || calls == 3 { // the second batch fails twice
			return http.StatusInternalServerError
		}
		return http.StatusOK
	}
	ids := h.events(t, 15)
	h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL, BatchMax: 5, BatchWait: subscriptions.Duration(5 * time.Second), Ordered: true})
	sink.waitForBatched(t, ids, 30*time.Second)
	posts := sink.posts(t)
	if len(posts) != 5 || posts[1].id != posts[2].id || posts[2].id != posts[3].id || posts[3].id == posts[4].id {
		t.Fatalf("posts: got %d %v, want 5: a batch, the second batch three times, the third", len(posts), posts)
	}
	var delivered []string
	for _, i := range []int{0, 3, 4} { // the successful ones
		delivered = append(delivered, posts[i].events...)
	}
	if !slices.Equal(delivered, ids) {
		t.Errorf("successful deliveries: got %v, want the order written %v", delivered, ids)
	}
}

// TestRedrivenEventBatchedForBatchingSubscription: one event redriven to
// the retry topic of a subscription that batches reaches it as a batch of
// one, as all its deliveries are.
func TestRedrivenEventBatchedForBatchingSubscription(t *testing.T) {
	h := onePartition(t, dispatch.Config{})
	sink := newSubscriber(t, nil)
	sub := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL, BatchMax: 50})
	e := &topics.Envelope{ID: "shop:redriven", Source: "shop", EventID: "redriven", Type: "order",
		ReceivedAt: time.Now().UTC(), ProcessedAt: time.Now().UTC(), Data: []byte(`{}`)}
	v, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	retry := &topics.Retry{Subscription: sub.ID, EventID: e.ID, DueAt: time.Now(), RedrivenFrom: "dlq/0/0", Body: v}
	if err := h.cl.ProduceSync(t.Context(), retry.Record(h.env.Names.DeliveryRetry)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	sink.waitForBatched(t, []string{e.ID}, 30*time.Second)
	posts := sink.posts(t)
	if len(posts) != 1 || !strings.HasPrefix(posts[0].id, "batch_") || !slices.Equal(posts[0].events, []string{e.ID}) {
		t.Errorf("posts: got %v, want one batch of the redriven event", posts)
	}
}
