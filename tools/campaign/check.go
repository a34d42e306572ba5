package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/topics"
)

// readTopic reads every committed record of topic up to its current end,
// as a downstream consumer does (read_committed).
func readTopic(ctx context.Context, seeds []string, topic topics.Topic) ([]*kgo.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.ConsumeTopics(string(topic)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // the end of a transactional partition is a marker
		kgo.FetchMaxBytes(64<<20),
	)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, string(topic))
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	want := make(map[int32]int64)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	var out []*kgo.Record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return out, fmt.Errorf("reading %s: partitions %v not read to their end: %w", topic, want, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok {
				return
			}
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return out, nil
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// lags reads `hookstream lag --output json`.
func lags(ctx context.Context, bin string, env []string) ([]groups.GroupLag, error) {
	out, err := cli(ctx, bin, env, "lag", "--output", "json")
	if err != nil {
		return nil, err
	}
	var gl []groups.GroupLag
	if err := json.Unmarshal(out, &gl); err != nil {
		return nil, fmt.Errorf("lag --output json: %w: %q", err, out)
	}
	return gl, nil
}

// outcome is the verdict of the invariants at one point.
type outcome struct {
	Accepted   int      `json:"accepted"`
	Lost       int      `json:"lost"`
	Duplicated int      `json:"duplicated_on_events"`
	LostSample []string `json:"lost_sample,omitempty"`
	DupSample  []string `json:"duplicated_sample,omitempty"`
	// Replayed counts the events records a processor replay re-emitted;
	// BadReplays the ones whose replay mark is wrong.
	Replayed   int      `json:"replayed_on_events"`
	BadReplays []string `json:"bad_replay_marks,omitempty"`
	// Operational counts hookstream's own events on the events topic
	// (each must be there once); OpsMissing names those its subscriber
	// did not receive.
	Operational int            `json:"operational_on_events"`
	OpsMissing  []string       `json:"operational_missing,omitempty"`
	Undelivered map[string]int `json:"undelivered"`
	// UndeliveredSample names a few events per subscription that reached
	// neither the subscriber nor the delivery DLQ.
	UndeliveredSample map[string][]string `json:"undelivered_sample,omitempty"`
	// Unwanted counts the events the filtered subscriber received that
	// its filter refuses; BadBodies the transformed subscriber's bodies
	// that are not its transform's of their event.
	Unwanted       int            `json:"unwanted_by_filter"`
	UnwantedSample []string       `json:"unwanted_sample,omitempty"`
	BadBodies      int            `json:"bad_transformed_bodies"`
	BadBodySample  []string       `json:"bad_transformed_sample,omitempty"`
	DeadLettered   map[string]int `json:"delivery_dead_lettered"`
	CircuitLetters int            `json:"circuit_open_letters"`
	PoisonMissing  []string       `json:"poison_missing,omitempty"`
	// Trust names the trust boundaries an adversary's fault crossed: a
	// credential sent to a rogue member, a forged story shown, a story
	// past its bound.
	Trust []string `json:"trust_violations,omitempty"`
	// TopicWritten counts the events on the topic subscriber's topic
	// (first writes); TopicMissing those its filter lets through that are
	// not there, TopicDuplicated those there more than once, TopicUnwanted
	// those its filter refuses.
	TopicWritten    int      `json:"topic_written"`
	TopicMissing    int      `json:"topic_missing"`
	TopicDuplicated int      `json:"topic_duplicated"`
	TopicUnwanted   int      `json:"topic_unwanted"`
	TopicSample     []string `json:"topic_sample,omitempty"`

	Lag map[string]int64 `json:"lag"`
	// Revocation is invariant 9: no revoked token accepted past its
	// bound.
	Revocation revocationCheck `json:"revocation"`
	// Pace is invariant 8: the healthy subscribers' pace while a heavy
	// filter ran beside them.
	Pace pace `json:"pace"`
}

func (o outcome) failures() []string {
	var f []string
	if o.Lost > 0 {
		f = append(f, fmt.Sprintf("invariant 1: %d accepted events missing from events, e.g. %v", o.Lost, o.LostSample))
	}
	if o.Duplicated > 0 {
		f = append(f, fmt.Sprintf("invariant 1: %d events more than once on events, e.g. %v", o.Duplicated, o.DupSample))
	}
	if len(o.BadReplays) > 0 {
		f = append(f, fmt.Sprintf("invariant 1: %d re-emitted events with a wrong or repeated replay mark, e.g. %v", len(o.BadReplays), o.BadReplays[:min(len(o.BadReplays), 10)]))
	}
	for sub, n := range o.Undelivered {
		if n > 0 {
			f = append(f, fmt.Sprintf("invariant 2: subscription %s: %d events neither delivered nor dead-lettered, e.g. %v", sub, n, o.UndeliveredSample[sub]))
		}
	}
	if o.Unwanted > 0 {
		f = append(f, fmt.Sprintf("invariant 2: the filtered subscriber received %d events its filter refuses, e.g. %v", o.Unwanted, o.UnwantedSample))
	}
	if o.BadBodies > 0 {
		f = append(f, fmt.Sprintf("invariant 2: the transformed subscriber received %d bodies other than its transform's, e.g. %v", o.BadBodies, o.BadBodySample))
	}
	if o.TopicMissing+o.TopicDuplicated+o.TopicUnwanted > 0 {
		f = append(f, fmt.Sprintf("invariant 2: the topic subscriber's topic misses %d events, holds %d more than once and %d its filter refuses, e.g. %v",
			o.TopicMissing, o.TopicDuplicated, o.TopicUnwanted, o.TopicSample))
	}
	if len(o.OpsMissing) > 0 {
		f = append(f, fmt.Sprintf("invariant 2: operational events not received: %v", o.OpsMissing))
	}
	if o.CircuitLetters > 0 {
		f = append(f, fmt.Sprintf("invariant 2: %d delivery dead letters say the circuit was open rather than the subscriber's failure", o.CircuitLetters))
	}
	if len(o.PoisonMissing) > 0 {
		f = append(f, fmt.Sprintf("invariant 3: poison inputs neither refused nor in the processor DLQ: %v", o.PoisonMissing))
	}
	if len(o.Trust) > 0 {
		f = append(f, fmt.Sprintf("invariant 6: trust boundaries crossed: %v", o.Trust))
	}
	if o.Pace.Events > 0 && o.Pace.P99 > o.Pace.Bound {
		f = append(f, fmt.Sprintf("invariant 8: the healthy subscribers received the events accepted beside a heavy filter with p99 %s, over the bound %s (p99 %s outside)",
			o.Pace.P99.Round(time.Millisecond), o.Pace.Bound, o.Pace.Others.Round(time.Millisecond)))
	}
	if r := o.Revocation; len(r.Late) > 0 {
		f = append(f, fmt.Sprintf("invariant 9: %d of %d requests with a revoked token sent more than %s after its revocation were accepted, e.g. %v",
			len(r.Late), r.Tested, revocationBound, r.Late[:min(len(r.Late), 10)]))
	}
	var groupsLagging []string
	for g, l := range o.Lag {
		if l != 0 {
			groupsLagging = append(groupsLagging, fmt.Sprintf("%s=%d", g, l))
		}
	}
	if len(groupsLagging) > 0 {
		sort.Strings(groupsLagging)
		f = append(f, "invariant 4: lag not back to 0: "+strings.Join(groupsLagging, ", "))
	}
	return f
}

// evaluate checks invariants 1 to 4, 6 and 7 against the topics as they
// are now, a step each, and invariant 9 against the revoker's record.
func (c *campaign) evaluate(ctx context.Context) (outcome, error) {
	o := outcome{Undelivered: map[string]int{}, UndeliveredSample: map[string][]string{}, DeadLettered: map[string]int{}, Lag: map[string]int64{}}
	accepted := c.load.keys()
	o.Accepted = len(accepted)

	if err := c.checkEvents(ctx, &o, accepted); err != nil {
		return o, err
	}
	if err := c.checkDeliveries(ctx, &o, accepted); err != nil {
		return o, err
	}
	c.checkBodies(&o)
	c.checkPull(&o, accepted)
	if err := c.checkTopic(ctx, &o, accepted); err != nil {
		return o, err
	}
	c.checkOperational(&o)
	if err := c.checkPoison(ctx, &o); err != nil {
		return o, err
	}
	c.checkTrust(ctx, &o)
	o.Revocation = c.revoker.check()
	o.Pace = c.pace()
	if err := c.checkLag(ctx, &o); err != nil {
		return o, err
	}
	return o, nil
}

// checkEvents is invariant 1: every accepted event is on the events
// topic exactly once. First emissions count once each; a re-emission by
// a processor replay carries its replay count, and each count appears at
// most once per event, never above the replays injected. Hookstream's
// own events are counted apart, each there once too.
func (c *campaign) checkEvents(ctx context.Context, o *outcome, accepted []string) error {
	events, err := readTopic(ctx, c.broker.seeds, c.names.Events)
	if err != nil {
		return err
	}
	count := make(map[string]int, len(events))
	marks := make(map[string]map[string]bool)
	procReplays := c.replayCounts()["processor"]
	opsCount := make(map[string]int)
	for _, r := range events {
		k, mark := string(r.Key), header(r, topics.HeaderReplay)
		if header(r, topics.HeaderSource) == topics.OperationalSource {
			if mark == "" {
				opsCount[k]++
			}
			continue
		}
		if mark == "" {
			count[k]++
			continue
		}
		if n, err := strconv.Atoi(mark); err != nil || n < 1 || n > procReplays || marks[k][mark] {
			o.BadReplays = append(o.BadReplays, fmt.Sprintf("%s %s=%q (processor replays %d)", k, topics.HeaderReplay, mark, procReplays))
			continue
		}
		if marks[k] == nil {
			marks[k] = make(map[string]bool)
		}
		marks[k][mark] = true
		o.Replayed++
	}
	for _, k := range accepted {
		if count[k] == 0 {
			o.Lost++
			if len(o.LostSample) < 10 {
				o.LostSample = append(o.LostSample, k)
			}
		}
	}
	var dups []string
	for k, n := range count {
		if n > 1 {
			dups = append(dups, fmt.Sprintf("%s x%d", k, n))
		}
	}
	for k, n := range opsCount {
		if n > 1 {
			dups = append(dups, fmt.Sprintf("%s x%d", k, n))
		}
	}
	o.Operational = len(opsCount)
	sort.Strings(dups)
	o.Duplicated = len(dups)
	o.DupSample = dups[:min(len(dups), 10)]
	return nil
}

// checkDeliveries is invariant 2 for the webhook subscribers: each
// accepted event reached each enabled subscription, or is in the delivery
// DLQ with the subscriber's own failure.
func (c *campaign) checkDeliveries(ctx context.Context, o *outcome, accepted []string) error {
	letters, err := readTopic(ctx, c.broker.seeds, c.names.DeliveryDLQ)
	if err != nil {
		return err
	}
	dead := make(map[string]bool)
	for _, r := range letters {
		sub := header(r, topics.HeaderSubscription)
		key := strings.TrimPrefix(string(r.Key), sub+":")
		msg := strings.ToLower(header(r, topics.HeaderError))
		if strings.Contains(msg, "circuit") {
			o.CircuitLetters++
			continue
		}
		dead[sub+"|"+key] = true
	}
	for _, s := range c.subs.all() {
		if s.kind == subGone || s.kind == subOps {
			continue // disabled at its first answer, its events wait; operational events only
		}
		for _, k := range accepted {
			if s.kind == subFiltered && !filteredWants(k) {
				continue
			}
			switch {
			case s.received(k):
			case dead[s.id+"|"+k]:
				o.DeadLettered[s.kind]++
			default:
				o.Undelivered[s.kind]++
				if len(o.UndeliveredSample[s.kind]) < 5 {
					o.UndeliveredSample[s.kind] = append(o.UndeliveredSample[s.kind], k)
				}
			}
		}
	}
	return nil
}

// checkBodies is invariant 2 for what the subscribers received: nothing
// the filtered subscriber's filter refuses, and only its transform's
// bodies at the transformed one.
func (c *campaign) checkBodies(o *outcome) {
	for _, sub := range c.subs.ofKind(subFiltered) {
		for _, k := range sub.keys() {
			if !filteredWants(k) {
				o.Unwanted++
				if len(o.UnwantedSample) < 5 {
					o.UnwantedSample = append(o.UnwantedSample, k)
				}
			}
		}
	}
	for _, sub := range c.subs.ofKind(subTransformed) {
		n, sample := sub.bad()
		o.BadBodies += n
		o.BadBodySample = append(o.BadBodySample, sample...)
	}
}

// checkPull is invariant 2 for the pull subscription: its client read
// every accepted event, however many answers it dropped, and so did each
// slow client every event accepted after its first request (it started
// at the subscription's committed position, as the others had moved it).
func (c *campaign) checkPull(o *outcome, accepted []string) {
	at := c.load.acceptedAt()
	for _, p := range append([]*puller{c.puller}, c.slowPullers...) {
		name := subPull
		if p.rate > 0 {
			name = subPullSlow
		}
		since := p.start()
		for _, k := range accepted {
			if p.rate > 0 && (since.IsZero() || at[k].Before(since)) {
				continue
			}
			if !p.received(k) {
				o.Undelivered[name]++
				if len(o.UndeliveredSample[name]) < 5 {
					o.UndeliveredSample[name] = append(o.UndeliveredSample[name], k)
				}
			}
		}
	}
}

// checkTopic is invariant 2 for the topic subscriber: each event its
// filter lets through is on its topic exactly once, read_committed,
// counted by event key; a processor replay's re-emission is written
// again, marked.
func (c *campaign) checkTopic(ctx context.Context, o *outcome, accepted []string) error {
	written, err := readTopic(ctx, c.broker.seeds, c.topicSub)
	if err != nil {
		return err
	}
	onTopic := make(map[string]int, len(written))
	for _, r := range written {
		if header(r, topics.HeaderReplay) == "" {
			onTopic[string(r.Key)]++
		}
	}
	o.TopicWritten = len(onTopic)
	sample := func(format string, args ...any) {
		if len(o.TopicSample) < 10 {
			o.TopicSample = append(o.TopicSample, fmt.Sprintf(format, args...))
		}
	}
	for _, k := range accepted {
		if filteredWants(k) && onTopic[k] == 0 {
			o.TopicMissing++
			sample("%s missing", k)
		}
	}
	for k, n := range onTopic {
		switch {
		case !filteredWants(k):
			o.TopicUnwanted++
			sample("%s unwanted", k)
		case n > 1:
			o.TopicDuplicated++
			sample("%s x%d", k, n)
		}
	}
	return nil
}

// checkOperational is invariant 2 for operational events: the
// subscription that answered 410 was said disabled, and each toggle said
// disabled and enabled, to the subscription for hookstream's own events.
func (c *campaign) checkOperational(o *outcome) {
	ops := c.subs.byKind[subOps]
	c.mu.Lock()
	toggles := c.toggles
	c.mu.Unlock()
	toggled, gone := c.subs.byKind[subToggled].id, c.subs.byKind[subGone].id
	for _, want := range []struct {
		typ, sub string
		n        int
	}{
		{topics.OpSubscriptionDisabled, gone, 1},
		{topics.OpSubscriptionDisabled, toggled, toggles},
		{topics.OpSubscriptionEnabled, toggled, toggles},
	} {
		if got := ops.opsAbout(want.typ, want.sub); got < want.n {
			o.OpsMissing = append(o.OpsMissing, fmt.Sprintf("%s about %s: %d received, want %d", want.typ, want.sub, got, want.n))
		}
	}
}

// checkPoison is invariant 3: each poison input was refused with a 4xx
// or is in the processor DLQ.
func (c *campaign) checkPoison(ctx context.Context, o *outcome) error {
	dlq, err := readTopic(ctx, c.broker.seeds, c.names.DLQ)
	if err != nil {
		return err
	}
	stage := make(map[string]string) // event id or key -> the dead letter's stage
	for _, r := range dlq {
		st := header(r, topics.HeaderErrorStage)
		if st == "" {
			continue // a redrive's marker of what it copied back, not a dead letter
		}
		stage[header(r, topics.HeaderEventID)] = st
		stage[string(r.Key)] = st
	}
	for _, p := range c.poisons() {
		if p.status >= 400 && p.status < 500 {
			continue
		}
		st, ok := stage[p.id]
		if !ok || (p.status == http.StatusAccepted && st != topics.StageValidate) {
			o.PoisonMissing = append(o.PoisonMissing, fmt.Sprintf("%s (%s, answered %d, dead letter stage %q)", p.id, p.kind, p.status, st))
		}
	}
	return nil
}

// checkTrust is invariant 6: no adversary crossed a trust boundary, and
// every stormed event's story kept its bound.
func (c *campaign) checkTrust(ctx context.Context, o *outcome) {
	c.mu.Lock()
	o.Trust = append([]string(nil), c.violations...)
	c.mu.Unlock()
	o.Trust = append(o.Trust, c.stormStories(ctx)...)
}

// checkLag is invariant 4: every group's lag is back to 0, but for
// groups of disabled subscriptions, which wait by design.
func (c *campaign) checkLag(ctx context.Context, o *outcome) error {
	gl, err := lags(ctx, c.bin, c.cliEnv)
	if err != nil {
		return err
	}
	paused := string(c.names.SubscriptionGroup(c.subs.byKind[subGone].id))
	for _, g := range gl {
		if g.Group == paused {
			continue
		}
		o.Lag[g.Group] = g.Total
	}
	return nil
}
