package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/processor"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/webhook"
)

// runProcessor runs a processor on h's broker: operational events reach
// the events topic through it.
func (h *harness) runProcessor(t *testing.T) {
	t.Helper()
	p := processor.New(processor.Config{
		Names:           h.env.Names,
		StateDir:        t.TempDir(),
		MaxRecordBytes:  topics.MaxRecordBytes(1 << 20),
		TransactionalID: h.env.Names.Prefix + "-processor-ops",
		SessionTimeout:  6 * time.Second,
	}, []kgo.Opt{kgo.SeedBrokers(h.env.Seeds...)}, kafkatest.Logger(t), prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("processor Run: %v", err)
		}
	})
}

// opEvent is an operational event as the events topic holds it.
type opEvent struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	Data struct {
		SubscriptionID string `json:"subscription_id"`
		Reason         string `json:"reason"`
		Event          string `json:"event"`
		Attempts       int    `json:"attempts"`
		LastStatus     int    `json:"last_status"`
		At             string `json:"at"`
	} `json:"data"`
}

// opEvents reads the operational events of the events topic.
func (h *harness) opEvents(t *testing.T) []opEvent {
	t.Helper()
	var out []opEvent
	for _, r := range h.env.Records(t, h.env.Names.Events) {
		if source, _ := topics.EventSourceType(r); source != topics.OperationalSource {
			continue
		}
		var e opEvent
		if err := json.Unmarshal(r.Value, &e); err != nil {
			t.Fatalf("operational event %s: %v", r.Value, err)
		}
		out = append(out, e)
	}
	return out
}

// count counts the events of type about subscription sub.
func count(evs []opEvent, typ, sub string) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ && e.Data.SubscriptionID == sub {
			n++
		}
	}
	return n
}

// TestOperationalEvents: a subscriber failing past the disable-after time
// yields exactly one subscription.disabled event, a circuit.opened, and a
// delivery.dead_lettered per dead letter; enabling it yields exactly one
// subscription.enabled. A subscription that names source hookstream
// receives them; the failing one, though it names hookstream too, never
// receives those about itself; one without a source filter receives none.
func TestOperationalEvents(t *testing.T) {
	h := newHarnessWith(t, dispatch.Config{
		Client:          webhook.Config{AllowPrivate: true},
		Schedule:        []time.Duration{100 * time.Millisecond, 100 * time.Millisecond},
		BreakerFailures: 2,
		BreakerCooldown: 100 * time.Millisecond,
		DisableAfter:    600 * time.Millisecond,
	})
	h.runProcessor(t)
	notifier := newSubscriber(t, nil)
	h.subscribe(t, subscriptions.Subscription{URL: notifier.srv.URL, Sources: []string{topics.OperationalSource}})
	everything := newSubscriber(t, nil)
	h.subscribe(t, subscriptions.Subscription{URL: everything.srv.URL})
	var healthy atomic.Bool
	failing := newSubscriber(t, func(string, int) int {
		if healthy.Load() {
			return http.StatusOK
		}
		return http.StatusInternalServerError
	})
	sub := h.subscribe(t, subscriptions.Subscription{URL: failing.srv.URL, Sources: []string{"shop", topics.OperationalSource}})

	var ids []string
	for range 4 {
		ids = append(ids, h.event(t, "shop", "order"))
	}
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		if s := h.get(t, sub.ID); s.Enabled {
			return fmt.Errorf("%s still enabled", sub.ID)
		}
		return nil
	})
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		evs := h.opEvents(t)
		if n := count(evs, topics.OpSubscriptionDisabled, sub.ID); n == 0 {
			return fmt.Errorf("no %s event yet (%d operational events)", topics.OpSubscriptionDisabled, len(evs))
		}
		if n := count(evs, topics.OpCircuitOpened, sub.ID); n == 0 {
			return fmt.Errorf("no %s event yet", topics.OpCircuitOpened)
		}
		return nil
	})

	healthy.Store(true)
	if _, err := h.registry.Update(context.Background(), sub.ID, func(s *subscriptions.Subscription) error {
		subscriptions.Patch{Enabled: new(true)}.Apply(s)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	failing.waitFor(t, ids, 60*time.Second)
	var evs []opEvent
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		evs = h.opEvents(t)
		if count(evs, topics.OpSubscriptionEnabled, sub.ID) == 0 {
			return fmt.Errorf("no %s event yet", topics.OpSubscriptionEnabled)
		}
		got := notifier.received()
		for _, e := range evs {
			if got[e.ID] == 0 {
				return fmt.Errorf("notifier has not received %s (%s)", e.ID, e.Type)
			}
		}
		return nil
	})

	if n := count(evs, topics.OpSubscriptionDisabled, sub.ID); n != 1 {
		t.Errorf("%s events about %s: got %d, want exactly 1", topics.OpSubscriptionDisabled, sub.ID, n)
	}
	if n := count(evs, topics.OpSubscriptionEnabled, sub.ID); n != 1 {
		t.Errorf("%s events about %s: got %d, want exactly 1", topics.OpSubscriptionEnabled, sub.ID, n)
	}
	var letters []string
	for _, r := range h.env.Records(t, h.env.Names.DeliveryDLQ) {
		if kafkatest.Headers(r)[topics.HeaderSubscription] == sub.ID {
			letters = append(letters, strings.TrimPrefix(string(r.Key), sub.ID+":"))
		}
	}
	if len(letters) == 0 {
		t.Fatalf("no delivery dead letters of %s: the test needs some", sub.ID)
	}
	dead := map[string]int{}
	for _, e := range evs {
		if e.Type == topics.OpDeliveryDeadLettered && e.Data.SubscriptionID == sub.ID {
			dead[e.Data.Event]++
			if e.Data.Attempts == 0 || e.Data.LastStatus != http.StatusInternalServerError {
				t.Errorf("%s: attempts %d, last status %d; want the dead letter's", e.ID, e.Data.Attempts, e.Data.LastStatus)
			}
		}
	}
	for _, event := range letters {
		if dead[event] != 1 {
			t.Errorf("%s events for dead letter %s: got %d, want 1", topics.OpDeliveryDeadLettered, event, dead[event])
		}
	}
	if len(dead) != len(letters) {
		t.Errorf("%s events: got %v, want one per dead letter %v", topics.OpDeliveryDeadLettered, dead, letters)
	}
	for _, e := range evs {
		if !strings.HasPrefix(e.ID, topics.OperationalSource+":"+e.Type+"-") || e.Data.At == "" {
			t.Errorf("operational event %s (%s): want id hookstream:<type>-<hash> and an at", e.ID, e.Type)
		}
	}
	for id := range failing.received() {
		if strings.HasPrefix(id, topics.OperationalSource+":") {
			t.Errorf("failing subscription received %s, an operational event about itself", id)
		}
	}
	for id := range everything.received() {
		if strings.HasPrefix(id, topics.OperationalSource+":") {
			t.Errorf("subscription without a source filter received operational event %s", id)
		}
	}
}

