package dispatch_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/webhook"
)

var testSchedule = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}

// harness is a broker, a registry and a running dispatcher.
type harness struct {
	env      *kafkatest.Env
	cl       *kgo.Client
	producer *kgo.Client // the dispatcher's, as run builds it
	registry *subscriptions.Registry
	cfg      dispatch.Config
	stop     func()
	seq      int
	// metrics is the registry of the first dispatcher instance.
	metrics *prometheus.Registry
	// first is the first dispatcher instance.
	first *dispatch.Dispatcher
}

func newHarness(t *testing.T, allowPrivate bool) *harness {
	t.Helper()
	return newHarnessWith(t, dispatch.Config{Client: webhook.Config{AllowPrivate: allowPrivate}})
}

// newHarnessWith starts a dispatcher with cfg, filled with test defaults.
func newHarnessWith(t *testing.T, cfg dispatch.Config) *harness {
	t.Helper()
	return newHarnessOn(t, kafkatest.New(t, 3, 1<<20), cfg)
}

// newHarnessOn starts a dispatcher with cfg on env.
func newHarnessOn(t *testing.T, env *kafkatest.Env, cfg dispatch.Config) *harness {
	t.Helper()
	cl := env.Client(t)
	h := &harness{env: env, cl: cl}
	h.registry = subscriptions.NewRegistry(env.ClusterOf(cl), kafkatest.Logger(t))
	cfg.Client.Timeout, cfg.Client.UserAgent = 2*time.Second, "hookstream/test"
	if cfg.Schedule == nil {
		cfg.Schedule = testSchedule
	}
	if cfg.BreakerFailures == 0 {
		cfg.BreakerFailures = 1000
	}
	if cfg.DisableAfter == 0 {
		cfg.DisableAfter = time.Hour
	}
	h.cfg = cfg
	h.producer = cl
	if cfg.MaxRecordBytes > 0 {
		h.producer = env.Client(t, kgo.ProducerBatchMaxBytes(int32(cfg.MaxRecordBytes)))
	}
	h.start(t)
	return h
}

func (h *harness) start(t *testing.T) {
	t.Helper()
	h.metrics = prometheus.NewRegistry()
	h.stop = h.instance(t, h.metrics)
}

// ready is the first dispatcher's readiness detail.
func (h *harness) ready(t *testing.T) map[string]any {
	t.Helper()
	_, detail := h.first.Ready(context.Background())
	return detail.(map[string]any)
}

// another starts one more dispatcher instance and returns its stop.
func (h *harness) another(t *testing.T) func() {
	t.Helper()
	return h.instance(t, prometheus.NewRegistry())
}

