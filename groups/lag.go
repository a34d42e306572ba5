package groups

import (
	"cmp"
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

// Unit is what a count of records is in.
type Unit string

const (
	// Events are the records a read_committed consumer receives, counted
	// by reading them.
	Events Unit = "events"
	// Offsets are the offsets the records take, not counted record by
	// record: on a topic written in transactions each transaction's
	// commit marker takes one (and aborted records theirs), so they are
	// an upper bound of the events, up to twice them for transactions of
	// one record. A count is in offsets where there were too many records
	// to read (countBudget).
	Offsets Unit = "offsets"
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
	// Lag is what the group has still to read, in Unit: the events up to
	// End, or the offsets from the first of them to End. See measure.
	Lag  int64 `json:"lag"`
	Unit Unit  `json:"unit"`
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
	// Total is the partitions' lags added up: in Events when every one
	// is, else in Offsets (an upper bound of the events).
	Total int64 `json:"total"`
	Unit  Unit  `json:"unit"`
}

// measure reports the lag of group (a name Resolve accepts; an error when
// nobody has joined it or committed for it), or with group empty of every
// group of the deployment: the processor and retry groups,
// and each "<prefix>-sub-*" group the cluster lists. Each group covers
// every partition of the topic it consumes, plus any other topic it has
// committed offsets on.
//
// It is measured as a read_committed consumer sees the log, from the
// first record the group would read to the last stable offset (an open
// transaction is not lag). It reads those records, and counts them: the
// lag is in events, transaction markers and aborted records left out.
// Past limit (countBudget: 1 MiB of records a partition, 8 MiB in all) it
// counts offsets instead, from the first unread record to the end, and
// says so (Unit Offsets): an upper bound, as each transaction's commit
// marker between them takes an offset. Either way a caught-up group
// lags 0, although franz-go commits the offset after the last record it
// returned, which leaves the commit marker closing a transaction ahead
// of it.
//
// With nothing committed, the group starts where its consumers do: the
// log start for the processor and retry groups and the groups of pulled
// (full names: pull subscriptions', where a pull reads), the end for the
// other subscriptions, as dispatchers read them. Records are read within
// limit; with probeOnly every lag is in offsets. Service.Lags, the one way
// lag is read outside this package, says which groups are pulled.
func measure(ctx context.Context, c topics.Cluster, group string, pulled map[string]bool, limit budget) ([]GroupLag, error) {
	adm := c.Admin()
	list, err := lagGroups(ctx, adm, c.Names, group)
	if err != nil {
		return nil, err
	}
	infos, err := describe(ctx, adm, list...)
	if err != nil {
		return nil, err
	}
	groups, all, err := consumedBy(ctx, adm, c.Names, list, pulled)
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
	out, from, spans, err := lagRows(list, infos, groups, logs)
	if err != nil {
		return nil, err
	}
	tallies, err := countSpans(ctx, c.Client, logs.details, spans, limit)
	if err != nil {
		return nil, err
	}
	for i := range out {
		gl := &out[i]
		gl.Unit = Events
		for j := range gl.Partitions {
			pl := &gl.Partitions[j]
			pl.Unit = Events
			if s := (span{pl.Topic, pl.Partition, from[i][j], pl.End}); s.from < s.to {
				pl.Lag, pl.Unit = tallies[s].count(s)
			}
			gl.Total += pl.Lag
			if pl.Unit == Offsets {
				gl.Unit = Offsets
			}
		}
	}
	return out, nil
}

// consumed is what one group consumes: its committed offsets and its
// topics, its own first and then any other it committed offsets on.
type consumed struct {
	kind kind
	// fromStart: without a commit, its consumers read a partition from
	// its start.
	fromStart bool
	committed kadm.OffsetResponses
	topics    []string
}

// consumedBy reads what each group of list consumes, and all the topics
// of them together.
func consumedBy(ctx context.Context, adm *kadm.Client, names topics.Names, list []string, pulled map[string]bool) ([]consumed, []string, error) {
	groups := make([]consumed, len(list))
	var all []string
	for i, g := range list {
		k, _ := classify(names, topics.Group(g))
		c, err := committedOffsets(ctx, adm, g)
		if err != nil {
			return nil, nil, err
		}
		m := consumed{kind: k, fromStart: k.startsAtStart(pulled[g]), committed: c, topics: []string{string(k.topic(names))}}
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
// from holds, per group and row, where its consumer reads from, and spans
// the ranges left to read, to be counted.
func lagRows(list []string, infos map[string]groupInfo, groups []consumed, l logs) (out []GroupLag, from [][]int64, spans []span, err error) {
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
				case c < 0 && m.fromStart:
					pos = l.starts[t][p]
				case c < 0:
					pos = e[p]
				}
				pos = max(pos, l.starts[t][p]) // below the log start, a consumer resets
				if pos < e[p] {
					spans = append(spans, span{t, p, pos, e[p]})
				}
				gl.Partitions = append(gl.Partitions, PartitionLag{Topic: t, Partition: p, Committed: c, End: e[p], Member: info.owners[topicPartition{t, p}]})
				from[i] = append(from[i], pos)
			}
		}
		out[i] = gl
	}
	return out, from, spans, nil
}

