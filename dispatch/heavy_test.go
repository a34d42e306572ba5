package dispatch_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/webhook"
)

// heavyFilter costs tens of milliseconds on heavyData, and matches.
const heavyFilter = `data.items.all(i, i.n >= 0 && i.n < 1000000) && data.items.all(i, i.n != 7777777 && i.n != 8888888) && data.items.exists(i, i.n == 5999)`

// heavyData is a 48 KB payload of 6,000 small objects, which heavyFilter
// walks whole.
func heavyData() string {
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := range 6000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"n":%d}`, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

// TestExpensiveFilterDelaysOnlyItsSubscription: a subscription whose
// filter costs tens of milliseconds an event shares the dispatcher with a
// plain one, each a webhook or a topic subscription. The plain one
// receives all 150 events while the heavy one has received fewer than
// half: the filter's cost falls on its own subscription, whose cursor
// falls behind and catches up, never on the read the two share (nor, for
// topic subscriptions, on the transactions they share).
func TestExpensiveFilterDelaysOnlyItsSubscription(t *testing.T) {
	for _, c := range []struct{ name, heavy, plain string }{
		{"webhooks", "webhook", "webhook"},
		{"heavy topic", "topic", "webhook"},
		{"plain topic", "webhook", "topic"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, true)
			sink := newFanSink(t, func(string) int { return http.StatusOK })
			// received counts the events a subscription of kind has had.
			subscribe := func(kind, name, filter string) func() int {
				if kind == "topic" {
					s := h.subscribe(t, subscriptions.Subscription{Topic: h.env.Names.Prefix + "-" + name, Filter: filter})
					return func() int { return len(h.env.Records(t, topics.Topic(s.Topic))) }
				}
				h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL + "/" + name, Filter: filter})
				return func() int {
					sink.mu.Lock()
					defer sink.mu.Unlock()
					return len(sink.got[name])
				}
			}
			plain := subscribe(c.plain, "plain", "")
			heavy := subscribe(c.heavy, "heavy", heavyFilter)

			// Written at once: the dispatcher reads them in a few fetches.
			data := heavyData()
			const events = 150
			var recs []*kgo.Record
			for range events {
				_, rec := h.eventRecord(t, "shop", "order", data)
				recs = append(recs, rec)
			}
			if err := h.cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			kafkatest.WaitFor(t, 120*time.Second, func() error {
				if n := plain(); n < events {
					return fmt.Errorf("plain subscription: %d of %d events", n, events)
				}
				return nil
			})
			if n := heavy(); n >= events/2 {
				t.Errorf("the heavy subscription had received %d of %d events when the plain one had them all, want fewer than %d: the plain one waits for the heavy filter", n, events, events/2)
			}
			// The heavy subscription catches up.
			kafkatest.WaitFor(t, 120*time.Second, func() error {
				if n := heavy(); n < events {
					return fmt.Errorf("heavy subscription: %d of %d events", n, events)
				}
				return nil
			})
		})
	}
}

// TestExpressionBudgetThrottles: a subscription whose filter spends more
// than its share of a core is throttled, which its metric counts and the
// dispatcher's readiness names; it still receives every event, later, and
// a plain subscription beside it is not held back.
func TestExpressionBudgetThrottles(t *testing.T) {
	h := newHarnessWith(t, dispatch.Config{Client: webhook.Config{AllowPrivate: true},
		ExprShare: 0.1, ExprWindow: 500 * time.Millisecond}) // 50 ms of evaluation, then 100 ms a second
	sink := newFanSink(t, func(string) int { return http.StatusOK })
	h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL + "/plain"})
	heavy := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL + "/heavy", Filter: heavyFilter})

	data := heavyData()
	const events = 20
	var ids []string
	var recs []*kgo.Record
	for range events {
		id, rec := h.eventRecord(t, "shop", "order", data)
		ids, recs = append(ids, id), append(recs, rec)
	}
	if err := h.cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		if n, example := sink.missing([]string{"plain"}, ids); n > 0 {
			return fmt.Errorf("plain subscriber: %d of %d events missing, %s among them", n, events, example)
		}
		return nil
	})
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if got := h.counter(t, "hookstream_delivery_expr_throttled_seconds_total", heavy.ID); got <= 0 {
			return fmt.Errorf("hookstream_delivery_expr_throttled_seconds_total %v, want above 0", got)
		}
		if got := h.ready(t)["throttled"]; !slices.Equal(got.([]string), []string{heavy.ID}) {
			return fmt.Errorf("readiness throttled %v, want [%s]", got, heavy.ID)
		}
		return nil
	})
	if got := h.counter(t, "hookstream_delivery_expr_seconds_total", heavy.ID); got <= 0 {
		t.Errorf("hookstream_delivery_expr_seconds_total %v, want above 0", got)
	}
	kafkatest.WaitFor(t, 180*time.Second, func() error {
		if n, example := sink.missing([]string{"heavy"}, ids); n > 0 {
			return fmt.Errorf("heavy subscriber: %d of %d events missing, %s among them", n, events, example)
		}
		return nil
	})
}
