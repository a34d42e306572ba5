package groups

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/topics"
)

// Target is where a replay moves a group's committed offsets. Exactly one
// field is set.
type Target struct {
	// Earliest is the log start: everything retained is read again.
	Earliest bool
	// Latest is the end (the last stable offset): everything not yet read
	// is skipped.
	Latest bool
	// Time is the first record with a timestamp at or after it.
	Time time.Time
	// Duration means Time = now - Duration, taken when the plan is made.
	Duration time.Duration
	// Offsets are explicit offsets by partition; only these partitions move.
	Offsets map[int32]int64
}

// Target kinds, as ParseTarget and the admin API name them.
const (
	TargetEarliest = "earliest"
	TargetLatest   = "latest"
	TargetTime     = "time"
	TargetDuration = "duration"
	TargetOffsets  = "offsets"
)

// ParseTarget reads a target of kind with its value: none for earliest and
// latest, an RFC 3339 time for time, a positive duration (90m, 2h) for
// duration, partition:offset pairs (ParseOffsets) for offsets. Its errors
// are ErrInvalid.
func ParseTarget(kind, value string) (Target, error) {
	var t Target
	switch kind {
	case TargetEarliest, TargetLatest:
		if value != "" {
			return Target{}, invalidf("target %s takes no value, got %q", kind, value)
		}
		t.Earliest, t.Latest = kind == TargetEarliest, kind == TargetLatest
	case TargetTime:
		at, err := time.Parse(time.RFC3339, value)
		if err != nil {
			return Target{}, invalidf("%q: not an RFC 3339 time such as 2026-11-21T10:00:00Z", value)
		}
		t.Time = at
	case TargetDuration:
		d, err := time.ParseDuration(value)
		if err != nil || d <= 0 {
			return Target{}, invalidf("%q: not a positive duration such as 90m or 2h", value)
		}
		t.Duration = d
	case TargetOffsets:
		offsets, err := ParseOffsets(value)
		if err != nil {
			return Target{}, admin.Of(ErrInvalid, err)
		}
		t.Offsets = offsets
	default:
		return Target{}, invalidf("unknown target %q: want earliest, latest, time, duration or offsets", kind)
	}
	return t, nil
}

// String says where t moves a group, as a plan's header says it.
func (t Target) String() string {
	switch {
	case t.Earliest:
		return "the log start"
	case t.Latest:
		return "the end"
	case !t.Time.IsZero():
		return "the first records at or after " + t.Time.UTC().Format(time.RFC3339)
	case t.Duration != 0:
		return "the first records of the last " + shortDuration(t.Duration)
	default:
		parts := make([]string, 0, len(t.Offsets))
		for _, p := range sortedPartitions(t.Offsets) {
			parts = append(parts, fmt.Sprintf("%d:%d", p, t.Offsets[p]))
		}
		return "offsets " + strings.Join(parts, ",")
	}
}

// shortDuration writes d as time.Duration does, without zero minutes or
// seconds at the end: 2h, 1h30m, 90s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func (t Target) validate() error {
	n := 0
	for _, set := range []bool{t.Earliest, t.Latest, !t.Time.IsZero(), t.Duration != 0, t.Offsets != nil} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		return invalidf("replay target: none set (want earliest, latest, a time, a duration or offsets)")
	case n > 1:
		return invalidf("replay target: %d set, want exactly one", n)
	case t.Duration < 0:
		return invalidf("replay target: duration %v is negative", t.Duration)
	case t.Offsets != nil && len(t.Offsets) == 0:
		return invalidf("replay target: no offsets")
	}
	for _, p := range sortedPartitions(t.Offsets) {
		if p < 0 || t.Offsets[p] < 0 {
			return invalidf("replay target: %d:%d is not a partition and an offset", p, t.Offsets[p])
		}
	}
	return nil
}

