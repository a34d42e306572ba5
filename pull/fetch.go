package pull

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// metaMaxAge is how long the events topic's metadata is used before it
// is read again: partitions added to the topic are read this long after
// at most. A leader that moved is followed at once (fetch).
const metaMaxAge = 10 * time.Second

// fetcher reads the events topic at given offsets, read_committed, with
// Fetch requests of its own sent to a partition's leader through a
// shared client: no consumer, no buffering past what a request asks for,
// and no wait at the broker (MaxWait 0), so requests of many consumers
// share the client's connections without waiting on one another.
type fetcher struct {
	cl         *kgo.Client
	topic      string
	now        func() time.Time
	decompress kgo.Decompressor

	reading chan struct{} // a place for the one metadata read under way, taken before mu

	mu   sync.Mutex
	meta *topicMeta // nil until read
}

func newFetcher(cl *kgo.Client, topic string, now func() time.Time) *fetcher {
	return &fetcher{cl: cl, topic: topic, now: now, decompress: kgo.DefaultDecompressor(), reading: make(chan struct{}, 1)}
}

// topicMeta is what a fetch needs of the events topic.
type topicMeta struct {
	id      [16]byte
	leaders []int32 // by partition
	read    time.Time
}

// fetched is what a fetch read of one partition.
type fetched struct {
	partition int32
	recs      []*kgo.Record // committed data records from the offset asked
	next      int64         // where to read on once every record is taken
	lso       int64         // the last stable offset; -1 when the broker left the partition out
}

// errOutOfRange: an offset asked is before the partition's start (gone
// with retention) or past its end.
var errOutOfRange = errors.New("offset out of range")

// partitions returns the number of partitions of the events topic; when
// the metadata knows fewer than seen (a cursor minted by a server that
// read it later), it is read anew first.
func (f *fetcher) partitions(ctx context.Context, seen int) (int, error) {
	m, err := f.metadata(ctx, nil)
	if err == nil && len(m.leaders) < seen {
		m, err = f.metadata(ctx, m)
	}
	if err != nil {
		return 0, err
	}
	return len(m.leaders), nil
}

