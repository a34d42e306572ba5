package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/statestore"
	"github.com/hookstream/hookstream/topics"
)

// TestStateRecordGuard: a state whose changelog record is exactly the
// record limit is written whole; at one byte over, the write is refused
// and counted, and the state is written without its least recently
// attempted delivery, counted as omitted; a key that leaves no room even
// for a state without deliveries is refused with ErrTooLarge.
func TestStateRecordGuard(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	st := statestore.State{Status: statestore.Done, FirstSeen: now, Expires: now.Add(time.Hour)}
	for i := range 3 {
		record(&st, &topics.Attempt{Subscription: fmt.Sprintf("sub_%d", i), N: 1, Outcome: topics.OutcomeFailed, Status: 503, At: now, Error: "status 503"})
	}
	key := []byte("shop:e1")
	value, _ := st.MarshalBinary()
	whole := topics.RecordBytes(&kgo.Record{Key: key, Value: value})
	tests := []struct {
		name        string
		limit       int64
		wantKept    int // -1: refused
		wantRefused int
	}{
		{"at the limit", whole, 3, 0},
		{"a byte over", whole - 1, 2, 1},
		{"no room for the key", int64(topics.RecordFraming + len(key)), -1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New(Config{Names: topics.NewNames("guard"), MaxRecordBytes: tt.limit}, nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
			tx := newTxn(p, nil)
			got := st
			cl, err := tx.stateRecord(context.Background(), 0, key, &got)
			if tx.refused != tt.wantRefused {
				t.Errorf("refused: got %d, want %d", tx.refused, tt.wantRefused)
			}
			if tt.wantKept < 0 {
				if !errors.Is(err, statestore.ErrTooLarge) {
					t.Errorf("got %v, want ErrTooLarge", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := topics.RecordBytes(cl); n > tt.limit || len(got.Deliveries) != tt.wantKept || got.Omitted != uint32(3-tt.wantKept) ||
				got.Deliveries[len(got.Deliveries)-1].Subscription != "sub_2" {
				t.Errorf("got a record of %d bytes, %d deliveries (last %s), %d omitted; want at most %d bytes, the last %d deliveries, %d omitted",
					n, len(got.Deliveries), got.Deliveries[len(got.Deliveries)-1].Subscription, got.Omitted, tt.limit, tt.wantKept, 3-tt.wantKept)
			}
		})
	}
}
