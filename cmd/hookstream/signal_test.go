package main

import (
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestSecondInterruptStops: the first Ctrl-C asks a command to stop; if
// something keeps it (here a broker that accepts connections and never
// answers, which the Kafka client waits on up to its request timeout),
// a second Ctrl-C ends it at once, as it would end any program.
func TestSecondInterruptStops(t *testing.T) {
	t.Parallel()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, never answered
		}
	}()
	defer func() {
		for len(accepted) > 0 {
			(<-accepted).Close()
		}
	}()

	p := startProcess(t, "hookstream events tail", map[string]string{"HOOKSTREAM_BROKERS": silent.Addr().String()},
		"events", "tail", "--subscription", "sub_missing")
	select {
	case c := <-accepted:
		accepted <- c
	case <-time.After(30 * time.Second):
		t.Fatalf("events tail did not connect to the broker; its output:\n%s", p.output)
	}
	for range 2 {
		if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30s after two SIGINTs; its last lines:\n%s", p.output.tail(5))
	}
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGINT {
		t.Errorf("after two SIGINTs while waiting on a silent broker: %s, want ended by the second SIGINT", p.cmd.ProcessState)
	}
}