func (h *harness) instance(t *testing.T, reg *prometheus.Registry) func() {
	t.Helper()
	// A short heartbeat makes rebalances quick.
	opts := []kgo.Opt{kgo.SeedBrokers(h.env.Seeds...), kgo.HeartbeatInterval(200 * time.Millisecond)}
	d := dispatch.New(h.cfg, topics.Cluster{Client: h.producer, Opts: opts, Names: h.env.Names}, h.registry, kafkatest.Logger(t), reg)
	if reg == h.metrics {
		h.first = d
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("dispatcher Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// event writes one events record as the processor would.
func (h *harness) event(t *testing.T, source, eventType string) string {
	t.Helper()
	h.seq++
	id := strconv.Itoa(h.seq)
	e := &topics.Envelope{ID: source + ":" + id, Source: source, EventID: id, Type: eventType,
		ReceivedAt: time.Now().UTC(), ProcessedAt: time.Now().UTC(), Data: []byte(fmt.Sprintf(`{"seq":%d}`, h.seq))}
	v, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	rec := &kgo.Record{Topic: string(h.env.Names.Events), Key: []byte(e.ID), Value: v, Headers: []kgo.RecordHeader{
		{Key: topics.HeaderSource, Value: []byte(source)},
		{Key: topics.HeaderEventID, Value: []byte(id)},
		{Key: topics.HeaderEventType, Value: []byte(eventType)},
	}}
	if err := h.cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return e.ID
}

func (h *harness) subscribe(t *testing.T, s subscriptions.Subscription) subscriptions.Subscription {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.registry.Create(ctx, &s, "earliest"); err != nil {
		t.Fatalf("create subscription: %v", err)
	}
	return s
}

// subscriber is an HTTP endpoint that checks every delivery with its own
// Standard Webhooks verification and records what it got.
type subscriber struct {
	t       *testing.T
	srv     *httptest.Server
	mu      sync.Mutex
	secrets []string // each must verify one signature of every delivery
	got     []delivery
	// respond picks the status of a delivery, given how often its id came.
	respond func(id string, n int) int
}

type delivery struct {
	id, ts, sig string
	body        []byte
}

func newSubscriber(t *testing.T, respond func(id string, n int) int) *subscriber {
	s := &subscriber{t: t, respond: respond}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// verify is the Standard Webhooks check, written from the specification:
// base64 HMAC-SHA256 of "id.timestamp.body" with the secret's base64 key,
// one of the space-separated "v1,<sig>" values must match.
func verify(secret, id, ts, header string, body []byte) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, part := range strings.Fields(header) {
		if sig, ok := strings.CutPrefix(part, "v1,"); ok {
			got, err := base64.StdEncoding.DecodeString(sig)
			if err == nil && hmac.Equal(got, want) {
				return true
			}
		}
	}
	return false
}

func (s *subscriber) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
	s.mu.Lock()
	secrets := s.secrets
	n := 1
	for _, d := range s.got {
		if d.id == id {
			n++
		}
	}
	s.got = append(s.got, delivery{id: id, ts: ts, sig: r.Header.Get("webhook-signature"), body: body})
	s.mu.Unlock()
	for _, secret := range secrets {
		if !verify(secret, id, ts, r.Header.Get("webhook-signature"), body) {
			s.t.Errorf("delivery %s: signature %q does not verify with secret %s…", id, r.Header.Get("webhook-signature"), secret[:10])
		}
	}
	if r.Header.Get("Content-Type") != "application/json" || !strings.HasPrefix(r.Header.Get("User-Agent"), "hookstream/") {
		s.t.Errorf("delivery %s: Content-Type %q User-Agent %q", id, r.Header.Get("Content-Type"), r.Header.Get("User-Agent"))
	}
	if _, batch := batchEvents(body); !batch && !strings.Contains(string(body), `"id":"`+id+`"`) {
		s.t.Errorf("delivery %s: webhook-id is not the envelope id: %s", id, body)
	}
	status := http.StatusOK
	if s.respond != nil {
		status = s.respond(id, n)
	}
	w.WriteHeader(status)
}

// received counts deliveries by id, successful or not.
func (s *subscriber) received() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int)
	for _, d := range s.got {
		out[d.id]++
	}
	return out
}

func (s *subscriber) waitFor(t *testing.T, ids []string, timeout time.Duration) {
	t.Helper()
	kafkatest.WaitFor(t, timeout, func() error {
		got := s.received()
		for _, id := range ids {
			if got[id] == 0 {
				return fmt.Errorf("%s not delivered (got %d ids)", id, len(got))
			}
		}
		return nil
	})
}

func TestDeliversSignedEventsMatchingFilters(t *testing.T) {
	h := newHarness(t, true)
	sink := newSubscriber(t, nil)
	sub := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL, Sources: []string{"github"}, EventTypes: []string{"push", "pull_*"}})
	sink.secrets = []string{sub.Secret}
	var want []string
	for range 5 {
		want = append(want, h.event(t, "github", "push"), h.event(t, "github", "pull_request"))
		h.event(t, "github", "issues")
		h.event(t, "stripe", "push")
	}
	sink.waitFor(t, want, 30*time.Second)
	time.Sleep(300 * time.Millisecond) // let anything unexpected arrive
	got := sink.received()
	if len(got) != len(want) {
		t.Errorf("delivered ids: got %d %v, want exactly the %d matching", len(got), got, len(want))
	}
}

