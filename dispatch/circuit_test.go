package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/webhook"
)

func (h *harness) get(t *testing.T, id string) subscriptions.Subscription {
	t.Helper()
	s, err := h.registry.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return s
}

// TestFlakySubscriberDeliversEverything: a subscriber failing the first
// two tries of every event opens the circuit; refused attempts are no
// attempts, so every event is delivered on its third try, nothing is
// dead-lettered and the subscription stays enabled (schedule 1s,1s,1s
// scaled down, breaker cooldown at its default), whether retries go
// through the retry topic or happen in place. Disable-after is not scaled
// down with the schedule: on a loaded machine the first success can come
// later than the schedule's sum after the first failure.
func TestFlakySubscriberDeliversEverything(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			schedule := []time.Duration{300 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond}
			h := newHarnessWith(t, dispatch.Config{
				Client:          webhook.Config{AllowPrivate: true},
				Schedule:        schedule,
				BreakerFailures: 5,
				DisableAfter:    time.Minute,
			})
			var ok sync.Map
			sink := newSubscriber(t, func(id string, n int) int {
				if n <= 2 {
					return http.StatusInternalServerError
				}
				ok.Store(id, true)
				return http.StatusOK
			})
			sub := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL, Ordered: ordered})
			var ids []string
			for range 20 {
				ids = append(ids, h.event(t, "shop", "order"))
			}
			kafkatest.WaitFor(t, 60*time.Second, func() error {
				for _, id := range ids {
					if _, done := ok.Load(id); !done {
						return fmt.Errorf("%s not delivered; tries so far %v; dead letters %d", id, sink.received()[id], len(h.env.Records(t, h.env.Names.DeliveryDLQ)))
					}
				}
				return nil
			})
			for id, n := range sink.received() {
				if n < 3 {
					t.Errorf("%s: %d tries, want at least 3", id, n)
				}
			}
			if dlq := h.env.Records(t, h.env.Names.DeliveryDLQ); len(dlq) != 0 {
				t.Errorf("delivery DLQ: got %d records (first: %v), want none", len(dlq), kafkatest.Headers(dlq[0]))
			}
			if s := h.get(t, sub.ID); !s.Enabled {
				t.Errorf("subscription disabled (%s), want enabled", s.DisabledReason)
			}
		})
	}
}

// TestDeadLetterCarriesLastRealStatus: an always failing subscriber trips
// the circuit at once, yet each event gets every attempt of the schedule
// and its dead letter carries the subscriber's own answer.
func TestDeadLetterCarriesLastRealStatus(t *testing.T) {
	h := newHarnessWith(t, dispatch.Config{Client: webhook.Config{AllowPrivate: true}, BreakerFailures: 2})
	sink := newSubscriber(t, func(string, int) int { return http.StatusInternalServerError })
	sub := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL})
	var ids []string
	for range 10 {
		ids = append(ids, h.event(t, "shop", "order"))
	}
	var dlq []*kgo.Record
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		dlq = h.env.Records(t, h.env.Names.DeliveryDLQ)
		if len(dlq) < len(ids) {
			return fmt.Errorf("delivery DLQ: %d of %d", len(dlq), len(ids))
		}
		return nil
	})
	attempts := 1 + len(testSchedule)
	for _, r := range dlq {
		hd := kafkatest.Headers(r)
		if hd[topics.HeaderLastStatus] != "500" || hd[topics.HeaderAttempts] != strconv.Itoa(attempts) ||
			!strings.Contains(hd[topics.HeaderError], "500") || strings.Contains(hd[topics.HeaderError], "circuit") {
			t.Errorf("dead letter %s: headers %v, want last status 500, its error, %d attempts", r.Key, hd, attempts)
		}
	}
	for _, id := range ids {
		if n := sink.received()[id]; n != attempts {
			t.Errorf("%s reached the subscriber %d times, want %d", id, n, attempts)
		}
	}
	if s := h.get(t, sub.ID); !s.Enabled {
		t.Errorf("subscription disabled (%s), want enabled: DisableAfter is an hour", s.DisabledReason)
	}
}

