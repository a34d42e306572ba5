package main

import (
	"context"
	"testing"
	"time"

	"github.com/hookstream/hookstream/internal/kafkatest"
)

// TestCeiling: the bare pipeline carries every event sent in the
// measured window through its transactions to the read_committed reader
// (on kfake, or the brokers of HOOKSTREAM_TEST_BROKERS), and reports
// latencies in order.
func TestCeiling(t *testing.T) {
	env := kafkatest.New(t, 3, 1<<20)
	prefix := env.Names.Prefix
	c, err := ceiling(context.Background(), env.Seeds, prefix, 100, time.Second, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if c.Events < 150 {
		t.Errorf("events measured: got %d, want about 200 (100/s for 2s)", c.Events)
	}
	for _, st := range []Stage{c.Ack, c.EndToEnd} {
		if st.P50 <= 0 || st.P99 < st.P50 {
			t.Errorf("%s: p50 %v, p99 %v; want 0 < p50 <= p99", st.Name, st.P50, st.P99)
		}
	}
	if c.EndToEnd.P50 < c.Ack.P50 {
		t.Errorf("end to end p50 %v is below the ack's %v: an event is seen before it is acknowledged", c.EndToEnd.P50, c.Ack.P50)
	}
}