func TestRetriesUntilSuccess(t *testing.T) {
	h := newHarness(t, true)
	sink := newSubscriber(t, func(_ string, n int) int {
		if n <= 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	sub := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL})
	sink.secrets = []string{sub.Secret}
	ids := []string{h.event(t, "shop", "order"), h.event(t, "shop", "order")}
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		for _, id := range ids {
			if n := sink.received()[id]; n != 3 {
				return fmt.Errorf("%s: %d attempts, want 3 (two failures, then success)", id, n)
			}
		}
		return nil
	})
	if dlq := h.env.Records(t, h.env.Names.DeliveryDLQ); len(dlq) != 0 {
		t.Errorf("delivery DLQ: got %d records, want none", len(dlq))
	}
}

// TestFailingSubscriberDoesNotSlowHealthyOne: one subscriber always fails
// and ends in the DLQ after exactly 1+len(schedule) attempts per event,
// while a healthy subscriber beside it gets every event.
func TestFailingSubscriberDoesNotSlowHealthyOne(t *testing.T) {
	h := newHarness(t, true)
	bad := newSubscriber(t, func(string, int) int { return http.StatusInternalServerError })
	good := newSubscriber(t, nil)
	badSub := h.subscribe(t, subscriptions.Subscription{URL: bad.srv.URL})
	goodSub := h.subscribe(t, subscriptions.Subscription{URL: good.srv.URL})
	good.secrets = []string{goodSub.Secret}
	var ids []string
	for range 20 {
		ids = append(ids, h.event(t, "shop", "order"))
	}
	good.waitFor(t, ids, 30*time.Second)

	attempts := 1 + len(testSchedule)
	var dlq []*kgo.Record
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		dlq = h.env.Records(t, h.env.Names.DeliveryDLQ)
		if len(dlq) < len(ids) {
			return fmt.Errorf("delivery DLQ: %d of %d", len(dlq), len(ids))
		}
		return nil
	})
	if len(dlq) != len(ids) {
		t.Errorf("delivery DLQ: got %d records, want %d", len(dlq), len(ids))
	}
	for _, r := range dlq {
		h := map[string]string{}
		for _, hd := range r.Headers {
			h[hd.Key] = string(hd.Value)
		}
		if h[topics.HeaderAttempts] != strconv.Itoa(attempts) || h[topics.HeaderSubscription] != badSub.ID ||
			h[topics.HeaderLastStatus] != "500" || h[topics.HeaderErrorStage] != "deliver" || !strings.HasPrefix(string(r.Key), badSub.ID+":") {
			t.Errorf("DLQ record %s: headers %v, want %d attempts, subscription %s, last status 500", r.Key, h, attempts, badSub.ID)
		}
	}
	for id, n := range bad.received() {
		if n != attempts {
			t.Errorf("failing subscriber got %s %d times, want %d", id, n, attempts)
		}
	}
}

func TestOrderedSubscriptionKeepsOrderAcrossFailures(t *testing.T) {
	h := newHarness(t, true)
	var mu sync.Mutex
	var order []string
	sink := newSubscriber(t, nil)
	sink.respond = func(id string, n int) int {
		if strings.HasSuffix(id, ":3") && n <= 2 {
			return http.StatusInternalServerError
		}
		mu.Lock()
		order = append(order, id)
		mu.Unlock()
		return http.StatusOK
	}
	h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL, Ordered: true})
	var ids []string
	for range 8 {
		id := h.event(t, "solo", "e")
		ids = append(ids, id)
	}
	sink.waitFor(t, ids, 30*time.Second)
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(order) < len(ids) {
			return fmt.Errorf("%d successes", len(order))
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	// Order holds per partition of the events topic.
	pos := map[string]int{}
	for i, id := range order {
		pos[id] = i
	}
	recs := h.env.Records(t, h.env.Names.Events)
	last := map[int32]int{}
	for _, r := range recs {
		p := pos[string(r.Key)]
		if prev, ok := last[r.Partition]; ok && p < prev {
			t.Errorf("partition %d: %s delivered before an earlier event (order %v)", r.Partition, r.Key, order)
		}
		last[r.Partition] = p
	}
}