// ParseOffsets parses partition:offset pairs separated by commas, such as
// "0:15,3:200". Partitions and offsets are decimal and not negative, a
// partition appears once, spaces around entries are allowed.
func ParseOffsets(s string) (map[int32]int64, error) {
	const want = "want partition:offset pairs such as 0:15,3:200"
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("no offsets: " + want)
	}
	out := make(map[int32]int64)
	for entry := range strings.SplitSeq(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return nil, fmt.Errorf("empty entry in %q: %s", s, want)
		}
		ps, os, ok := strings.Cut(entry, ":")
		if !ok {
			return nil, fmt.Errorf("%q is not partition:offset (%s)", entry, want)
		}
		p, err := strconv.ParseInt(strings.TrimSpace(ps), 10, 32)
		if err != nil || p < 0 {
			return nil, fmt.Errorf("%q: partition %q is not a partition number", entry, ps)
		}
		o, err := strconv.ParseInt(strings.TrimSpace(os), 10, 64)
		if err != nil || o < 0 {
			return nil, fmt.Errorf("%q: offset %q is not an offset (want 0 or more)", entry, os)
		}
		if _, dup := out[int32(p)]; dup {
			return nil, fmt.Errorf("partition %d appears twice", p)
		}
		out[int32(p)] = o
	}
	return out, nil
}

// Clamping notes of a Move.
const (
	ClampedToStart = "to log start"
	ClampedToEnd   = "to log end"
	// ClampedToCurrent: a time target ahead of the group's offset; a replay
	// only moves back, so the group keeps its offset and skips nothing.
	ClampedToCurrent = "to the group's offset: not read that far yet"
)

// Move is what a replay does to one partition. Its counts are in Unit:
// events, or offsets where there were too many records to read and count
// them (as measure counts).
type Move struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Current is the committed offset, -1 when there is none.
	Current int64 `json:"current"`
	Target  int64 `json:"target"`
	// Reread is what the group reads again: from Target to Current, or
	// with nothing committed from Target to the end.
	Reread int64 `json:"reread"`
	// Skip is what the group passes over unread when Target is ahead of
	// Current: passing over commit markers alone skips 0.
	Skip int64 `json:"skip"`
	Unit Unit  `json:"unit"`
	// Clamped says the requested target lay outside the log and was moved
	// to its start or end (ClampedToStart, ClampedToEnd), or is empty.
	Clamped string `json:"clamped,omitempty"`
}

// Plan is a replay of one group on one topic, made by PlanReplay and
// carried out by Execute.
type Plan struct {
	Group string `json:"group"`
	Topic string `json:"topic"`
	// Target says where the plan moves the group (Target.String).
	Target string `json:"target"`
	Moves  []Move `json:"moves"`
	// Members are the group's active members when the plan was made;
	// Execute refuses while the group has any.
	Members []string `json:"members"`
	// Effect says what replaying means for this group.
	Effect string `json:"effect"`
}

// Reread is the total of the moves' Reread, and its unit: Events when
// every move's is, else Offsets (an upper bound of the events).
func (p Plan) Reread() (int64, Unit) {
	return p.total(func(m Move) int64 { return m.Reread })
}

// Skipped is the total of the moves' Skip, and its unit, as Reread's.
func (p Plan) Skipped() (int64, Unit) {
	return p.total(func(m Move) int64 { return m.Skip })
}

// total adds up the moves' count, in Events unless one of those counted
// is in Offsets.
func (p Plan) total(count func(Move) int64) (int64, Unit) {
	var n int64
	u := Events
	for _, m := range p.Moves {
		if c := count(m); c > 0 {
			n += c
			if m.Unit == Offsets {
				u = Offsets
			}
		}
	}
	return n, u
}

// PlanReplay plans moving group (a name Resolve accepts) to t on topic,
// by default the group's own: <prefix>.ingest for the processor,
// <prefix>.events for subscriptions, <prefix>.delivery-retry for the retry
// group. partitions limits the plan (nil: every partition; with
// t.Offsets, the partitions are the offsets'). Targets outside the log are
// clamped to its start or end, and the move says so. Nothing is changed.
func PlanReplay(ctx context.Context, c topics.Cluster, group, topic string, partitions []int32, t Target) (Plan, error) {
	adm := c.Admin()
	names := c.Names
	g, err := Resolve(names, group)
	if err != nil {
		return Plan{}, err
	}
	if err := t.validate(); err != nil {
		return Plan{}, err
	}
	if t.Offsets != nil && partitions != nil {
		return Plan{}, invalidf("replay: offsets name their partitions; give no partition list with them")
	}
	k, _ := classify(names, g)
	if topic == "" {
		topic = string(k.topic(names))
	}
	infos, err := describe(ctx, adm, string(g))
	if err != nil {
		return Plan{}, err
	}
	plan := Plan{
		Group:   string(g),
		Topic:   topic,
		Target:  t.String(),
		Members: append([]string{}, infos[string(g)].members...),
		Effect:  k.effect(names, g),
	}

	start, end, err := bounds(ctx, adm, topic)
	if err != nil {
		return Plan{}, err
	}
	committed, err := committedOffsets(ctx, adm, string(g))
	if err != nil {
		return Plan{}, err
	}
	ps, err := t.partitions(partitions, topic, end)
	if err != nil {
		return Plan{}, err
	}
	byTime, err := t.offsetsByTime(ctx, adm, topic)
	if err != nil {
		return Plan{}, err
	}
	for _, p := range ps {
		at, err := committedAt(committed, topic, p)
		if err != nil {
			return Plan{}, err
		}
		plan.Moves = append(plan.Moves, t.move(topic, p, at, start[p], end[p], byTime))
	}
	if err := countMoves(ctx, c.Client, adm, topic, end, plan.Moves); err != nil {
		return Plan{}, err
	}
	return plan, nil
}

