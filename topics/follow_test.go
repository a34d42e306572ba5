package topics

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestFollowerReadsOnlyWhileAsked: a follower reads nothing until asked,
// rests once no CatchUp has come for its idle time, and each time it is
// asked again resumes where it stopped: every record is folded exactly
// once across the rests.
func TestFollowerReadsOnlyWhileAsked(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "followed"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("followed"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce := func(n int) {
		t.Helper()
		for i := range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}

	folded := make(map[string]int) // times each record was folded
	f := NewFollower(Cluster{Client: cl, Opts: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}}, slog.New(slog.NewTextHandler(io.Discard, nil)),
		func(r *kgo.Record) { folded[fmt.Sprintf("%d/%d", r.Partition, r.Offset)]++ }, "followed")
	f.idle = 50 * time.Millisecond
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	produce(20)
	if f.reading.Load() {
		t.Fatal("reading before anyone asked")
	}
	for round := 1; round <= 5; round++ {
		if err := f.CatchUp(ctx); err != nil {
			t.Fatal(err)
		}
		n := 0
		f.View(func() {
			for at, times := range folded {
				if times != 1 {
					t.Errorf("round %d: record %s folded %d times", round, at, times)
				}
			}
			n = len(folded)
		})
		if want := 20 * round; n != want {
			t.Fatalf("round %d: folded %d records, want %d", round, n, want)
		}
		for f.reading.Load() { // rests after its idle time
			if ctx.Err() != nil {
				t.Fatalf("round %d: still reading %v after the last CatchUp", round, f.idle)
			}
			time.Sleep(10 * time.Millisecond)
		}
		produce(20)
	}
}
