// Package stats counts each source's events as the topics hold them:
// accepted from <prefix>.ingest, processed from <prefix>.events, failed
// from <prefix>.dlq, followed from their start (Tally), so the counts
// survive restarts of every process but cover the topics' retention only.
// It reads headers only, never a record's body, and leaves out
// hookstream's own operational events; it writes nothing and judges no
// record (the processor does). API serves /api/stats on the admin
// listener: these counts, the deliveries, the requests this instance's
// receiver rejected, and group lag.
package stats

import (
	"log/slog"

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

// Tally follows the ingest, events and DLQ topics from their start and
// keeps every source's Counts in memory: those of the first
// topics.MaxSourceNames source names it reads apart, those of later names
// together under topics.OtherSource, as the receiver's metrics do.
type Tally struct {
	*topics.Follower
	names topics.Names
	// Written by the follower's fold, read in its View.
	sources map[string]*Counts
	kept    topics.SourceNames
}

// NewTally builds a tally of names' topics; opts are the client options
// of the process. It does no I/O. Run reads the topics until its context
// ends; CatchUp waits until it read what was written before.
func NewTally(opts []kgo.Opt, names topics.Names, log *slog.Logger) *Tally {
	t := &Tally{names: names, sources: make(map[string]*Counts)}
	t.Follower = topics.NewFollower(opts, log.With("component", "stats"), t.add, names.Ingest, names.Events, names.DLQ)
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
	switch topic := topics.Topic(r.Topic); {
	case topic == t.names.Ingest && len(r.Key) > 0:
		t.of(source).Accepted++
	case topic == t.names.Events && !replay:
		t.of(source).Processed++
	case topic == t.names.DLQ && letter:
		t.of(source).Failed++
	}
}

// of returns the counts source counts in, new ones at first.
func (t *Tally) of(source string) *Counts {
	source = t.kept.Name(source)
	c := t.sources[source]
	if c == nil {
		c = new(Counts)
		t.sources[source] = c
	}
	return c
}

// Sources returns the counts of every source kept apart, and of the
// others under topics.OtherSource; records that name no source count
// under "".
func (t *Tally) Sources() (out map[string]Counts) {
	t.View(func() {
		out = make(map[string]Counts, len(t.sources))
		for name, c := range t.sources {
			out[name] = *c
		}
	})
	return out
}
