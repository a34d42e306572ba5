package dispatch

import (
	"testing"
	"time"
)

// TestProbeFailingAfterTheCircuitClosed: an attempt admitted before the
// circuit opened succeeds while the probe is out, closing the circuit; the
// probe then fails. That failure counts as any other: the circuit stays
// closed below the threshold, and the next success and a later opening
// and closing work (before, the failed probe reopened the circuit without
// a channel to close, and the next success panicked: close of closed
// channel).
func TestProbeFailingAfterTheCircuitClosed(t *testing.T) {
	c := newCircuit(2, time.Second)
	t0 := time.Now()
	c.report(t0, false, false)
	if opened, _ := c.report(t0, false, false); !opened {
		t.Fatalf("two failures: the circuit did not open")
	}
	ok, probe, _ := c.admit(t0.Add(2*time.Second), 1)
	if !ok || !probe {
		t.Fatalf("after the cooldown: admit = %v, %v, want the probe", ok, probe)
	}
	if _, closed := c.report(t0.Add(2*time.Second), false, true); !closed {
		t.Fatalf("an earlier attempt's success did not close the circuit")
	}
	c.report(t0.Add(2*time.Second), true, false) // the probe fails
	if c.isOpen() {
		t.Errorf("one failure after the circuit closed: got open, want closed below the threshold of 2")
	}
	c.report(t0.Add(3*time.Second), false, true)
	c.report(t0.Add(3*time.Second), false, false)
	if opened, _ := c.report(t0.Add(3*time.Second), false, false); !opened {
		t.Errorf("two failures: the circuit did not open again")
	}
	if _, closed := c.report(t0.Add(5*time.Second), false, true); !closed {
		t.Errorf("a success: the circuit did not close again")
	}
}
