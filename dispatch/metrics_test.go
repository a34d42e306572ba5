package dispatch_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/webhook"
)

// subGauge reads the gauge name of one subscription from the first
// dispatcher's registry; -1 when it has no such series.
func (h *harness) subGauge(t *testing.T, name, sub string) float64 {
	t.Helper()
	mfs, err := h.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "subscription" && l.GetValue() == sub {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// TestSubscriptionStateMetrics: each subscription exports whether its
// circuit is open and whether hookstream disabled it, so alerts can name
// the subscription; a healthy one exports zeros.
func TestSubscriptionStateMetrics(t *testing.T) {
	h := newHarnessWith(t, dispatch.Config{
		Client:          webhook.Config{AllowPrivate: true},
		Schedule:        []time.Duration{time.Second, time.Second},
		BreakerFailures: 1,
		DisableAfter:    1500 * time.Millisecond,
	})
	failing := newSubscriber(t, func(string, int) int { return http.StatusInternalServerError })
	bad := h.subscribe(t, subscriptions.Subscription{URL: failing.srv.URL})
	healthy := newSubscriber(t, nil)
	good := h.subscribe(t, subscriptions.Subscription{URL: healthy.srv.URL})
	for range 3 {
		h.event(t, "shop", "order")
	}
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if v := h.subGauge(t, "hookstream_delivery_circuit_open", bad.ID); v != 1 {
			return fmt.Errorf("circuit_open of %s: %v, want 1", bad.ID, v)
		}
		return nil
	})
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if v := h.subGauge(t, "hookstream_delivery_subscription_disabled", bad.ID); v != 1 {
			return fmt.Errorf("subscription_disabled of %s: %v, want 1", bad.ID, v)
		}
		return nil
	})
	for _, name := range []string{"hookstream_delivery_circuit_open", "hookstream_delivery_subscription_disabled"} {
		if v := h.subGauge(t, name, good.ID); v != 0 {
			t.Errorf("%s of the healthy subscription: got %v, want 0", name, v)
		}
	}
}