// TestReenableResumesWaitingEvents: a subscription disabled for failing
// keeps its pending retries and new events waiting; enabled again with a
// healthy subscriber, it delivers all of them and stays enabled.
func TestReenableResumesWaitingEvents(t *testing.T) {
	h := newHarnessWith(t, dispatch.Config{
		Client:          webhook.Config{AllowPrivate: true},
		Schedule:        []time.Duration{150 * time.Millisecond, 150 * time.Millisecond, 150 * time.Millisecond, 150 * time.Millisecond},
		BreakerFailures: 2,
		DisableAfter:    250 * time.Millisecond,
	})
	var healthy atomic.Bool
	sink := newSubscriber(t, func(string, int) int {
		if healthy.Load() {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})
	sub := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL})
	var ids []string
	for range 5 {
		ids = append(ids, h.event(t, "shop", "order"))
	}
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if s := h.get(t, sub.ID); s.Enabled {
			return errors.New("still enabled")
		}
		return nil
	})
	for range 3 {
		ids = append(ids, h.event(t, "shop", "order"))
	}
	healthy.Store(true)
	if _, err := h.registry.Update(context.Background(), sub.ID, func(s *subscriptions.Subscription) error {
		subscriptions.Patch{Enabled: new(true)}.Apply(s)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var delivered []string
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		delivered = delivered[:0]
		sink.mu.Lock()
		defer sink.mu.Unlock()
		got := map[string]bool{}
		for _, d := range sink.got {
			got[d.id] = true
		}
		for _, id := range ids {
			if !got[id] {
				return fmt.Errorf("%s not delivered after enable", id)
			}
		}
		return nil
	})
	// Every event must end delivered: none waits in the DLQ.
	if dlq := h.env.Records(t, h.env.Names.DeliveryDLQ); len(dlq) != 0 {
		t.Errorf("delivery DLQ: got %d records (first: %v), want none", len(dlq), kafkatest.Headers(dlq[0]))
	}
	if s := h.get(t, sub.ID); !s.Enabled {
		t.Errorf("subscription disabled again (%s), want enabled", s.DisabledReason)
	}
}

// TestDisableRacingOperator: the dispatcher disables a subscription (410
// Gone) just as an operator edits or deletes it; the operator's change
// stands: the edit is kept, the deleted subscription stays deleted.
func TestDisableRacingOperator(t *testing.T) {
	tests := []struct {
		name     string
		operator func(r *subscriptions.Registry, id string) error
		check    func(t *testing.T, r *subscriptions.Registry, id string)
	}{
		{"edit", func(r *subscriptions.Registry, id string) error {
			_, err := r.Update(context.Background(), id, func(s *subscriptions.Subscription) error {
				s.Description = "edited by the operator"
				return nil
			})
			return err
		}, func(t *testing.T, r *subscriptions.Registry, id string) {
			s, err := r.Get(context.Background(), id)
			if err != nil || s.Description != "edited by the operator" {
				t.Errorf("after the race: %+v %v, want the operator's description", s.Redacted(), err)
			}
		}},
		{"delete", func(r *subscriptions.Registry, id string) error {
			return r.Delete(context.Background(), id)
		}, func(t *testing.T, r *subscriptions.Registry, id string) {
			if s, err := r.Get(context.Background(), id); !errors.Is(err, subscriptions.ErrNotFound) {
				t.Errorf("deleted subscription came back: %+v %v", s.Redacted(), err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, true)
			var id atomic.Value
			var once sync.Once
			var raced atomic.Bool
			sink := newSubscriber(t, func(string, int) int {
				once.Do(func() {
					if err := tt.operator(h.registry, id.Load().(string)); err != nil {
						t.Errorf("operator: %v", err)
					}
					raced.Store(true)
				})
				return http.StatusGone
			})
			sub := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL})
			id.Store(sub.ID)
			h.event(t, "shop", "order")
			kafkatest.WaitFor(t, 30*time.Second, func() error {
				if !raced.Load() {
					return errors.New("no delivery yet")
				}
				return nil
			})
			// What must not happen is a later write: watch for one.
			for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end) && !t.Failed(); {
				tt.check(t, h.registry, sub.ID)
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}
