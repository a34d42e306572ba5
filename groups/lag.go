package groups

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/topics"
)

// PartitionLag is how far a group is behind on one partition.
type PartitionLag struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Committed is the group's committed offset, -1 when it has none.
	Committed int64 `json:"committed"`
	// End is the last stable offset, where a read_committed consumer stops:
	// the high watermark unless a transaction is open.
	End int64 `json:"end"`
	// Lag is End minus the offset of the first record the group has not
	// read. See Lag for how transaction markers count.
	Lag int64 `json:"lag"`
	// Member is the group member assigned the partition (as Members
	// names it), empty when none is.
	Member string `json:"member,omitempty"`
}

// GroupLag is one group's lag over the partitions of its topics.
type GroupLag struct {
	Group string `json:"group"`
	// State is Kafka's group state: Stable, Empty, PreparingRebalance,
	// CompletingRebalance, or Dead for a group that does not exist.
	State   string `json:"state"`
	Members int    `json:"members"`
	// MemberNames name the active members: static instance id or member
	// id (which starts with the client id), and host.
	MemberNames []string       `json:"member_names"`
	Partitions  []PartitionLag `json:"partitions"`
	Total       int64          `json:"total"`
}

// Lag reports the lag of group (a name Resolve accepts; an error when
// nobody has joined it or committed for it), or with group empty of every
// group of the deployment: the processor and retry groups,
// and each "<prefix>-sub-*" group the cluster lists. Each group covers
// every partition of the topic it consumes, plus any other topic it has
// committed offsets on.
//
// Lag is measured as a read_committed consumer sees the log. The end is
// the last stable offset, so an open transaction is not lag. The start is
// the first record the group would read: franz-go commits the offset after
// the last record it returned, which leaves the commit marker closing a
// transaction (and any aborted records) ahead of a consumer that has read
// everything, so Lag reads the partition from the committed offset and
// skips them: a caught-up group lags 0, not 1. Markers between unread
// records still count, so on transactional topics Lag exceeds the number
// of records to read by at most the number of transactions among them.
// With nothing committed, the group starts where its consumers do: the log
// start for the processor and retry groups, the end for subscriptions.
func Lag(ctx context.Context, c topics.Cluster, group string) ([]GroupLag, error) {
	adm := c.Admin()
	list, err := lagGroups(ctx, adm, c.Names, group)
	if err != nil {
		return nil, err
	}
	infos, err := describe(ctx, adm, list...)
	if err != nil {
		return nil, err
	}
	groups, all, err := consumedBy(ctx, adm, c.Names, list)
	if err != nil {
		return nil, err
	}
	if group != "" && infos[list[0]].state == "Dead" && len(groups[0].committed) == 0 {
		return nil, admin.Of(ErrNoGroup, fmt.Errorf("group %s does not exist: no consumer has joined it or committed offsets", list[0]))
	}
	logs, err := readLogs(ctx, adm, all)
	if err != nil {
		return nil, err
	}
	out, from, probes, err := lagRows(list, infos, groups, logs)
	if err != nil {
		return nil, err
	}
	first, err := firstUnread(ctx, c.Client, logs.details, logs.ends, probes)
	if err != nil {
		return nil, err
	}
	for i := range out {
		gl := &out[i]
		for j := range gl.Partitions {
			pl := &gl.Partitions[j]
			pos := from[i][j]
			if f, ok := first[position{pl.Topic, pl.Partition, pos}]; ok {
				pos = f
			}
			pl.Lag = max(pl.End-pos, 0)
			gl.Total += pl.Lag
		}
	}
	return out, nil
}

// consumed is what one group consumes: its committed offsets and its
// topics, its own first and then any other it committed offsets on.
type consumed struct {
	kind      kind
	committed kadm.OffsetResponses
	topics    []string
}

// consumedBy reads what each group of list consumes, and all the topics
// of them together.
func consumedBy(ctx context.Context, adm *kadm.Client, names topics.Names, list []string) ([]consumed, []string, error) {
	groups := make([]consumed, len(list))
	var all []string
	for i, g := range list {
		k, _ := classify(names, topics.Group(g))
		c, err := committedOffsets(ctx, adm, g)
		if err != nil {
			return nil, nil, err
		}
		m := consumed{kind: k, committed: c, topics: []string{string(k.topic(names))}}
		var others []string
		for t := range c {
			if t != m.topics[0] {
				others = append(others, t)
			}
		}
		slices.Sort(others)
		m.topics = append(m.topics, others...)
		groups[i] = m
		for _, t := range m.topics {
			if !slices.Contains(all, t) {
				all = append(all, t)
			}
		}
	}
	return groups, all, nil
}

