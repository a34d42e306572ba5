package pull

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// endsEvery is how often the last stable offsets are listed while a
// long poll waits: an answer comes this long at most after its event is
// committed.
const endsEvery = 50 * time.Millisecond

// ends lists the last stable offsets of the events topic every endsEvery
// while requests wait for them to move, once for all of them.
type ends struct {
	mu      sync.Mutex
	waiters int
	lso     map[int32]int64
	moved   chan struct{} // closed when lso changes
	wake    chan struct{}
}

func newEnds() *ends {
	return &ends{lso: make(map[int32]int64), moved: make(chan struct{}), wake: make(chan struct{}, 1)}
}

func (e *ends) run(ctx context.Context, cl *kgo.Client, topic topics.Topic, log *slog.Logger) {
	adm := kadm.NewClient(cl)
	t := time.NewTicker(endsEvery)
	defer t.Stop()
	for {
		e.mu.Lock()
		waiters := e.waiters
		e.mu.Unlock()
		if waiters == 0 {
			select {
			case <-ctx.Done():
				return
			case <-e.wake:
			}
		}
		listed, err := adm.ListCommittedOffsets(ctx, string(topic))
		if err == nil {
			err = listed.Error()
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("pull: cannot list the events topic's ends", "err", err)
		}
		if err == nil {
			lso := make(map[int32]int64)
			listed.Each(func(o kadm.ListedOffset) { lso[o.Partition] = o.Offset })
			e.mu.Lock()
			if !maps.Equal(lso, e.lso) {
				e.lso = lso
				close(e.moved)
				e.moved = make(chan struct{})
			}
			e.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// wait returns true once some partition's last stable offset is past
// pos, false when deadline or ctx came first.
func (e *ends) wait(ctx context.Context, pos []int64, deadline time.Time, gauge prometheus.Gauge) bool {
	gauge.Inc()
	defer gauge.Dec()
	e.mu.Lock()
	e.waiters++
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.waiters--
		e.mu.Unlock()
	}()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		e.mu.Lock()
		lso, moved := e.lso, e.moved
		e.mu.Unlock()
		for p, o := range pos {
			if lso[int32(p)] > o {
				return true
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return false
		case <-moved:
		}
	}
}
