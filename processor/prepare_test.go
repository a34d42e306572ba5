package processor

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/statestore"
	"github.com/hookstream/hookstream/topics"
)

// TestPreparationIsBounded: a poll is prepared (state read, envelope
// built) no further ahead of the record being decided than prepareAhead
// records, nor than its chunks' bytes allow, however slowly the decisions
// come; and a record whose state, or an earlier record of its key in the
// poll, makes it a duplicate gets no envelope.
func TestPreparationIsBounded(t *testing.T) {
	for _, tt := range []struct {
		name string
		body int // bytes of each record's body
		// ahead is the bound: by records for small ones; for large ones,
		// the records that chunks cut at prepareChunkBytes can hold: the
		// chunk being decided, the queue and the one being prepared.
		ahead int64
	}{
		{"small records", 2 << 10, prepareAhead},
		{"large records", 200 << 10, (prepareQueue + 2) * (prepareChunkBytes/(200<<10) + 1)},
	} {
		t.Run(tt.name, func(t *testing.T) { testPreparationBound(t, tt.body, tt.ahead) })
	}
}

func testPreparationBound(t *testing.T, bodyBytes int, bound int64) {
	names := topics.NewNames("bound")
	p := New(Config{Names: names, MaxRecordBytes: topics.MaxRecordBytes(1 << 20)}, nil, kafkatest.Logger(t), prometheus.NewRegistry())
	store, err := statestore.Open(t.TempDir(), 0, statestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	// Key e0 is in the store, processed at another offset: a duplicate.
	now := time.Now().UTC()
	if err := store.Apply([]statestore.Change{{Key: []byte("shop:e0"), State: &statestore.State{
		Status: statestore.Done, Partition: 0, Offset: 1 << 40, FirstSeen: now, Expires: now.Add(time.Hour), ReceivedAt: now,
	}}}, 1); err != nil {
		t.Fatal(err)
	}
	body := `{"pad":"` + strings.Repeat("x", bodyBytes) + `"}`
	const n = 3 * prepareAhead
	records := make([]*kgo.Record, n)
	for i := range records {
		// The second record and every tenth repeat the one before.
		id := i - i%10/9
		if i == 1 {
			id = 0
		}
		records[i] = kafkatest.IngestRecord(names, "shop", fmt.Sprintf("e%d", id), body)
		records[i].Offset = int64(i)
	}

	// The preparing goroutine reads the clock once per record it
	// prepares: the clock counts them, and how far ahead of the records
	// taken each one is.
	var prepared, taken, ahead atomic.Int64
	p.now = func() time.Time {
		if a := prepared.Add(1) - taken.Load(); a > ahead.Load() {
			ahead.Store(a)
		}
		return time.Now()
	}
	pp := p.prepare(store, records)
	defer pp.stop()
	for i, r := range records {
		if i%prepareChunk == 0 {
			// Let the preparation get as far ahead as it will: until it
			// prepared every record or stopped, its count unchanged over
			// a few polls.
			last, still := int64(-1), 0
			kafkatest.WaitFor(t, 10*time.Second, func() error {
				got := prepared.Load()
				if got == last {
					still++
				} else {
					last, still = got, 0
				}
				if got < n && still < 5 {
					return fmt.Errorf("%d records prepared, %d taken", got, taken.Load())
				}
				return nil
			})
		}
		taken.Add(1) // before next lets the preparation go on
		pr := pp.next()
		dup := i <= 1 || i%10 == 9
		switch {
		case pr.built == dup:
			t.Errorf("record %d (%s): built %v, want %v", i, r.Key, pr.built, !dup)
		case pr.built && (pr.err != nil || pr.ev == nil):
			t.Errorf("record %d (%s): envelope %v, error %v", i, r.Key, pr.ev != nil, pr.err)
		}
	}
	if got := ahead.Load(); got > bound {
		t.Errorf("records prepared ahead of the decisions: got up to %d, want at most %d", got, bound)
	}
	t.Logf("records prepared ahead: up to %d (bound %d)", ahead.Load(), bound)
}
