package processor

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookstream/hookstream/topics"
)

// TestRevocationForgetsItsStrikes checks that the strikes of a partition
// that moved away are forgotten with it: strikes are bounded by the records
// of the partitions held, not by every poison record a long-lived process
// ever saw.
func TestRevocationForgetsItsStrikes(t *testing.T) {
	names := topics.NewNames("strikes")
	p := New(Config{Names: names}, nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	cause := errors.New("MESSAGE_TOO_LARGE")
	p.strikes = map[recordRef]strike{
		{partition: 1, offset: 5}: {n: 2, cause: cause},
		{partition: 1, offset: 9}: {n: 1, cause: cause},
		{partition: 2, offset: 7}: {n: 1, cause: cause},
	}
	p.onRevoked(context.Background(), nil, map[string][]int32{string(names.Ingest): {1}})
	want := map[recordRef]strike{{partition: 2, offset: 7}: {n: 1, cause: cause}}
	if len(p.strikes) != len(want) || p.strikes[recordRef{2, 7}] != want[recordRef{2, 7}] {
		t.Errorf("strikes after partition 1 was revoked: got %v, want %v", p.strikes, want)
	}
	p.onLost(context.Background(), nil, map[string][]int32{string(names.Ingest): {2}})
	if len(p.strikes) != 0 {
		t.Errorf("strikes after partition 2 was lost: got %v, want none", p.strikes)
	}
}
