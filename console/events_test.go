package console_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/topics"
)

// order is the order in which keys appear in body, an error naming the
// first missing.
func order(body string, keys ...string) ([]int, error) {
	var at []int
	for _, k := range keys {
		i := strings.Index(body, k)
		if i < 0 {
			return nil, fmt.Errorf("no %s on the page", k)
		}
		at = append(at, i)
	}
	return at, nil
}

// TestEventsPageOrder: the events page opens on the newest events,
// newest first, and a search lists its events oldest first; both in the
// order the events were written, across partitions whose offset order
// is not that order.
func TestEventsPageOrder(t *testing.T) {
	env := kafkatest.New(t, 2, 1<<20)
	h := serve(t, options{token: token, env: env})
	b := h.browser(t)
	b.signIn()
	cl := env.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	// Partition 0 holds the first and the last written, partition 1 the
	// two between.
	for _, e := range []struct {
		id        string
		partition int32
		sec       int
	}{{"w1", 0, 1}, {"w4", 0, 4}, {"w2", 1, 2}, {"w3", 1, 3}} {
		rec := kafkatest.IngestRecord(env.Names, "shop", e.id, `{"n":1}`)
		envl, err := topics.NewEnvelope(rec, base.Add(time.Duration(e.sec)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		out, err := topics.EventRecord(env.Names.Events, rec, envl)
		if err != nil {
			t.Fatal(err)
		}
		out.Partition, out.Timestamp = e.partition, base.Add(time.Duration(e.sec)*time.Second)
		if err := cl.ProduceSync(ctx, out).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/ui/events", []string{"shop:w4", "shop:w3", "shop:w2", "shop:w1"}},
		{"/ui/events?search=1&since=1h", []string{"shop:w1", "shop:w2", "shop:w3", "shop:w4"}},
	} {
		a := b.get(tc.path)
		if a.status != http.StatusOK {
			t.Fatalf("GET %s: got %d, want 200", tc.path, a.status)
		}
		at, err := order(a.body, tc.want...)
		if err != nil {
			t.Errorf("GET %s: %v", tc.path, err)
			continue
		}
		for i := 1; i < len(at); i++ {
			if at[i] < at[i-1] {
				t.Errorf("GET %s: %s before %s, want %v in that order", tc.path, tc.want[i], tc.want[i-1], tc.want)
			}
		}
	}
}