// logs are the partitions of some topics and where each log starts and
// ends (the last stable offset). A topic that does not exist is in
// neither ends nor starts.
type logs struct {
	details      kadm.TopicDetails
	ends, starts map[string]map[int32]int64
}

// readLogs lists the partitions and offsets of topics.
func readLogs(ctx context.Context, adm *kadm.Client, all []string) (logs, error) {
	details, err := adm.ListTopics(ctx, all...)
	if err != nil {
		return logs{}, fmt.Errorf("groups: describe topics: %w", err)
	}
	starts, err := adm.ListStartOffsets(ctx, all...)
	if err != nil {
		return logs{}, fmt.Errorf("groups: start offsets: %w", err)
	}
	stable, err := adm.ListCommittedOffsets(ctx, all...)
	if err != nil {
		return logs{}, fmt.Errorf("groups: end offsets: %w", err)
	}
	l := logs{details: details, ends: make(map[string]map[int32]int64), starts: make(map[string]map[int32]int64)}
	for _, t := range all {
		e, err := partitionOffsets(stable, "end", t)
		if err != nil {
			return logs{}, err
		}
		s, err := partitionOffsets(starts, "start", t)
		if err != nil {
			return logs{}, err
		}
		if e != nil && s != nil { // a missing topic is fatal for its own group only
			l.ends[t], l.starts[t] = e, s
		}
	}
	return l, nil
}

// lagRows builds the rows of each group of list, without their lag yet:
// from holds, per group and row, where its consumer reads from, and probes
// the positions short of their end, whose first unread record is to be
// found.
func lagRows(list []string, infos map[string]groupInfo, groups []consumed, l logs) (out []GroupLag, from [][]int64, probes []position, err error) {
	out = make([]GroupLag, len(list))
	from = make([][]int64, len(list))
	for i, g := range list {
		m := groups[i]
		info := infos[g]
		gl := GroupLag{Group: g, State: info.state, Members: len(info.members), MemberNames: append([]string{}, info.members...)}
		for j, t := range m.topics {
			e, ok := l.ends[t]
			if !ok {
				if j == 0 {
					return nil, nil, nil, errNoTopic(t)
				}
				continue // offsets left on a deleted topic
			}
			for _, p := range sortedPartitions(e) {
				c, err := committedAt(m.committed, t, p)
				if err != nil {
					return nil, nil, nil, err
				}
				pos := c
				switch {
				case c < 0 && m.kind.startsAtEnd():
					pos = e[p]
				case c < 0:
					pos = l.starts[t][p]
				}
				pos = max(pos, l.starts[t][p]) // below the log start, a consumer resets
				if pos < e[p] {
					probes = append(probes, position{t, p, pos})
				}
				gl.Partitions = append(gl.Partitions, PartitionLag{Topic: t, Partition: p, Committed: c, End: e[p], Member: info.owners[topicPartition{t, p}]})
				from[i] = append(from[i], pos)
			}
		}
		out[i] = gl
	}
	return out, from, probes, nil
}

// lagGroups lists the groups Lag reports.
func lagGroups(ctx context.Context, adm *kadm.Client, names topics.Names, group string) ([]string, error) {
	if group != "" {
		g, err := Resolve(names, group)
		if err != nil {
			return nil, err
		}
		return []string{string(g)}, nil
	}
	out := []string{string(names.ProcessorGroup()), string(names.RetryGroup())}
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("groups: list groups: %w", err)
	}
	for _, l := range listed.Sorted() {
		if k, ok := classify(names, topics.Group(l.Group)); ok && k == kindSubscription {
			out = append(out, l.Group)
		}
	}
	return out, nil
}

// position is an offset in one partition.
type position struct {
	topic     string
	partition int32
	offset    int64
}

const (
	// probeRounds bounds the fetches per partition when looking for the
	// first unread record past markers and aborted transactions; what is
	// left after them counts as lag.
	probeRounds = 8
	// probePartitionBytes is the fetch size per partition: small, as only
	// the first record matters (the broker returns a whole batch anyway).
	probePartitionBytes = 64 << 10
)

