package main

import (
	"net"
	"os"
	"sync"
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
	// A connection is held open and never answered; asked is closed once
	// a request has arrived on one: the client then waits for its answer.
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	asked := make(chan struct{})
	var once sync.Once
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				if n, _ := c.Read(make([]byte, 64)); n > 0 {
					once.Do(func() { close(asked) })
				}
			}()
		}
	}()

	p := startProcess(t, "hookstream events tail", map[string]string{"HOOKSTREAM_BROKERS": silent.Addr().String()},
		"events", "tail", "--subscription", "sub_missing")
	select {
	case <-asked:
	case <-time.After(30 * time.Second):
		t.Fatalf("events tail asked the broker nothing; its output:\n%s", p.output)
	}
	time.Sleep(200 * time.Millisecond) // on its way to wait for the answer
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
