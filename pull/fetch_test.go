package pull_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/pull"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// TestFollowsPartitionsAdded: partitions added to the events topic are
// read without a fetch failing first, from their start: their events
// reach a consumer presenting the cursor it had, which names the
// partitions it knew, on this server and on one started since.
func TestFollowsPartitionsAdded(t *testing.T) {
	h := newHarness(t, pull.Config{})
	sub := h.subscribe(t, subscriptions.Subscription{Pull: true})
	h.event(t, nil, "shop", "order")
	a := h.pull(t, sub.ID, sub.Secret, nil)
	if a.status != http.StatusOK || len(a.Events) != 1 {
		t.Fatalf("pull: got %d %s with %d events, want 200 with 1", a.status, a.Error, len(a.Events))
	}

	ctx := context.Background()
	resp, err := h.env.Admin(t).CreatePartitions(ctx, 2, string(h.env.Names.Events))
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("add partitions: %v", err)
	}
	producer := h.env.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var want []string
	for p := range int32(2) {
		rec := eventRecord(t, h.env.Names, "shop", fmt.Sprintf("new-%d", 3+p), "order", `{}`)
		rec.Partition = 3 + p
		kafkatest.WaitFor(t, 30*time.Second, func() error { return producer.ProduceSync(ctx, rec).FirstErr() })
		want = append(want, string(rec.Key))
	}

	served := func(cursor string) func() error {
		return func() error {
			b := h.pull(t, sub.ID, sub.Secret, cursorQuery(cursor, 0))
			if got := b.ids(t); b.status != http.StatusOK || !slices.Equal(slices.Sorted(slices.Values(got)), want) {
				return fmt.Errorf("with the cursor from before the partitions were added: got %d %s with %v, want 200 with %v", b.status, b.Error, got, want)
			}
			return nil
		}
	}
	kafkatest.WaitFor(t, 30*time.Second, served(a.Cursor))
	h.start(t, pull.Config{})
	kafkatest.WaitFor(t, 10*time.Second, served(a.Cursor))
}

// TestFollowsLeaderMove: once the leaders of the events partitions move
// to other brokers, the next pull is answered, not failed first.
func TestFollowsLeaderMove(t *testing.T) {
	if kafkatest.Real() {
		t.Skip("moves leaders in the in-process broker")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	env := &kafkatest.Env{Seeds: c.ListenAddrs(), Names: topics.NewNames("leadermove"), Cluster: c}
	env.Ensure(t, 3, 1<<20)
	h := newHarnessOn(t, env, pull.Config{})
	sub := h.subscribe(t, subscriptions.Subscription{Pull: true})
	h.event(t, nil, "shop", "order")
	a := h.pull(t, sub.ID, sub.Secret, nil)
	if a.status != http.StatusOK || len(a.Events) != 1 {
		t.Fatalf("pull: got %d %s with %d events, want 200 with 1", a.status, a.Error, len(a.Events))
	}
	topic := string(env.Names.Events)
	for p := range int32(3) {
		if err := c.MoveTopicPartition(topic, p, (c.LeaderFor(topic, p)+1)%3); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	for range 6 {
		want = append(want, h.event(t, nil, "shop", "order"))
	}
	b := h.pull(t, sub.ID, sub.Secret, cursorQuery(a.Cursor, 0))
	if b.status != http.StatusOK {
		t.Fatalf("the first pull after the leaders moved: got %d %s, want 200", b.status, b.Error)
	}
	h.checkOrder(t, b.ids(t), want)
}
