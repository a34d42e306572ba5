package dispatch

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookstream/hookstream/subscriptions"
)

// TestMetricsGatherWithManySubscriptions: /metrics answers with more
// subscriptions than Prometheus's collection channel holds (1,000
// metrics); its per-subscription series must not be sent while the
// dispatcher's lock is held, which the gauges of open circuits need too.
func TestMetricsGatherWithManySubscriptions(t *testing.T) {
	d := &Dispatcher{subs: make(map[string]*subState)}
	for i := range 1500 {
		id := fmt.Sprintf("sub_%04d", i)
		d.subs[id] = &subState{sub: subscriptions.Subscription{ID: id, Enabled: true}, circuit: newCircuit(5, time.Second)}
	}
	reg := prometheus.NewRegistry()
	newMetrics(reg, d)
	done := make(chan error, 1)
	go func() {
		_, err := reg.Gather()
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Gather did not return within a minute: the collectors deadlock")
	}
}
