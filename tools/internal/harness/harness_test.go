package harness

import (
	"context"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
)

func TestSocketsCountsConnectionsToThePorts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	_, portText, _ := net.SplitHostPort(ln.Addr().String())
	port, _ := strconv.Atoi(portText)
	before, _, err := Sockets(os.Getpid(), port)
	if err != nil || before != 0 {
		t.Fatalf("Sockets before dialing = %d, %v; want 0", before, err)
	}
	for range 3 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	// This process holds both ends; only the three dialed go to port.
	got, fds, err := Sockets(os.Getpid(), port)
	if err != nil || got != 3 || fds < 7 {
		t.Fatalf("Sockets = %d connections, %d fds, %v; want 3 connections and at least 7 fds", got, fds, err)
	}
	if other, _, _ := Sockets(os.Getpid(), port+1); other != 0 {
		t.Errorf("Sockets to another port = %d, want 0", other)
	}
}

func TestMemoryOf(t *testing.T) {
	m, err := MemoryOf(os.Getpid())
	if err != nil || m.RSS <= 0 || m.Peak < m.RSS {
		t.Fatalf("MemoryOf = %+v, %v; want RSS > 0 and Peak >= RSS", m, err)
	}
	if _, err := MemoryOf(-1); err == nil {
		t.Error("MemoryOf(-1) = nil error")
	}
}

// TestCPUTime: the CPU time of this process grows as it works.
func TestCPUTime(t *testing.T) {
	before := CPUTime(os.Getpid())
	for x, start := 0, time.Now(); time.Since(start) < 100*time.Millisecond; x++ {
		_ = x * x
	}
	if after := CPUTime(os.Getpid()); after <= before {
		t.Errorf("CPU time: got %v after %v of work, want more", after, before)
	}
	if CPUTime(-1) != 0 {
		t.Errorf("CPU time of no process: got %v, want 0", CPUTime(-1))
	}
}

func TestReadOffsets(t *testing.T) {
	env := kafkatest.New(t, 3, 1<<20)
	ctx := context.Background()
	cl := env.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	for i := range 10 {
		r := &kgo.Record{Topic: string(env.Names.Ingest), Partition: int32(i % 3)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var commit kadm.Offsets
	commit.AddOffset(string(env.Names.Ingest), 0, 2, -1)
	commit.AddOffset(string(env.Names.Ingest), 1, 3, -1)
	commit.AddOffset(string(env.Names.Events), 0, 50, -1) // not the ingest topic
	if err := adm.CommitAllOffsets(ctx, string(env.Names.ProcessorGroup()), commit); err != nil {
		t.Fatal(err)
	}
	got, err := ReadOffsets(ctx, adm, env.Names)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Offsets{End: 10, Committed: 5}); got != want {
		t.Errorf("after commits: got %+v, want %+v", got, want)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{9, 1, 5}, 5}} {
		if got := Median(tc.xs); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}