// firstUnread returns, for each position, the offset of the first record a
// read_committed consumer positioned there would receive, or the end when
// it would receive none. It fetches with the caller's client, straight
// from the partition leaders.
func firstUnread(ctx context.Context, cl *kgo.Client, details kadm.TopicDetails, ends map[string]map[int32]int64, from []position) (map[position]int64, error) {
	found := make(map[position]int64, len(from))
	at := make(map[position]int64, len(from)) // next offset to fetch
	for _, p := range from {
		at[p] = p.offset
	}
	names := make(map[[16]byte]string, len(details))
	for t, d := range details {
		names[[16]byte(d.ID)] = t
	}
	decompressor := kgo.DefaultDecompressor()
	for round := 0; round < probeRounds && len(at) > 0; round++ {
		fetches, err := probeFetches(details, at)
		if err != nil {
			return nil, err
		}
		for _, f := range fetches {
			resp, err := f.req.RequestWith(ctx, cl.Broker(int(f.leader)))
			if err != nil {
				return nil, fmt.Errorf("groups: read from broker %d: %w", f.leader, err)
			}
			if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
				return nil, fmt.Errorf("groups: read from broker %d: %w", f.leader, err)
			}
			for _, rt := range resp.Topics {
				topic := rt.Topic
				if topic == "" {
					topic = names[rt.TopicID]
				}
				for i := range rt.Partitions {
					rp := &rt.Partitions[i]
					pos, ok := f.index[topicPartition{topic, rp.Partition}]
					if !ok {
						continue
					}
					off, end := at[pos], ends[pos.topic][pos.partition]
					if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
						if errors.Is(err, kerr.OffsetOutOfRange) { // retention moved the start meanwhile
							found[pos] = off
							delete(at, pos)
							continue
						}
						return nil, fmt.Errorf("groups: read %s/%d at %d: %w", pos.topic, pos.partition, off, err)
					}
					fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
						Offset:         off,
						IsolationLevel: kgo.ReadCommitted(),
						Topic:          pos.topic,
						Partition:      pos.partition,
					}, rp, decompressor, nil)
					if fp.Err != nil {
						return nil, fmt.Errorf("groups: read %s/%d at %d: %w", pos.topic, pos.partition, off, fp.Err)
					}
					switch {
					case len(fp.Records) > 0:
						found[pos] = min(fp.Records[0].Offset, end)
					case next >= end:
						found[pos] = end
					case next <= off: // nothing readable returned: count from here
						found[pos] = off
					default:
						at[pos] = next
						continue
					}
					delete(at, pos)
				}
			}
		}
	}
	for pos, off := range at {
		found[pos] = off
	}
	return found, nil
}

type topicPartition struct {
	topic     string
	partition int32
}

// probeFetch is one fetch request to a partition leader.
type probeFetch struct {
	leader int32
	req    *kmsg.FetchRequest
	index  map[topicPartition]position
}

// probeFetches builds the fetches for the positions: one request per
// leader, more when several positions share a partition.
func probeFetches(details kadm.TopicDetails, at map[position]int64) ([]probeFetch, error) {
	var fetches []probeFetch
	for pos, off := range at {
		d := details[pos.topic]
		pd, ok := d.Partitions[pos.partition]
		if !ok || pd.Leader < 0 {
			return nil, fmt.Errorf("groups: partition %s/%d has no leader", pos.topic, pos.partition)
		}
		tp := topicPartition{pos.topic, pos.partition}
		i := slices.IndexFunc(fetches, func(f probeFetch) bool {
			_, busy := f.index[tp]
			return f.leader == pd.Leader && !busy
		})
		if i < 0 {
			req := kmsg.NewPtrFetchRequest()
			req.MaxWaitMillis = 0
			req.MaxBytes = 1 << 20
			req.IsolationLevel = 1 // read_committed
			fetches = append(fetches, probeFetch{leader: pd.Leader, req: req, index: make(map[topicPartition]position)})
			i = len(fetches) - 1
		}
		f := &fetches[i]
		f.index[tp] = pos
		j := slices.IndexFunc(f.req.Topics, func(rt kmsg.FetchRequestTopic) bool { return rt.Topic == pos.topic })
		if j < 0 {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = pos.topic
			rt.TopicID = [16]byte(d.ID)
			f.req.Topics = append(f.req.Topics, rt)
			j = len(f.req.Topics) - 1
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = pos.partition
		rp.FetchOffset = off
		rp.PartitionMaxBytes = probePartitionBytes
		f.req.Topics[j].Partitions = append(f.req.Topics[j].Partitions, rp)
	}
	return fetches, nil
}
