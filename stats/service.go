package stats

import (
	"context"

	"github.com/hookstream/hookstream/attempts"
	"github.com/hookstream/hookstream/groups"
)

// Service is the deployment's counts as operators read them: what the
// admin API (Mount) answers.
type Service struct {
	counts   *Tally
	attempts *attempts.Tally
	groups   *groups.Service
	receiver func() map[string]Answers
}

// New is the service of the counts counts and tally follow, and of the
// lag of the groups groups shows; receiver, when this process runs the
// ingest role, is its receiver's answers per source since it started
// (nil: none). It does no I/O.
func New(counts *Tally, tally *attempts.Tally, groups *groups.Service, receiver func() map[string]Answers) *Service {
	return &Service{counts: counts, attempts: tally, groups: groups, receiver: receiver}
}

// Summary is what /api/stats answers: the deployment's events per source
// from the ingest, events and DLQ topics, its deliveries from the attempts
// topic, the requests this instance's receiver rejected, and group lag.
type Summary struct {
	Accepted       int64                     `json:"accepted"`
	Duplicates     int64                     `json:"duplicates"`
	Processed      int64                     `json:"processed"`
	Failed         int64                     `json:"failed"`
	Delivered      int64                     `json:"delivered"`
	DeliveryFailed int64                     `json:"delivery_failed"`
	Sources        map[string]*SourceSummary `json:"sources"`
	Lag            any                       `json:"lag,omitempty"`
}

// SourceSummary is one source's part of a Summary.
type SourceSummary struct {
	Accepted   int64 `json:"accepted"`
	Duplicates int64 `json:"duplicates"`
	Processed  int64 `json:"processed"`
	Failed     int64 `json:"failed"`
	Rejected   int64 `json:"rejected"`
}

// Summary waits until the tallies read what was written before, and
// sums them up with the lag of the deployment's groups (groups.Service.Lags).
func (s *Service) Summary(ctx context.Context) (Summary, error) {
	if err := s.attempts.CatchUp(ctx); err != nil {
		return Summary{}, err
	}
	if err := s.counts.CatchUp(ctx); err != nil {
		return Summary{}, err
	}
	out := Summary{Sources: make(map[string]*SourceSummary)}
	source := func(name string) *SourceSummary {
		if out.Sources[name] == nil {
			out.Sources[name] = new(SourceSummary)
		}
		return out.Sources[name]
	}
	for name, n := range s.counts.Sources() {
		out.Accepted += n.Accepted
		out.Duplicates += n.Duplicates()
		out.Processed += n.Processed
		out.Failed += n.Failed
		if name != "" { // records that name no source count in the totals only
			*source(name) = SourceSummary{Accepted: n.Accepted, Duplicates: n.Duplicates(), Processed: n.Processed, Failed: n.Failed}
		}
	}
	if s.receiver != nil {
		for name, a := range s.receiver() {
			if a.Rejected > 0 {
				source(name).Rejected = a.Rejected
			}
		}
	}
	deliveries := s.attempts.Sum()
	out.Delivered, out.DeliveryFailed = deliveries.Delivered, deliveries.DeadLettered
	lag, err := s.groups.Lags(ctx, "")
	if err != nil {
		return Summary{}, err
	}
	out.Lag = lag
	return out, nil
}
