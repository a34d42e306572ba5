package console

import (
	"context"
	"sync"
	"time"

	"github.com/hookstream/hookstream/stats"
)

// chartMinutes is how many minutes the overview charts.
const chartMinutes = stats.Minutes

// sampler turns the receiver's answers, which it counts since it
// started, into counts per minute for the last chartMinutes minutes: it
// samples them every 15 seconds and keeps the last sample of each minute,
// at most chartMinutes+1.
type sampler struct {
	fn func() map[string]stats.Answers

	mu      sync.Mutex
	samples []sample // oldest first
}

type sample struct {
	minute  int64 // unix minute
	answers map[string]stats.Answers
}

func newSampler(fn func() map[string]stats.Answers) *sampler { return &sampler{fn: fn} }

// run samples until ctx ends.
func (s *sampler) run(ctx context.Context) {
	if s.fn == nil {
		<-ctx.Done()
		return
	}
	s.take(time.Now())
	t := time.NewTicker(15 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.take(now)
		}
	}
}

// take samples the receiver's answers at now.
func (s *sampler) take(now time.Time) {
	m, st := now.Unix()/60, s.fn()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		// The receiver counts from zero since it started, with the
		// sampler: what it counted before the first sample is the first
		// minute's.
		s.samples = append(s.samples, sample{minute: m - 1})
	}
	if n := len(s.samples); s.samples[n-1].minute == m {
		s.samples[n-1].answers = st
		return
	}
	s.samples = append(s.samples, sample{minute: m, answers: st})
	if len(s.samples) > chartMinutes+1 {
		s.samples = s.samples[1:]
	}
}

// series returns each source's answers per minute over the chartMinutes
// minutes up to the minute of now, oldest first: what the receiver
// answered between the last sample of the minute before and the minute's
// own. ok is false when this process runs no receiver.
func (s *sampler) series(now time.Time) (out map[string][]stats.Answers, ok bool) {
	if s.fn == nil {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out = make(map[string][]stats.Answers)
	last := now.Unix() / 60
	for i := 1; i < len(s.samples); i++ {
		prev, cur := s.samples[i-1], s.samples[i]
		slot := chartMinutes - 1 - int(last-cur.minute)
		if slot < 0 || slot >= chartMinutes {
			continue
		}
		for name, n := range cur.answers {
			p := prev.answers[name]
			d := stats.Answers{Accepted: n.Accepted - p.Accepted, Duplicates: n.Duplicates - p.Duplicates, Rejected: n.Rejected - p.Rejected}
			if d == (stats.Answers{}) {
				continue
			}
			if out[name] == nil {
				out[name] = make([]stats.Answers, chartMinutes)
			}
			out[name][slot] = d
		}
	}
	return out, true
}