// lagGroups lists the groups measure reports.
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

// span is a range of one partition to count, [from, to).
type span struct {
	topic     string
	partition int32
	from, to  int64
}

// tally is what reading a span found: the offset of its first record
// (to when it has none), and its records when all of it was read.
type tally struct {
	first  int64
	events int64
	exact  bool
}

// count is the span's count: its events when they were all read, else
// the offsets from its first record to its end, an upper bound of them.
func (t tally) count(s span) (int64, Unit) {
	if t.exact {
		return t.events, Events
	}
	return s.to - t.first, Offsets
}

// budget bounds the bytes countSpans reads to count: per partition, and
// in all. The first fetch of each span, which finds its first record, is
// made whatever the budget.
type budget struct {
	partition, query int64
}

// Bounds of the reading that counts records: a span read within them is
// counted in events, one past them in offsets.
var (
	// countBudget is what measure and PlanReplay read: 1 MiB per partition,
	// 8 MiB per query.
	countBudget = budget{partition: 1 << 20, query: 8 << 20}
	// probeOnly finds the first records and counts nothing more.
	probeOnly = budget{}
)

const (
	// countRounds bounds the fetches per span.
	countRounds = 16
	// probeBytes is the first fetch of a span: small, as its first record
	// matters most (the broker returns a whole batch anyway).
	probeBytes = 64 << 10
)

// reading is one span being counted.
type reading struct {
	span
	at      int64 // next offset to fetch
	read    int64 // bytes fetched
	fetches int
	tally
	done bool
}

// countSpans reads each span as a read_committed consumer does (aborted
// records and transaction markers skipped) within limit, and tallies its
// records. It fetches with the caller's client, straight from the
// partition leaders.
func countSpans(ctx context.Context, cl *kgo.Client, details kadm.TopicDetails, spans []span, limit budget) (map[span]tally, error) {
	readings := make([]*reading, 0, len(spans))
	for _, s := range spans {
		if !slices.ContainsFunc(readings, func(r *reading) bool { return r.span == s }) {
			readings = append(readings, &reading{span: s, at: s.from, tally: tally{first: -1}})
		}
	}
	names := make(map[[16]byte]string, len(details))
	for t, d := range details {
		names[[16]byte(d.ID)] = t
	}
	decompressor := kgo.DefaultDecompressor()
	var spent int64
	for range countRounds {
		fetches, err := countFetches(details, readings, limit, spent)
		if err != nil {
			return nil, err
		}
		if len(fetches) == 0 {
			break
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
				topic := cmp.Or(rt.Topic, names[rt.TopicID])
				for i := range rt.Partitions {
					rp := &rt.Partitions[i]
					if r, ok := f.index[topicPartition{topic, rp.Partition}]; ok {
						spent += int64(len(rp.RecordBatches))
						if err := r.take(rp, decompressor); err != nil {
							return nil, err
						}
					}
				}
			}
		}
	}
	out := make(map[span]tally, len(readings))
	for _, r := range readings {
		if r.first < 0 {
			r.first = r.at // no record before where the reading stopped
		}
		r.exact = r.exact && limit != probeOnly // asked for offsets only
		out[r.span] = r.tally
	}
	return out, nil
}