// countMoves counts the records each move re-reads or skips, reading
// them within countBudget, as measure counts.
func countMoves(ctx context.Context, cl *kgo.Client, adm *kadm.Client, topic string, end map[int32]int64, moves []Move) error {
	spans := make([]span, len(moves))
	for i, m := range moves {
		switch {
		case m.Skip > 0:
			spans[i] = span{topic, m.Partition, m.Current, m.Target}
		case m.Reread > 0:
			spans[i] = span{topic, m.Partition, m.Target, m.Current}
			if m.Current < 0 {
				spans[i].to = end[m.Partition]
			}
		}
	}
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("groups: describe %s: %w", topic, err)
	}
	counted := slices.DeleteFunc(slices.Clone(spans), func(s span) bool { return s.from >= s.to })
	tallies, err := countSpans(ctx, cl, details, counted, countBudget)
	if err != nil {
		return err
	}
	for i := range moves {
		m, s := &moves[i], spans[i]
		m.Unit = Events
		switch {
		case s.from >= s.to:
		case m.Skip > 0:
			m.Skip, m.Unit = tallies[s].count(s)
		default:
			m.Reread, m.Unit = tallies[s].count(s)
		}
	}
	return nil
}

// bounds lists where each partition of topic starts and ends (the last
// stable offset).
func bounds(ctx context.Context, adm *kadm.Client, topic string) (start, end map[int32]int64, err error) {
	listed, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, nil, fmt.Errorf("groups: start offsets of %s: %w", topic, err)
	}
	if start, err = partitionOffsets(listed, "start", topic); err != nil {
		return nil, nil, err
	}
	if listed, err = adm.ListCommittedOffsets(ctx, topic); err != nil {
		return nil, nil, fmt.Errorf("groups: end offsets of %s: %w", topic, err)
	}
	if end, err = partitionOffsets(listed, "end", topic); err != nil {
		return nil, nil, err
	}
	if start == nil || end == nil {
		return nil, nil, errNoTopic(topic)
	}
	return start, end, nil
}

// partitions are the partitions a replay to t moves, sorted: those its
// offsets name, else those asked for, else all of topic (whose ends are
// end).
func (t Target) partitions(asked []int32, topic string, end map[int32]int64) ([]int32, error) {
	var ps []int32
	switch {
	case t.Offsets != nil:
		ps = sortedPartitions(t.Offsets)
	case asked != nil:
		ps = slices.Compact(slices.Sorted(slices.Values(asked)))
	default:
		ps = sortedPartitions(end)
	}
	for _, p := range ps {
		if _, ok := end[p]; !ok {
			return nil, invalidf("partition %d: %s has partitions 0 to %d", p, topic, len(end)-1)
		}
	}
	return ps, nil
}

// offsetsByTime lists the offsets of topic at t's time, or nil when t is
// not a time.
func (t Target) offsetsByTime(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	if t.Time.IsZero() && t.Duration == 0 {
		return nil, nil
	}
	at := t.Time
	if t.Duration != 0 {
		at = time.Now().Add(-t.Duration)
	}
	listed, err := adm.ListOffsetsAfterMilli(ctx, at.UnixMilli(), topic)
	if err != nil {
		return nil, fmt.Errorf("groups: offsets of %s at %s: %w", topic, at.UTC().Format(time.RFC3339), err)
	}
	return partitionOffsets(listed, "time", topic)
}

// byTime reports whether t is a time (or duration) target: a replay back
// to a moment, as opposed to an explicit move to the end or to offsets.
func (t Target) byTime() bool { return !t.Earliest && !t.Latest && t.Offsets == nil }

