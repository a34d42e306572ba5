package topics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// followIdle is how long a follower keeps reading after its last CatchUp.
const followIdle = time.Minute

// Follower reads topics from their start, read_committed, and hands each
// record (control records excluded) to a fold that keeps what it needs in
// memory. It reads only while asked: from the first CatchUp until a minute
// has passed without one, then again from where it stopped at the next,
// so a process whose counts nobody asks for reads nothing. The fold and
// the readers of what it keeps (View) hold one lock, so a reader sees
// whole polls.
type Follower struct {
	c      Cluster
	topics []string
	fold   func(*kgo.Record)
	log    *slog.Logger
	idle   time.Duration

	asking  atomic.Int64  // CatchUps waiting
	asked   atomic.Int64  // when the last CatchUp ended, in Unix nanoseconds
	wake    chan struct{} // a CatchUp began
	reading atomic.Bool   // Run is fetching

	mu     sync.Mutex
	next   map[string]map[int32]int64 // per topic and partition, the offset after the last record read
	change chan struct{}              // closed and replaced whenever next moves
}

// NewFollower builds a follower of ts on c that calls fold with each
// record. It does no I/O.
func NewFollower(c Cluster, log *slog.Logger, fold func(*kgo.Record), ts ...Topic) *Follower {
	f := &Follower{c: c, fold: fold, log: log, idle: followIdle, wake: make(chan struct{}, 1),
		next: make(map[string]map[int32]int64), change: make(chan struct{})}
	for _, t := range ts {
		f.topics = append(f.topics, string(t))
		f.next[string(t)] = make(map[int32]int64)
	}
	return f
}

// Run reads the topics, while asked, until ctx ends.
func (f *Follower) Run(ctx context.Context) error {
	var cl *kgo.Client
	defer func() {
		if cl != nil {
			cl.Close()
		}
	}()
	for {
		rest := f.idle - time.Since(time.Unix(0, f.asked.Load()))
		if f.asking.Load() == 0 && rest <= 0 {
			if f.reading.Swap(false) {
				cl.PauseFetchTopics(f.topics...)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-f.wake:
			}
			continue
		}
		if !f.reading.Swap(true) {
			if cl == nil {
				var err error
				if cl, err = f.client(); err != nil {
					return err
				}
			} else {
				cl.ResumeFetchTopics(f.topics...)
			}
		}
		// Polling ends when the time to rest comes, or at once when
		// asked again so that the rest is measured from the new ask.
		pollCtx, cancel := context.WithTimeout(ctx, max(rest, f.idle/10))
		fs := cl.PollFetches(pollCtx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				f.log.Warn("reading a followed topic", "topic", t, "partition", p, "err", err)
			}
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

// client is a consumer of the topics from their start.
func (f *Follower) client() (*kgo.Client, error) {
	cl, err := f.c.NewClient(
		kgo.ConsumeTopics(f.topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transactional partitions end in a commit marker: seeing the
		// markers is how CatchUp knows the follower reached the end.
		kgo.KeepControlRecords(),
	)
	if err != nil {
		return nil, fmt.Errorf("follow %v: client: %w", f.topics, err)
	}
	return cl, nil
}

// View calls fn holding the lock the fold holds.
func (f *Follower) View(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

// CatchUp waits until the follower has read every record written before
// it was called, as the end offsets listed through the cluster's shared
// client say, or ctx ends. It sets a resting follower reading.
func (f *Follower) CatchUp(ctx context.Context) error {
	f.asking.Add(1)
	defer func() {
		f.asked.Store(time.Now().UnixNano())
		f.asking.Add(-1)
	}()
	select {
	case f.wake <- struct{}{}:
	default:
	}
	ends, err := f.c.Admin().ListEndOffsets(ctx, f.topics...)
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

// Progress says how far the follower has read of its topics' records as
// they are now: read of total, over every partition from its start
// offset (the retention's) to its end.
func (f *Follower) Progress(ctx context.Context) (read, total int64, err error) {
	adm := f.c.Admin()
	starts, err := adm.ListStartOffsets(ctx, f.topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return 0, 0, fmt.Errorf("start offsets of %v: %w", f.topics, err)
	}
	ends, err := adm.ListEndOffsets(ctx, f.topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, 0, fmt.Errorf("end offsets of %v: %w", f.topics, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ends.Each(func(o kadm.ListedOffset) {
		start := int64(0)
		if s, ok := starts.Lookup(o.Topic, o.Partition); ok {
			start = s.Offset
		}
		if o.Offset <= start {
			return
		}
		total += o.Offset - start
		read += min(max(f.next[o.Topic][o.Partition], start), o.Offset) - start
	})
	return read, total, nil
}