func TestSubscriptionsDisabled(t *testing.T) {
	tests := []struct {
		name   string
		status int
		cfg    dispatch.Config
		reason string
	}{
		{"410 Gone at once", http.StatusGone, dispatch.Config{}, "410 Gone"},
		{"failing longer than the schedule", http.StatusBadGateway, dispatch.Config{DisableAfter: 100 * time.Millisecond}, "no successful delivery for"},
		{"failing, circuit open, probes failing", http.StatusBadGateway, dispatch.Config{DisableAfter: 150 * time.Millisecond, BreakerFailures: 2}, "no successful delivery for"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Client.AllowPrivate = true
			h := newHarnessWith(t, tt.cfg)
			sink := newSubscriber(t, func(string, int) int { return tt.status })
			sub := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL})
			h.event(t, "shop", "order")
			kafkatest.WaitFor(t, 30*time.Second, func() error {
				got, err := h.registry.Get(context.Background(), sub.ID)
				if err != nil {
					return err
				}
				if got.Enabled || !strings.Contains(got.DisabledReason, tt.reason) {
					return fmt.Errorf("enabled %v reason %q", got.Enabled, got.DisabledReason)
				}
				return nil
			})
		})
	}
}

func TestPrivateTargetsRefused(t *testing.T) {
	h := newHarness(t, false)
	sink := newSubscriber(t, nil)
	h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL})
	h.event(t, "shop", "order")
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		dlq := h.env.Records(t, h.env.Names.DeliveryDLQ)
		if len(dlq) != 1 {
			return fmt.Errorf("delivery DLQ: %d records", len(dlq))
		}
		for _, hd := range dlq[0].Headers {
			if hd.Key == topics.HeaderError && strings.Contains(string(hd.Value), "127.0.0.1") {
				return nil
			}
		}
		return fmt.Errorf("DLQ error does not name the refused address: %v", dlq[0].Headers)
	})
	if n := len(sink.received()); n != 0 {
		t.Errorf("loopback subscriber got %d deliveries, want none", n)
	}
}

func TestRestartDeliversEverything(t *testing.T) {
	h := newHarness(t, true)
	sink := newSubscriber(t, nil)
	h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL})
	var ids []string
	for i := range 60 {
		ids = append(ids, h.event(t, "shop", "order"))
		if i == 20 {
			h.stop()
			h.start(t)
		}
	}
	sink.waitFor(t, ids, 30*time.Second)
}

func TestRotationSignsWithBothSecrets(t *testing.T) {
	h := newHarness(t, true)
	sink := newSubscriber(t, nil)
	sub := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL})
	old := sub.Secret
	sub, err := h.registry.Update(context.Background(), sub.ID, func(s *subscriptions.Subscription) error {
		s.Rotate("", time.Now())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The dispatcher follows the change: wait for a delivery signed twice.
	var signed delivery
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		sink.waitFor(t, []string{h.event(t, "shop", "order")}, 10*time.Second)
		sink.mu.Lock()
		defer sink.mu.Unlock()
		signed = sink.got[len(sink.got)-1]
		if n := len(strings.Fields(signed.sig)); n != 2 {
			return fmt.Errorf("delivery signed %d times", n)
		}
		return nil
	})
	for _, secret := range []string{old, sub.Secret} {
		if !verify(secret, signed.id, signed.ts, signed.sig, signed.body) {
			t.Errorf("during the overlap, %q does not verify with secret %s…", signed.sig, secret[:10])
		}
	}
}
