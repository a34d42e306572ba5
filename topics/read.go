package topics

import (
	"context"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Range is the offsets [From, To) of one partition.
type Range struct{ From, To int64 }

// ReadRanges reads the given ranges of topic's partitions, read_committed,
// calling fn with each record (control records excluded) in offset order
// per partition, until fn returns false. progress, when not nil, is called
// with the offsets read so far after each poll. The reader is built from
// opts (seed brokers, logger) and closed before ReadRanges returns.
func ReadRanges(ctx context.Context, opts []kgo.Opt, topic Topic, ranges map[int32]Range, fn func(*kgo.Record) bool, progress func(read int64)) error {
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
	rd, err := kgo.NewClient(append(slices.Clone(opts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{string(topic): from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transactional partitions end in a commit marker: seeing the
		// markers is how a reader knows it reached the end.
		kgo.KeepControlRecords(),
	)...)
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
			progress(read)
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
