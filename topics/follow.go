package topics

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Follower reads topics from their start, read_committed, for as long as
// it runs, and hands each record (control records excluded) to a fold
// that keeps what it needs in memory. The fold and the readers of what it
// keeps (View) hold one lock, so a reader sees whole polls.
type Follower struct {
	opts   []kgo.Opt
	topics []string
	fold   func(*kgo.Record)
	log    *slog.Logger

	mu     sync.Mutex
	next   map[string]map[int32]int64 // per topic and partition, the offset after the last record read
	change chan struct{}              // closed and replaced whenever next moves
}

// NewFollower builds a follower of ts that calls fold with each record;
// opts are the client options of the process. It does no I/O.
func NewFollower(opts []kgo.Opt, log *slog.Logger, fold func(*kgo.Record), ts ...Topic) *Follower {
	f := &Follower{opts: opts, fold: fold, log: log, next: make(map[string]map[int32]int64), change: make(chan struct{})}
	for _, t := range ts {
		f.topics = append(f.topics, string(t))
		f.next[string(t)] = make(map[int32]int64)
	}
	return f
}

// Run reads the topics until ctx ends.
func (f *Follower) Run(ctx context.Context) error {
	cl, err := kgo.NewClient(append(slices.Clone(f.opts),
		kgo.ConsumeTopics(f.topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transactional partitions end in a commit marker: seeing the
		// markers is how CatchUp knows the follower reached the end.
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return fmt.Errorf("follow %v: client: %w", f.topics, err)
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			f.log.Warn("reading a followed topic", "topic", t, "partition", p, "err", err)
		})
		f.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			f.next[r.Topic][r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				f.fold(r)
			}
		})
		close(f.change)
		f.change = make(chan struct{})
		f.mu.Unlock()
	}
}

// View calls fn holding the lock the fold holds.
func (f *Follower) View(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

// CatchUp waits until the follower has read every record written before
// it was called, as cl's end offsets say, or ctx ends.
func (f *Follower) CatchUp(ctx context.Context, cl *kgo.Client) error {
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, f.topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("end offsets of %v: %w", f.topics, err)
	}
	for {
		f.mu.Lock()
		behind, change := false, f.change
		ends.Each(func(o kadm.ListedOffset) { behind = behind || f.next[o.Topic][o.Partition] < o.Offset })
		f.mu.Unlock()
		if !behind {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("still reading %v: %w", f.topics, ctx.Err())
		case <-change:
		}
	}
}
