// Package stats counts each source's events as the topics hold them:
// accepted from <prefix>.ingest, processed from <prefix>.events, failed
// from <prefix>.dlq, followed from their start (Tally), so the counts
// survive restarts of every process but cover the topics' retention only.
// Beside the totals it keeps each source's counts per minute, by record
// timestamp, for the last Minutes minutes (Recent), which the console
// charts. It reads headers only, never a record's body, and leaves out
// hookstream's own operational events; it writes nothing and judges no
// record (the processor does). The Service sums up, for /api/stats on the
// admin listener (Mount), these counts, the deliveries, the requests this
// instance's receiver rejected, and group lag.
package stats

import (
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// Counts are one source's events.
type Counts struct {
	// Accepted counts the ingest records (redriven copies included);
	// Processed the events emitted for the first time (re-emissions, which
	// carry hs-replay, are not); Failed the processor's dead letters.
	Accepted, Processed, Failed int64
}

// Duplicates are the accepted records neither processed nor failed: the
// ones the processor dropped as duplicates. Never negative, even while the
// topics' retention has removed accepted records whose outcome remains.
func (c Counts) Duplicates() int64 { return max(0, c.Accepted-c.Processed-c.Failed) }

// Minutes is how many minutes of per-minute counts a Tally keeps.
const Minutes = 15

// Tally follows the ingest, events and DLQ topics from their start and
// keeps every source's Counts in memory, in total and per minute for the
// last Minutes minutes: those of the first topics.MaxSourceNames source
// names it reads apart, those of later names together under
// topics.OtherSource, as the receiver's metrics do.
type Tally struct {
	*topics.Follower
	names topics.Names
	now   func() time.Time
	// Written by the follower's fold, read in its View.
	sources map[string]*source
	kept    topics.SourceNames
}

// source is one source's counts: in total and per minute.
type source struct {
	total Counts
	// minutes[m%Minutes] counts minute m (unix time / 60) for the Minutes
	// minutes up to newest.
	minutes [Minutes]Counts
	newest  int64
}

// slot returns the counts of the minute of at, or nil when at is older
// than the minutes kept, or more than a minute ahead of the clock (a
// producer's timestamp is not trusted to wipe the recent minutes).
func (s *source) slot(at, now time.Time) *Counts {
	m := at.Unix() / 60
	if m < Minutes || at.After(now.Add(time.Minute)) || m <= s.newest-Minutes {
		return nil
	}
	for ; s.newest < m; s.newest++ {
		if s.newest < m-Minutes {
			s.newest = m - Minutes // skip the minutes every slot is cleared for
		}
		s.minutes[(s.newest+1)%Minutes] = Counts{}
	}
	return &s.minutes[m%Minutes]
}

// NewTally builds a tally of c's ingest, events and DLQ topics. It does
// no I/O. Run reads the topics until its context ends; CatchUp waits
// until it read what was written before.
func NewTally(c topics.Cluster, log *slog.Logger) *Tally {
	t := &Tally{names: c.Names, now: time.Now, sources: make(map[string]*source)}
	t.Follower = topics.NewFollower(c, log.With("component", "stats"), t.add, c.Names.Ingest, c.Names.Events, c.Names.DLQ)
	return t
}

// add counts r by its headers.
func (t *Tally) add(r *kgo.Record) {
	var source string
	var replay, letter bool
	for _, h := range r.Headers {
		switch h.Key {
		case topics.HeaderSource:
			source = string(h.Value)
		case topics.HeaderReplay:
			replay = true
		case topics.HeaderErrorStage:
			letter = true // a redrive marker in the DLQ has none
		}
	}
	if source == topics.OperationalSource {
		return
	}
	var count func(*Counts)
	switch topic := topics.Topic(r.Topic); {
	case topic == t.names.Ingest && len(r.Key) > 0:
		count = func(c *Counts) { c.Accepted++ }
	case topic == t.names.Events && !replay:
		count = func(c *Counts) { c.Processed++ }
	case topic == t.names.DLQ && letter:
		count = func(c *Counts) { c.Failed++ }
	default:
		return
	}
	s := t.of(source)
	count(&s.total)
	if c := s.slot(r.Timestamp, t.now()); c != nil {
		count(c)
	}
}

// of returns the counts source counts in, new ones at first.
func (t *Tally) of(name string) *source {
	name = t.kept.Name(name)
	s := t.sources[name]
	if s == nil {
		s = new(source)
		t.sources[name] = s
	}
	return s
}

// Sources returns the counts of every source kept apart, and of the
// others under topics.OtherSource; records that name no source count
// under "".
func (t *Tally) Sources() (out map[string]Counts) {
	t.View(func() {
		out = make(map[string]Counts, len(t.sources))
		for name, s := range t.sources {
			out[name] = s.total
		}
	})
	return out
}

// Recent returns every source's counts per minute, by record timestamp,
// for the Minutes minutes up to the minute of now, oldest first; sources
// named as Sources names them.
func (t *Tally) Recent(now time.Time) (out map[string][]Counts) {
	last := now.Unix() / 60
	t.View(func() {
		out = make(map[string][]Counts, len(t.sources))
		for name, s := range t.sources {
			series := make([]Counts, Minutes)
			for i := range series {
				m := last - Minutes + 1 + int64(i)
				if m <= s.newest && m > s.newest-Minutes {
					series[i] = s.minutes[m%Minutes]
				}
			}
			out[name] = series
		}
	})
	return out
}
