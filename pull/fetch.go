package pull

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fetcher reads the events topic at given offsets, read_committed, with
// Fetch requests of its own sent to each partition's leader through a
// shared client: no consumer, no buffering past what a request asks for,
// and no wait at the broker (MaxWait 0), so requests of many consumers
// share the client's connections without waiting on one another.
type fetcher struct {
	cl    *kgo.Client
	topic string

	mu   sync.Mutex
	meta *topicMeta // nil until read, and after an error
}

// topicMeta is what a fetch needs of the events topic.
type topicMeta struct {
	id      [16]byte
	leaders []int32 // by partition
}

// fetched is what a fetch read of one partition.
type fetched struct {
	recs []*kgo.Record // committed data records from the offset asked
	next int64         // where to read on once every record is taken
	lso  int64         // the last stable offset; -1 when the broker left the partition out
}

// errOutOfRange: an offset asked is before the partition's start (gone
// with retention) or past its end.
var errOutOfRange = errors.New("offset out of range")

// partitions returns the number of partitions of the events topic.
func (f *fetcher) partitions(ctx context.Context) (int, error) {
	m, err := f.metadata(ctx)
	if err != nil {
		return 0, err
	}
	return len(m.leaders), nil
}

func (f *fetcher) metadata(ctx context.Context) (*topicMeta, error) {
	f.mu.Lock()
	m := f.meta
	f.mu.Unlock()
	if m != nil {
		return m, nil
	}
	md, err := kadm.NewClient(f.cl).Metadata(ctx, f.topic)
	if err != nil {
		return nil, fmt.Errorf("pull: metadata of %s: %w", f.topic, err)
	}
	td, ok := md.Topics[f.topic]
	if !ok || td.Err != nil || len(td.Partitions) == 0 {
		return nil, fmt.Errorf("pull: metadata of %s: %v", f.topic, td.Err)
	}
	m = &topicMeta{id: td.ID, leaders: make([]int32, len(td.Partitions))}
	for p, pd := range td.Partitions {
		if int(p) >= len(m.leaders) || pd.Leader < 0 {
			return nil, fmt.Errorf("pull: %s partition %d has no leader", f.topic, p)
		}
		m.leaders[p] = pd.Leader
	}
	f.mu.Lock()
	f.meta = m
	f.mu.Unlock()
	return m, nil
}

// forget drops the metadata after an error: the next fetch reads it anew.
func (f *fetcher) forget() {
	f.mu.Lock()
	f.meta = nil
	f.mu.Unlock()
}

// fetch reads the partitions of order from their offsets in pos, at most
// about maxBytes in all: one request per leader, the partitions in
// order. A broker returns at least the first batch of the first
// partition that has one, whatever its size. A partition whose offset
// is out of range fails the fetch with errOutOfRange.
func (f *fetcher) fetch(ctx context.Context, order []int32, pos []int64, maxBytes int32) (map[int32]fetched, error) {
	m, err := f.metadata(ctx)
	if err != nil {
		return nil, err
	}
	byLeader := make(map[int32][]int32)
	var leaders []int32
	for _, p := range order {
		l := m.leaders[p]
		if _, ok := byLeader[l]; !ok {
			leaders = append(leaders, l)
		}
		byLeader[l] = append(byLeader[l], p)
	}
	out := make(map[int32]fetched, len(order))
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, len(leaders))
	for i, l := range leaders {
		wg.Go(func() {
			got, err := f.fetchFrom(ctx, l, m.id, byLeader[l], pos, maxBytes)
			mu.Lock()
			defer mu.Unlock()
			for p, r := range got {
				out[p] = r
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		if !errors.Is(err, errOutOfRange) {
			f.forget()
		}
		return nil, err
	}
	return out, nil
}

func (f *fetcher) fetchFrom(ctx context.Context, leader int32, id [16]byte, parts []int32, pos []int64, maxBytes int32) (map[int32]fetched, error) {
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis = 0
	req.MinBytes = 1
	req.MaxBytes = maxBytes
	req.IsolationLevel = 1 // read_committed
	t := kmsg.NewFetchRequestTopic()
	t.Topic, t.TopicID = f.topic, id
	for _, p := range parts {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, pos[p], maxBytes
		t.Partitions = append(t.Partitions, rp)
	}
	req.Topics = append(req.Topics, t)
	kresp, err := f.cl.Broker(int(leader)).Request(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("pull: fetch from broker %d: %w", leader, err)
	}
	resp := kresp.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, fmt.Errorf("pull: fetch from broker %d: %w", leader, err)
	}
	out := make(map[int32]fetched, len(parts))
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			rp := &resp.Topics[i].Partitions[j]
			p := rp.Partition
			if p < 0 || int(p) >= len(pos) {
				continue
			}
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				if errors.Is(err, kerr.OffsetOutOfRange) {
					return nil, fmt.Errorf("pull: partition %d at %d: %w", p, pos[p], errOutOfRange)
				}
				return nil, fmt.Errorf("pull: fetch partition %d: %w", p, err)
			}
			fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
				Offset:         pos[p],
				IsolationLevel: kgo.ReadCommitted(),
				Topic:          f.topic,
				Partition:      p,
			}, rp, kgo.DefaultDecompressor(), nil)
			if fp.Err != nil && len(fp.Records) == 0 {
				return nil, fmt.Errorf("pull: fetch partition %d: %w", p, fp.Err)
			}
			if len(fp.Records) > 0 {
				next = max(next, fp.Records[len(fp.Records)-1].Offset+1)
			}
			out[p] = fetched{recs: fp.Records, next: max(next, pos[p]), lso: rp.LastStableOffset}
		}
	}
	for _, p := range parts {
		if _, ok := out[p]; !ok { // left out of a full response
			out[p] = fetched{next: pos[p], lso: -1}
		}
	}
	return out, nil
}
