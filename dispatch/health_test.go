package dispatch_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
)

// failing is the failing subscriptions the first dispatcher's readiness
// detail lists.
func (h *harness) failing(t *testing.T) map[string]subscriptions.Failing {
	t.Helper()
	f, _ := h.ready(t)["failing"].(map[string]subscriptions.Failing)
	return f
}

// TestFailingSubscriptionsSayWhy: a subscriber answering 401, a host that
// does not resolve and a transform that fails on every event each make
// their subscription failing, with the reason, in the readiness detail and
// the hookstream_delivery_subscription_failing gauge; the first success
// clears it.
func TestFailingSubscriptionsSayWhy(t *testing.T) {
	status := new(atomic.Int32)
	status.Store(http.StatusUnauthorized)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(int(status.Load()))
	}))
	t.Cleanup(receiver.Close)
	h := newHarness(t, true)
	for _, tc := range []struct {
		name string
		sub  subscriptions.Subscription
		want string // the reason's start
	}{
		{"401", subscriptions.Subscription{URL: receiver.URL}, "401 Unauthorized"},
		{"unresolvable host", subscriptions.Subscription{URL: "http://no-such-host.invalid/hook"}, "host does not resolve: no-such-host.invalid"},
		{"transform", subscriptions.Subscription{URL: receiver.URL, Transform: `{"by": data.sender.login}`}, "transform error: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status.Store(http.StatusUnauthorized)
			sub := h.subscribe(t, tc.sub)
			for range subscriptions.FailingAfter {
				h.event(t, "github", "push")
			}
			kafkatest.WaitFor(t, 30*time.Second, func() error {
				f, ok := h.failing(t)[sub.ID]
				if !ok || !strings.HasPrefix(f.Reason, tc.want) || f.Failures < subscriptions.FailingAfter {
					return fmt.Errorf("failing: got %+v (listed %v), want a reason starting %q", f, ok, tc.want)
				}
				return nil
			})
			if v := h.subGauge(t, "hookstream_delivery_subscription_failing", sub.ID); v != 1 {
				t.Errorf("hookstream_delivery_subscription_failing: got %v, want 1", v)
			}

			status.Store(http.StatusNoContent)
			if _, err := h.registry.Update(context.Background(), sub.ID, func(s *subscriptions.Subscription) error {
				s.URL, s.Transform = receiver.URL, ""
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			kafkatest.WaitFor(t, 30*time.Second, func() error {
				h.event(t, "github", "push")
				if f, ok := h.failing(t)[sub.ID]; ok {
					return fmt.Errorf("still failing after a success: %+v", f)
				}
				return nil
			})
			if v := h.subGauge(t, "hookstream_delivery_subscription_failing", sub.ID); v != 0 {
				t.Errorf("hookstream_delivery_subscription_failing after a success: got %v, want 0", v)
			}
		})
	}
}
