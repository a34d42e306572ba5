package dispatch_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/topics"
)

// bulk writes n events to one partition of the events topic and returns
// their ids.
func (h *harness) bulk(t *testing.T, partition int32, n int) []string {
	t.Helper()
	cl := h.env.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ids := make([]string, 0, n)
	var wg sync.WaitGroup
	for range n {
		h.seq++
		id := "bulk:" + strconv.Itoa(h.seq)
		ids = append(ids, id)
		e := &topics.Envelope{ID: id, Source: "bulk", EventID: strconv.Itoa(h.seq), Type: "e",
			ReceivedAt: time.Now().UTC(), ProcessedAt: time.Now().UTC(), Data: []byte(`{}`)}
		v, err := e.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		cl.Produce(context.Background(), &kgo.Record{Topic: string(h.env.Names.Events), Partition: partition, Key: []byte(id), Value: v},
			func(_ *kgo.Record, err error) {
				defer wg.Done()
				if err != nil {
					t.Errorf("produce: %v", err)
				}
			})
	}
	wg.Wait()
	return ids
}

// assignment returns the partitions of topic each member of group holds.
func (h *harness) assignment(t *testing.T, group topics.Group, topic topics.Topic) [][]int32 {
	t.Helper()
	groups, err := kadm.NewClient(h.cl).DescribeGroups(context.Background(), string(group))
	if err != nil {
		t.Fatalf("describe %s: %v", group, err)
	}
	var out [][]int32
	for _, m := range groups[string(group)].Members {
		c, _ := m.Assigned.AsConsumer()
		for _, tp := range c.Topics {
			if tp.Topic == string(topic) {
				parts := append([]int32(nil), tp.Partitions...)
				sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
				out = append(out, parts)
			}
		}
	}
	return out
}

// gate is a subscriber that holds every request until opened.
type gate struct {
	open chan struct{}
	once sync.Once
}

func newGate(t *testing.T) *gate {
	g := &gate{open: make(chan struct{})}
	t.Cleanup(g.release)
	return g
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

func (g *gate) respond(string, int) int {
	<-g.open
	return http.StatusOK
}

// TestPausedPartitionResumesAfterRebalance: a slow subscriber fills the
// partition queues until their fetches pause; a second dispatcher joins
// and leaves, moving partitions away and back; every event is still
// delivered once the subscriber speeds up.
func TestPausedPartitionResumesAfterRebalance(t *testing.T) {
	h := newHarnessOn(t, kafkatest.New(t, 2, 1<<20), dispatch.Config{Client: dispatch.ClientConfig{AllowPrivate: true}})
	slow := newGate(t)
	sink := newSubscriber(t, slow.respond)
	// Over the queue's high mark in each partition: both pause.
	ids := append(h.bulk(t, 0, 2500), h.bulk(t, 1, 2500)...)
	sub := h.subscribe(t, dispatch.Subscription{URL: sink.srv.URL})
	group := h.env.Names.SubscriptionGroup(sub.ID)
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if got := sink.received(); !(got["bulk:1"] > 0 && got["bulk:2501"] > 0) {
			return fmt.Errorf("deliveries of both partitions not started: %d ids", len(got))
		}
		return nil
	})
	stop := h.another(t)
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if a := h.assignment(t, group, h.env.Names.Events); len(a) != 2 || len(a[0]) != 1 || len(a[1]) != 1 {
			return fmt.Errorf("assignment %v, want one partition each", a)
		}
		return nil
	})
	stop()
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if a := h.assignment(t, group, h.env.Names.Events); len(a) != 1 || len(a[0]) != 2 {
			return fmt.Errorf("assignment %v, want both partitions back with the first", a)
		}
		return nil
	})
	slow.release()
	sink.waitFor(t, ids, 60*time.Second)
}
