package processor_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
)

// TestSweepKeepsUpWithExpiry: distinct events arrive faster than one
// sweep chunk per interval can forget them; the sweep goes on chunk after
// chunk until caught up, so the ids held level off at about the rate times
// the TTL instead of growing with the events sent, and all are forgotten
// once the traffic stops.
func TestSweepKeepsUpWithExpiry(t *testing.T) {
	env := kafkatest.New(t, 2, maxBody)
	cl := env.Client(t, kgo.ProducerLinger(5*time.Millisecond))
	in := start(t, env, options{name: "a", stateDir: t.TempDir(), ttl: time.Second, sweepInterval: time.Second, sweepChunk: 100})

	const perTick, ticks = 60, 80 // 600 distinct events a second for 8s
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var peak float64
	for i := range ticks {
		<-tick.C
		produceEvents(t, env, cl, i*perTick, (i+1)*perTick)
		if i >= ticks/2 {
			peak = max(peak, in.metric("hookstream_processor_state_keys", "", ""))
		}
	}
	t.Logf("ids held in the second half of the run peaked at %v", peak)
	if bound := float64(perTick * ticks / 2); peak > bound {
		t.Errorf("ids held in the second half of the run: peaked at %v, want at most %v (about rate x TTL, not the %d sent)", peak, bound, perTick*ticks)
	}
	kafkatest.WaitFor(t, 20*time.Second, func() error {
		keys := in.metric("hookstream_processor_state_keys", "", "")
		lag := in.metric("hookstream_processor_sweep_lag_seconds", "", "")
		if keys != 0 || lag != 0 {
			return fmt.Errorf("after the traffic stopped: %v ids held, sweep lag %vs, want none", keys, lag)
		}
		return nil
	})
	if n := in.count("processed"); n != perTick*ticks {
		t.Errorf("processed: got %d, want %d", n, perTick*ticks)
	}
}