// move is the move of partition p, committed at c (-1 for none) in a log
// from start to end, to t (byTime holds t's offsets by time).
func (t Target) move(topic string, p int32, c, start, end int64, byTime map[int32]int64) Move {
	m := Move{Topic: topic, Partition: p, Current: c}
	switch {
	case t.Earliest:
		m.Target = start
	case t.Latest:
		m.Target = end
	case t.Offsets != nil:
		m.Target = t.Offsets[p]
	default:
		m.Target = byTime[p] // the end when no record is that recent
		if m.Target < 0 {
			m.Target = end
		}
	}
	switch {
	case m.Target < start:
		m.Target, m.Clamped = start, ClampedToStart
	case m.Target > end:
		m.Target, m.Clamped = end, ClampedToEnd
	}
	if t.byTime() && c >= 0 && m.Target > c {
		// A group behind the time asked for has yet to read what lies
		// between: moving it there would drop those records unread.
		m.Target, m.Clamped = c, ClampedToCurrent
	}
	switch {
	case c < 0:
		m.Reread = end - m.Target
	case c >= m.Target:
		m.Reread = c - m.Target
	default:
		m.Skip = m.Target - c
	}
	return m
}

// Execute commits the plan's targets as the group's offsets. It refuses
// while the group has active members, naming them, as their own commits
// would overwrite the replay. Every partition's commit is checked; when
// some fail, the error names them and the others stay committed.
func Execute(ctx context.Context, adm *kadm.Client, plan Plan) error {
	return execute(ctx, adm, plan, "")
}

// execute is Execute, each offset committed with metadata meta.
func execute(ctx context.Context, adm *kadm.Client, plan Plan, meta string) error {
	infos, err := describe(ctx, adm, plan.Group)
	if err != nil {
		return err
	}
	now := plan
	now.Members = infos[plan.Group].members
	if err := now.Refusal(); err != nil {
		return err
	}
	var offsets kadm.Offsets
	for _, m := range plan.Moves {
		offsets.Add(kadm.Offset{Topic: m.Topic, Partition: m.Partition, At: m.Target, LeaderEpoch: -1, Metadata: meta})
	}
	resps, err := adm.CommitOffsets(ctx, plan.Group, offsets)
	if err != nil {
		return fmt.Errorf("groups: commit offsets of %s: %w", plan.Group, err)
	}
	var failed []string
	joined := false
	for _, m := range plan.Moves {
		r, ok := resps.Lookup(m.Topic, m.Partition)
		switch {
		case !ok:
			failed = append(failed, fmt.Sprintf("%s/%d: no answer", m.Topic, m.Partition))
		case r.Err != nil:
			failed = append(failed, fmt.Sprintf("%s/%d: %v", m.Topic, m.Partition, r.Err))
			joined = joined || errors.Is(r.Err, kerr.UnknownMemberID) || errors.Is(r.Err, kerr.IllegalGeneration) ||
				errors.Is(r.Err, kerr.RebalanceInProgress)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	hint := ""
	if joined {
		hint = "; a member joined the group meanwhile: stop it and run the replay again"
	}
	return fmt.Errorf("groups: commit offsets of %s: %d of %d partitions failed (%s)%s",
		plan.Group, len(failed), len(plan.Moves), strings.Join(failed, "; "), hint)
}

// Refusal is why Execute would refuse the plan as it was made, an
// ErrRefused; nil when it would carry it out: a plan that moves no
// partition, or of a group with active members (named), is refused.
func (p Plan) Refusal() error {
	if len(p.Moves) == 0 {
		return admin.Of(ErrRefused, fmt.Errorf("replay of %s: the plan moves no partition", p.Group))
	}
	if len(p.Members) > 0 {
		return admin.Of(ErrRefused, activeMembers(p.Group, p.Members))
	}
	return nil
}

// activeMembers is Execute's refusal of a group with members.
func activeMembers(group string, members []string) error {
	const shown = 5
	list := strings.Join(members[:min(len(members), shown)], ", ")
	if len(members) > shown {
		list += fmt.Sprintf(" and %d more", len(members)-shown)
	}
	noun := "members"
	if len(members) == 1 {
		noun = "member"
	}
	return fmt.Errorf("group %s has %d active %s (%s): stop them first", group, len(members), noun, list)
}