// take tallies what one fetch of r's partition brought back.
func (r *reading) take(rp *kmsg.FetchResponseTopicPartition, decompressor kgo.Decompressor) error {
	r.fetches++
	r.read += int64(len(rp.RecordBatches))
	if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
		if errors.Is(err, kerr.OffsetOutOfRange) { // retention moved the start meanwhile
			r.done = true
			return nil
		}
		return fmt.Errorf("groups: read %s/%d at %d: %w", r.topic, r.partition, r.at, err)
	}
	fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		Offset:         r.at,
		IsolationLevel: kgo.ReadCommitted(),
		Topic:          r.topic,
		Partition:      r.partition,
	}, rp, decompressor, nil)
	if fp.Err != nil {
		return fmt.Errorf("groups: read %s/%d at %d: %w", r.topic, r.partition, r.at, fp.Err)
	}
	for _, rec := range fp.Records {
		if rec.Offset >= r.to {
			break
		}
		if r.first < 0 {
			r.first = rec.Offset
		}
		r.events++
	}
	switch {
	case next >= r.to:
		if r.first < 0 {
			r.first = r.to
		}
		r.exact, r.done = true, true
	case next <= r.at && len(fp.Records) == 0: // nothing readable returned
		r.done = true
	default:
		r.at = next
	}
	return nil
}

type topicPartition struct {
	topic     string
	partition int32
}

// countFetch is one fetch request to a partition leader.
type countFetch struct {
	leader int32
	req    *kmsg.FetchRequest
	index  map[topicPartition]*reading
}

// countFetches builds the next fetches of the readings not done, within
// limit of which spent is spent: one request per leader, more when
// several readings share a partition. A reading whose first fetch is
// made and that has no budget left is done.
func countFetches(details kadm.TopicDetails, readings []*reading, limit budget, spent int64) ([]countFetch, error) {
	var fetches []countFetch
	asked := spent
	for _, r := range readings {
		if r.done {
			continue
		}
		ask := int64(probeBytes)
		if r.fetches > 0 {
			ask = min(limit.partition-r.read, limit.query-asked)
			if ask <= 0 {
				r.done = true
				continue
			}
		}
		asked += ask
		pd, ok := details[r.topic].Partitions[r.partition]
		if !ok || pd.Leader < 0 {
			return nil, fmt.Errorf("groups: partition %s/%d has no leader", r.topic, r.partition)
		}
		tp := topicPartition{r.topic, r.partition}
		i := slices.IndexFunc(fetches, func(f countFetch) bool {
			_, busy := f.index[tp]
			return f.leader == pd.Leader && !busy
		})
		if i < 0 {
			req := kmsg.NewPtrFetchRequest()
			req.MaxWaitMillis = 0
			req.MaxBytes = 0       // the partitions' asks are added up
			req.IsolationLevel = 1 // read_committed
			fetches = append(fetches, countFetch{leader: pd.Leader, req: req, index: make(map[topicPartition]*reading)})
			i = len(fetches) - 1
		}
		f := &fetches[i]
		f.index[tp] = r
		f.req.MaxBytes += int32(ask)
		j := slices.IndexFunc(f.req.Topics, func(rt kmsg.FetchRequestTopic) bool { return rt.Topic == r.topic })
		if j < 0 {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = r.topic
			rt.TopicID = [16]byte(details[r.topic].ID)
			f.req.Topics = append(f.req.Topics, rt)
			j = len(f.req.Topics) - 1
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = r.partition
		rp.FetchOffset = r.at
		rp.PartitionMaxBytes = int32(ask)
		f.req.Topics[j].Partitions = append(f.req.Topics[j].Partitions, rp)
	}
	return fetches, nil
}
