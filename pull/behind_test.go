package pull_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/pull"
	"github.com/hookstream/hookstream/subscriptions"
)

// behind is what the console and hookstream lag say sub's consumer has
// still to pull.
func (h *harness) behind(t *testing.T, sub string) string {
	t.Helper()
	lags, err := groups.New(h.env.ClusterOf(h.cl), h.registry).Lags(context.Background(), "sub:"+sub)
	if err != nil {
		t.Fatalf("lag of sub:%s: %v", sub, err)
	}
	return fmt.Sprintf("%d %s", lags[0].Total, lags[0].Unit)
}

// TestEventsBehindIsWhatThePullReturns: a pull subscription's lag is the
// events its next answer holds, each written in a transaction of its own
// as the processor writes them (a commit marker after each); and with
// its cursor gone (Kafka expires a group's offsets), where the consumer
// reads from then: the log start.
func TestEventsBehindIsWhatThePullReturns(t *testing.T) {
	h := newHarness(t, pull.Config{})
	sub := h.subscribe(t, subscriptions.Subscription{Pull: true})
	tx := h.transactional(t)
	for range 6 {
		h.event(t, tx, "shop", "order")
	}
	first := h.pull(t, sub.ID, sub.Secret, cursorQuery("", 1000))
	for range 12 {
		h.event(t, tx, "shop", "order")
	}
	// The first answer's cursor acknowledges its events: 12 are left.
	h.pull(t, sub.ID, sub.Secret, cursorQuery(first.Cursor, 1))
	if got, want := h.behind(t, sub.ID), "12 events"; got != want {
		t.Errorf("behind after 6 of 18 events: got %s, want %s", got, want)
	}
	if got, want := len(h.pull(t, sub.ID, sub.Secret, cursorQuery(first.Cursor, 1000)).Events), 12; got != want {
		t.Errorf("the next answer: got %d events, want %d", got, want)
	}

	// Without its cursor, the subscription reads from the log start.
	events := string(h.env.Names.Events)
	group := string(h.env.Names.SubscriptionGroup(sub.ID))
	if _, err := kadm.NewClient(h.cl).DeleteOffsets(context.Background(), group, kadm.TopicsSet{events: {0: {}, 1: {}, 2: {}}}); err != nil {
		t.Fatalf("delete the cursor: %v", err)
	}
	if got, want := h.behind(t, sub.ID), "18 events"; got != want {
		t.Errorf("behind without a cursor: got %s, want %s", got, want)
	}
	// The metric counts offsets, an upper bound of those 18 events, from
	// the same place.
	reg := prometheus.NewRegistry()
	reg.MustRegister(groups.NewCollector(groups.New(h.env.ClusterOf(h.cl), h.registry), kafkatest.Logger(t)))
	if got := metricLag(t, reg, group); got < 18 {
		t.Errorf("hookstream_consumer_group_lag of %s without a cursor: got %v, want at least the 18 events", group, got)
	}
	if got, want := len(h.pull(t, sub.ID, sub.Secret, cursorQuery("", 1000)).Events), 18; got != want {
		t.Errorf("the answer without a cursor: got %d events, want %d", got, want)
	}
}

// metricLag is hookstream_consumer_group_lag of group, summed over its
// topics, as reg exports it.
func metricLag(t *testing.T, reg *prometheus.Registry, group string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != "hookstream_consumer_group_lag" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "group" && l.GetValue() == group {
					sum += m.GetGauge().GetValue()
				}
			}
		}
	}
	return sum
}
