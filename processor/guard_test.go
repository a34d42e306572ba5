package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
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

// TestFoldLeavesTheStateItCopied: attempts folded into a key's story
// change the fold's copy only; the state it started from, which the
// pending changes of an earlier batch hold, keeps its deliveries, their
// order and their tries.
func TestFoldLeavesTheStateItCopied(t *testing.T) {
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	old := statestore.State{Status: statestore.Done, FirstSeen: now, Expires: now.Add(time.Hour)}
	for i := range 3 {
		record(&old, &topics.Attempt{Subscription: fmt.Sprintf("sub_%d", i), N: 1, Outcome: topics.OutcomeFailed, Status: 503, At: now})
	}
	before, err := old.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	f := folding(old)
	record(f, &topics.Attempt{Subscription: "sub_0", N: 2, Outcome: topics.OutcomeDelivered, Status: 204, At: now.Add(time.Second)})
	record(f, &topics.Attempt{Subscription: "sub_3", N: 1, Outcome: topics.OutcomeDelivered, Status: 204, At: now.Add(time.Second)})
	if after, _ := old.MarshalBinary(); string(after) != string(before) {
		t.Errorf("the state folded from changed: its deliveries are %+v", old.Deliveries)
	}
	var order []string
	for _, d := range f.Deliveries {
		order = append(order, d.Subscription)
	}
	if got, want := strings.Join(order, ","), "sub_1,sub_2,sub_0,sub_3"; got != want {
		t.Errorf("the fold's deliveries in the order of their last attempt: got %s, want %s", got, want)
	}
	if d := f.Deliveries[2]; d.Attempts != 2 || len(d.Recent) != 2 || d.Outcome != topics.OutcomeDelivered {
		t.Errorf("sub_0 after its second attempt: %+v; want 2 attempts, 2 recent tries, delivered", d)
	}
}
