package dispatch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
)

// TestPullSubscriptionsAreNotDispatched: a dispatcher neither delivers
// nor moves the cursor of a pull subscription, whose consumers move it;
// a webhook subscription beside it receives every event.
func TestPullSubscriptionsAreNotDispatched(t *testing.T) {
	h := newHarness(t, true)
	sink := newSubscriber(t, nil)
	webhook := h.subscribe(t, subscriptions.Subscription{URL: sink.srv.URL})
	sink.secrets = []string{webhook.Secret}
	pull := h.subscribe(t, subscriptions.Subscription{Pull: true})
	var ids []string
	for range 6 {
		ids = append(ids, h.event(t, "shop", "order"))
	}
	sink.waitFor(t, ids, 30*time.Second)
	adm := kadm.NewClient(h.cl)
	cursor := func(id string) (map[int32]int64, error) {
		fetched, err := adm.FetchOffsets(context.Background(), string(h.env.Names.SubscriptionGroup(id)))
		if err != nil {
			return nil, err
		}
		out := make(map[int32]int64)
		fetched.Each(func(o kadm.OffsetResponse) { out[o.Partition] = o.At })
		return out, nil
	}
	// Once the webhook subscription's cursor is at the end, the round of
	// commits that moved it has passed the pull subscription by.
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		c, err := cursor(webhook.ID)
		if err != nil {
			return err
		}
		var n int64
		for _, o := range c {
			n += o
		}
		if n < int64(len(ids)) {
			return fmt.Errorf("webhook cursor %v, want past %d events", c, len(ids))
		}
		return nil
	})
	c, err := cursor(pull.ID)
	if err != nil {
		t.Fatal(err)
	}
	for p, o := range c {
		if o != 0 {
			t.Errorf("pull subscription's cursor on partition %d: got %d, want 0 (moved by its consumers only)", p, o)
		}
	}
}