// metadata returns the events topic's metadata, read anew when it is
// older than metaMaxAge or is stale (the one a fetch failed with): one
// read at a time, which the requests waiting for it share.
func (f *fetcher) metadata(ctx context.Context, stale *topicMeta) (*topicMeta, error) {
	current := func() *topicMeta {
		f.mu.Lock()
		defer f.mu.Unlock()
		if m := f.meta; m != nil && m != stale && f.now().Sub(m.read) < metaMaxAge {
			return m
		}
		return nil
	}
	if m := current(); m != nil {
		return m, nil
	}
	select {
	case f.reading <- struct{}{}:
		defer func() { <-f.reading }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if m := current(); m != nil { // read while this request waited
		return m, nil
	}
	// A request of its own: the client's cached metadata (kadm's) may be
	// as stale as the one a fetch just failed with.
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(f.topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, f.cl)
	if err != nil {
		return nil, fmt.Errorf("pull: metadata of %s: %w", f.topic, err)
	}
	i := slices.IndexFunc(resp.Topics, func(t kmsg.MetadataResponseTopic) bool { return t.Topic != nil && *t.Topic == f.topic })
	if i < 0 {
		return nil, fmt.Errorf("pull: metadata of %s: not in the answer", f.topic)
	}
	td := resp.Topics[i]
	if err := kerr.ErrorForCode(td.ErrorCode); err != nil || len(td.Partitions) == 0 {
		return nil, fmt.Errorf("pull: metadata of %s: %v", f.topic, err)
	}
	m := &topicMeta{id: td.TopicID, leaders: make([]int32, len(td.Partitions)), read: f.now()}
	for _, pd := range td.Partitions {
		if pd.Partition < 0 || int(pd.Partition) >= len(m.leaders) || pd.Leader < 0 {
			return nil, fmt.Errorf("pull: %s partition %d has no leader", f.topic, pd.Partition)
		}
		m.leaders[pd.Partition] = pd.Leader
	}
	f.mu.Lock()
	f.meta = m
	f.mu.Unlock()
	return m, nil
}

// fetch reads the partitions of order that order[0]'s leader leads, from
// their offsets in pos, with one Fetch request asking for ask bytes: it
// brings back at most max(ask, the largest batch), as a broker returns a
// partition's first batch whatever its size, and decompresses about as
// much (decoder). It returns what it read of them, in order. A partition
// whose offset is out of range fails the fetch with errOutOfRange. A
// fetch that fails otherwise (a leader that moved, a broker gone) is
// made once more on the metadata read anew.
func (f *fetcher) fetch(ctx context.Context, order []int32, pos []int64, ask int32) ([]fetched, error) {
	m, err := f.metadata(ctx, nil)
	if err != nil {
		return nil, err
	}
	got, err := f.fetchFrom(ctx, m, order, pos, ask)
	if err == nil || errors.Is(err, errOutOfRange) || ctx.Err() != nil {
		return got, err
	}
	if m, err = f.metadata(ctx, m); err != nil {
		return nil, err
	}
	return f.fetchFrom(ctx, m, order, pos, ask)
}

func (f *fetcher) fetchFrom(ctx context.Context, m *topicMeta, order []int32, pos []int64, ask int32) ([]fetched, error) {
	var parts []int32
	for _, p := range order {
		if int(p) >= len(m.leaders) {
			return nil, fmt.Errorf("pull: %s has no partition %d", f.topic, p)
		}
		if m.leaders[p] == m.leaders[order[0]] {
			parts = append(parts, p)
		}
	}
	leader := m.leaders[order[0]]
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis = 0
	req.MinBytes = 1
	req.MaxBytes = ask
	req.IsolationLevel = 1 // read_committed
	t := kmsg.NewFetchRequestTopic()
	t.Topic, t.TopicID = f.topic, m.id
	for _, p := range parts {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, pos[p], ask
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
	dec := &decoder{d: f.decompress, limit: int(ask)}
	got := make(map[int32]fetched, len(parts))
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
			refused := dec.refused
			fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
				Offset:         pos[p],
				IsolationLevel: kgo.ReadCommitted(),
				Topic:          f.topic,
				Partition:      p,
			}, rp, dec, nil)
			rp.RecordBatches = nil // as received: the records are decoded
			// A batch the decoder refused ends the partition's records
			// as a truncated one would: the next fetch reads on from it.
			if fp.Err != nil && len(fp.Records) == 0 && dec.refused == refused {
				return nil, fmt.Errorf("pull: fetch partition %d: %w", p, fp.Err)
			}
			if len(fp.Records) > 0 {
				next = max(next, fp.Records[len(fp.Records)-1].Offset+1)
			}
			got[p] = fetched{partition: p, recs: fp.Records, next: max(next, pos[p]), lso: rp.LastStableOffset}
		}
	}
	out := make([]fetched, 0, len(parts))
	for _, p := range parts {
		g, ok := got[p]
		if !ok { // left out of a full response
			g = fetched{partition: p, next: pos[p], lso: -1}
		}
		out = append(out, g)
	}
	return out, nil
}

// decoder decompresses one fetch's batches while what they decompressed
// to stays within limit bytes (the first batch whatever its size): a
// fetch asking for little cannot decompress to much. A batch past the
// limit is refused, which ends its partition's records there.
type decoder struct {
	d        kgo.Decompressor
	limit, n int
	refused  int // batches refused
}

var errDecodeLimit = errors.New("pull: the fetch decompressed as much as it asked for")

func (d *decoder) Decompress(src []byte, codec kgo.CompressionCodecType) ([]byte, error) {
	if d.n > 0 && d.n >= d.limit {
		d.refused++
		return nil, errDecodeLimit
	}
	out, err := d.d.Decompress(src, codec)
	if err != nil {
		return nil, err
	}
	if d.n > 0 && d.n+len(out) > d.limit {
		d.refused++
		return nil, errDecodeLimit
	}
	d.n += len(out)
	return out, nil
}