// TestCircuitEvents: a subscriber that fails twice and then answers opens
// its subscription's circuit once and closes it once (its failed probes
// open nothing again); a subscription that names source hookstream
// receives both events, the subscription they are about does not.
func TestCircuitEvents(t *testing.T) {
	h := newHarnessWith(t, dispatch.Config{
		Client:          webhook.Config{AllowPrivate: true},
		Schedule:        []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond},
		BreakerFailures: 2,
		BreakerCooldown: 100 * time.Millisecond,
	})
	h.runProcessor(t)
	notifier := newSubscriber(t, nil)
	h.subscribe(t, subscriptions.Subscription{URL: notifier.srv.URL, Sources: []string{topics.OperationalSource}})
	flaky := newSubscriber(t, func(_ string, n int) int {
		if n <= 3 { // two failures open the circuit, the first probe fails too
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	sub := h.subscribe(t, subscriptions.Subscription{URL: flaky.srv.URL, Sources: []string{"shop", topics.OperationalSource}})
	id := h.event(t, "shop", "order")
	var evs []opEvent
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		if flaky.received()[id] < 4 {
			return fmt.Errorf("%s: %d attempts, want 4", id, flaky.received()[id])
		}
		evs = h.opEvents(t)
		if count(evs, topics.OpCircuitClosed, sub.ID) == 0 {
			return fmt.Errorf("no %s event yet (%d operational events)", topics.OpCircuitClosed, len(evs))
		}
		for _, e := range evs {
			if notifier.received()[e.ID] == 0 {
				return fmt.Errorf("notifier has not received %s (%s)", e.ID, e.Type)
			}
		}
		return nil
	})
	for _, typ := range []string{topics.OpCircuitOpened, topics.OpCircuitClosed} {
		if n := count(evs, typ, sub.ID); n != 1 {
			t.Errorf("%s events about %s: got %d, want exactly 1", typ, sub.ID, n)
		}
	}
	for got := range flaky.received() {
		if strings.HasPrefix(got, topics.OperationalSource+":") {
			t.Errorf("%s received %s, an operational event about itself", sub.ID, got)
		}
	}
}
