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

// TestPreparationIsBounded: a poll of many large records is prepared
// (state read, envelope built) no further than prepareAhead records ahead
// of the record being decided, however slowly the decisions come; and a
// record whose state, or an earlier record of its key in the poll, makes
// it a duplicate gets no envelope.
func TestPreparationIsBounded(t *testing.T) {
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
	body := `{"pad":"` + strings.Repeat("x", 200<<10) + `"}`
	const n = 5 * prepareAhead
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
			// Let the preparation get ahead: by a full chunk and a queue
			// of chunks (of one record at least), or to the last record.
			kafkatest.WaitFor(t, 10*time.Second, func() error {
				if got := prepared.Load(); got < n && got-taken.Load() < prepareChunk+prepareQueue {
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
	if got := ahead.Load(); got > prepareAhead {
		t.Errorf("records prepared ahead of the decisions: got up to %d, want at most %d", got, prepareAhead)
	}
}
