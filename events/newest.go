package events

import (
	"cmp"
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// Newest is the newest limit events of the events topic, newest first by
// the time their records were written. It reads the last MaxRead offsets
// of the topic, shared among the partitions as a search shares its
// bound: every partition's newest events are read while they fit in its
// share (a share of 2×limit offsets holds limit events even when each is
// a transaction of its own, with its commit marker).
func (s *Service) Newest(ctx context.Context, limit int) ([]Result, error) {
	c := s.c
	held, err := topics.Span{Stable: true}.Ranges(ctx, c.Client, c.Names.Events)
	if err != nil {
		return nil, err
	}
	var out []Result
	err = c.ReadRanges(ctx, c.Names.Events, lasts(held, MaxRead), func(r *kgo.Record) bool {
		out = append(out, resultOf(r))
		return true
	}, nil)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Result) int {
		return cmp.Or(b.WrittenAt.Compare(a.WrittenAt), cmp.Compare(b.Partition, a.Partition), cmp.Compare(b.Offset, a.Offset))
	})
	return out[:min(limit, len(out))], nil
}

// lasts is the last offsets of ranges within limit offsets, shared as
// bounded shares them.
func lasts(ranges topics.Ranges, limit int64) topics.Ranges {
	out := bounded(ranges, limit)
	for p, r := range out {
		end := ranges[p].To
		out[p] = topics.Range{From: end - (r.To - r.From), To: end}
	}
	return out
}
