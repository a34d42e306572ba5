package topics

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The range reader: every bounded read of a topic (the DLQ's letters, a
// subscription's attempts, events by time, an event's record) is a Span
// resolved to offset Ranges by ListOffsets, then read by ReadRanges,
// read_committed, with a bound on the offsets of each partition and a
// progress callback.

// Range is the offsets [From, To) of one partition.
type Range struct{ From, To int64 }

// Ranges are what ReadRanges reads of a topic, by partition.
type Ranges map[int32]Range

// Offsets is how many offsets rs spans.
func (rs Ranges) Offsets() int64 {
	var n int64
	for _, r := range rs {
		n += max(r.To-r.From, 0)
	}
	return n
}

// Bound is one end of a Span in each partition: an offset, or the first
// offset written at or after a time (Kafka's offsets by time). The zero
// Bound is a partition's start as a Span's From and its end as its To.
type Bound struct {
	offset int64
	at     time.Time
	set    bool
}

// Offset is the bound at offset o, never before a partition's start nor
// past its end.
func Offset(o int64) Bound { return Bound{offset: o, set: true} }

// At is the bound at the first offset written at or after t, or a
// partition's end when none was; At of the zero time is the zero Bound.
func At(t time.Time) Bound {
	if t.IsZero() {
		return Bound{}
	}
	return Bound{at: t, set: true}
}

// Span selects what to read of a topic: in each partition, from From to
// To, within a bound.
type Span struct {
	From, To Bound
	// Stable ends a partition (the zero To, or the limit of an Offset To)
	// at its last stable offset, before any open transaction, instead of
	// its high watermark: a reader waits for no transaction to end.
	Stable bool
	// Partitions, when not nil, are the only partitions read: one the
	// topic lacks is a *NoPartitionError.
	Partitions []int32
	// Key, when not nil, reads only the partition a producer's default
	// partitioner gives it (PartitionOf).
	Key []byte
	// First and Last, when positive, bound each partition's range to its
	// first First or its last Last offsets.
	First, Last int64
}

// NoPartitionError is a partition a Span names that its topic lacks.
type NoPartitionError struct {
	Topic     Topic
	Partition int32
}

func (e *NoPartitionError) Error() string {
	return fmt.Sprintf("%s has no partition %d", e.Topic, e.Partition)
}

// Ranges resolves s to the offsets of topic's partitions, listed through
// cl. A partition whose range is empty is left out.
func (s Span) Ranges(ctx context.Context, cl *kgo.Client, topic Topic) (Ranges, error) {
	adm := kadm.NewClient(cl)
	from, err := s.From.list(ctx, adm, topic, adm.ListStartOffsets)
	if err != nil {
		return nil, err
	}
	end := adm.ListEndOffsets
	if s.Stable {
		end = adm.ListCommittedOffsets
	}
	to, err := s.To.list(ctx, adm, topic, end)
	if err != nil {
		return nil, err
	}
	for _, p := range s.Partitions {
		if _, ok := to.Lookup(string(topic), p); !ok {
			return nil, &NoPartitionError{Topic: topic, Partition: p}
		}
	}
	only := int32(-1)
	if s.Key != nil {
		only = PartitionOf(s.Key, len(to[string(topic)]))
	}
	rs := make(Ranges)
	to.Each(func(e kadm.ListedOffset) {
		if only >= 0 && e.Partition != only || s.Partitions != nil && !slices.Contains(s.Partitions, e.Partition) {
			return
		}
		st, _ := from.Lookup(string(topic), e.Partition)
		r := Range{From: st.Offset, To: e.Offset}
		if s.From.set && s.From.at.IsZero() {
			r.From = max(r.From, s.From.offset)
		}
		if s.To.set && s.To.at.IsZero() {
			r.To = min(r.To, s.To.offset)
		}
		if s.Last > 0 {
			r.From = max(r.From, r.To-s.Last)
		}
		if s.First > 0 {
			r.To = min(r.To, r.From+s.First)
		}
		if r.From < r.To {
			rs[e.Partition] = r
		}
	})
	return rs, nil
}

// list lists the offsets of b in topic's partitions: by time, or as
// limits lists them.
func (b Bound) list(ctx context.Context, adm *kadm.Client, topic Topic, limits func(context.Context, ...string) (kadm.ListedOffsets, error)) (kadm.ListedOffsets, error) {
	var (
		l   kadm.ListedOffsets
		err error
	)
	if b.at.IsZero() {
		l, err = limits(ctx, string(topic))
	} else {
		l, err = adm.ListOffsetsAfterMilli(ctx, b.at.UnixMilli(), string(topic))
	}
	if err == nil {
		err = l.Error()
	}
	if err != nil {
		if !b.at.IsZero() {
			return nil, fmt.Errorf("offsets of %s at %s: %w", topic, b.at.Format(time.RFC3339), err)
		}
		return nil, fmt.Errorf("offsets of %s: %w", topic, err)
	}
	return l, nil
}

// Read reads span of topic as ReadRanges does, its offsets listed through
// the shared client.
func (c Cluster) Read(ctx context.Context, topic Topic, span Span, fn func(*kgo.Record) bool, progress func(read, total int64)) error {
	rs, err := span.Ranges(ctx, c.Client, topic)
	if err != nil {
		return err
	}
	return c.ReadRanges(ctx, topic, rs, fn, progress)
}

// ReadRanges reads the given ranges of topic's partitions, read_committed,
// calling fn with each record (control records excluded) in offset order
// per partition, until fn returns false. progress, when not nil, is called
// after each poll with the records read so far (control records counted,
// aborted ones never seen) and the offsets ranges spans. The reader is a
// client of the cluster's own, closed before ReadRanges returns.
func (c Cluster) ReadRanges(ctx context.Context, topic Topic, ranges Ranges, fn func(*kgo.Record) bool, progress func(read, total int64)) error {
	from := make(map[int32]kgo.Offset, len(ranges))
	want := make(map[int32]int64, len(ranges))
	for p, r := range ranges {
		if r.From < r.To {
			from[p] = kgo.NewOffset().At(r.From)
			want[p] = r.To
		}
	}
	if len(want) == 0 {
		return nil
	}
	total := ranges.Offsets()
	rd, err := c.NewClient(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{string(topic): from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transactional partitions end in a commit marker: seeing the
		// markers is how a reader knows it reached the end.
		kgo.KeepControlRecords(),
	)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	defer rd.Close()
	var read int64
	for more := true; more && len(want) > 0; {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read %s: %w", topic, err)
		}
		if err := fs.Err0(); err != nil {
			return fmt.Errorf("read %s: %w", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !more || !ok || r.Offset >= end {
				return
			}
			read++
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
			if !r.Attrs.IsControl() {
				more = fn(r)
			}
		})
		if progress != nil {
			progress(read, total)
		}
	}
	return nil
}

// PartitionOf is the partition of n that a producer's default partitioner
// gives key: Kafka's murmur2 hash, as every hookstream producer and the
// Java client use.
func PartitionOf(key []byte, n int) int32 {
	if n <= 0 {
		return 0
	}
	return int32(kgo.StickyKeyPartitioner(nil).ForTopic("").Partition(&kgo.Record{Key: key}, n))
}
