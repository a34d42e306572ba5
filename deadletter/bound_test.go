package deadletter

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/topics"
)

// TestListHoldsAtMostLimit: reading a DLQ of many letters with a limit,
// the selection never holds more than the limit, and ends with the newest.
func TestListHoldsAtMostLimit(t *testing.T) {
	env := kafkatest.New(t, 3, 64<<10)
	cl := env.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	const n, limit = 300, 5
	t0 := time.Now().Add(-time.Hour).UTC()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: string(env.Names.DLQ), Partition: int32(i % 3), Key: fmt.Appendf(nil, "shop:%03d", i), Value: []byte("{}"),
			Headers: []kgo.RecordHeader{
				{Key: topics.HeaderErrorStage, Value: []byte(topics.StageProcess)},
				{Key: topics.HeaderFailedAt, Value: []byte(t0.Add(time.Duration(i) * time.Second).Format(topics.TimeFormat))},
			}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	sel := newSelection(limit)
	read, peak := 0, 0
	err := scan(ctx, env.ClusterOf(cl), env.Names.DLQ, Processor, Filter{Limit: limit}, func(l Letter) {
		sel.add(l)
		read++
		peak = max(peak, sel.held.Len(), len(sel.at))
	}, sel.mark)
	if err != nil {
		t.Fatal(err)
	}
	if read != n || peak > limit {
		t.Errorf("scan of %d letters with limit %d: %d letters read, at most %d held; want %d read, at most %d held", n, limit, read, peak, n, limit)
	}
	var got []string
	for _, l := range sel.sorted() {
		got = append(got, l.Key)
	}
	if want := []string{"shop:295", "shop:296", "shop:297", "shop:298", "shop:299"}; !slices.Equal(got, want) {
		t.Errorf("held at the end: got %v, want %v", got, want)
	}
}
