// Package groups owns hookstream's consumer-group offsets as operators see
// them: what a short group name means, how far each group lags behind the
// end of its topic, and replay plans that move a group's committed offsets
// and commit them.
//
// It refuses to change a group with active members: a running consumer
// commits its own position over any reset, so the members must be stopped
// first. It reads and commits offsets through the admin API only; it starts
// no consumer and joins no group.
package groups

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/topics"
)

// Errors a caller branches on: the admin API answers them 400, 404 and
// 409 (admin.Error).
var (
	// ErrInvalid is a request that cannot be right: a name that is no
	// group of the deployment, a malformed target, a partition the topic
	// lacks.
	ErrInvalid = admin.Invalid("groups: invalid request")
	// ErrNoGroup is a group nobody has joined or committed for, or of a
	// subscription that does not exist.
	ErrNoGroup = admin.NotFound("groups: no such group")
	// ErrRefused is a replay Execute does not carry out (Plan.Refusal).
	ErrRefused = admin.Refused("groups: replay refused")
)

// invalidf is an error of ErrInvalid with its own message.
func invalidf(format string, args ...any) error {
	return admin.Of(ErrInvalid, fmt.Errorf(format, args...))
}

// Short group names accepted by Resolve.
const (
	shortProcessor = "processor"
	shortRetry     = "retry"
	shortSub       = "sub:"
)

// Resolve turns a short group name into the full one: "processor" is
// names.ProcessorGroup(), "retry" names.RetryGroup() and "sub:<id>"
// names.SubscriptionGroup(id). A full name of one of those groups passes
// through. Anything else is an error: a mistyped name must not become a
// new, empty group whose offsets a replay would then commit.
func Resolve(names topics.Names, g string) (topics.Group, error) {
	switch {
	case g == shortProcessor:
		return names.ProcessorGroup(), nil
	case g == shortRetry:
		return names.RetryGroup(), nil
	case strings.HasPrefix(g, shortSub):
		id := strings.TrimPrefix(g, shortSub)
		if id == "" {
			return "", invalidf("group %q has no subscription id (want sub:<id>)", g)
		}
		return names.SubscriptionGroup(id), nil
	}
	if _, ok := classify(names, topics.Group(g)); ok {
		return topics.Group(g), nil
	}
	return "", invalidf("unknown group %q: want processor, retry, sub:<id> or a full name such as %s", g, names.ProcessorGroup())
}

// kind is the role that consumes with a group.
type kind int

const (
	kindProcessor kind = iota + 1
	kindRetry
	kindSubscription
)

// classify tells which of the deployment's groups g is.
func classify(names topics.Names, g topics.Group) (kind, bool) {
	switch {
	case g == names.ProcessorGroup():
		return kindProcessor, true
	case g == names.RetryGroup():
		return kindRetry, true
	case strings.HasPrefix(string(g), string(names.SubscriptionGroup(""))) && len(g) > len(names.SubscriptionGroup("")):
		return kindSubscription, true
	}
	return 0, false
}

// topic is the topic the group's consumers read.
func (k kind) topic(names topics.Names) topics.Topic {
	switch k {
	case kindProcessor:
		return names.Ingest
	case kindRetry:
		return names.DeliveryRetry
	default:
		return names.Events
	}
}

// startsAtStart reports whether the group's consumers start at the log
// start of their topic when the group has no committed offset there: the
// processor, the retry consumer and a pull subscription (pulled) do;
// dispatchers start a subscription at the end.
func (k kind) startsAtStart(pulled bool) bool { return k != kindSubscription || pulled }

// effect says what replaying the group means, in an operator's words.
func (k kind) effect(names topics.Names, g topics.Group) string {
	switch k {
	case kindProcessor:
		return fmt.Sprintf("the processor reads these %s records again and re-emits each event to %s with its original id; "+
			"records that were duplicates of another record stay dropped, and subscribers receive the re-emitted events again",
			names.Ingest, names.Events)
	case kindRetry:
		return fmt.Sprintf("pending retries in %s are read again: each is attempted again when due (at once if its due time "+
			"has passed), even if it succeeded or was dead-lettered before", names.DeliveryRetry)
	default:
		id := strings.TrimPrefix(string(g), string(names.SubscriptionGroup("")))
		return fmt.Sprintf("these events are delivered again to subscription %s, with their original webhook-id "+
			"so the subscriber can recognise them", id)
	}
}

// groupInfo is a group as DescribeGroups shows it.
type groupInfo struct {
	state   string
	members []string // "<member id> on <host>", sorted
	// owners name the member assigned each partition, when the group's
	// members consume with Kafka's consumer protocol.
	owners map[topicPartition]string
}

// describe describes the groups; a group that does not exist is "Dead"
// with no members, as Kafka calls it.
func describe(ctx context.Context, adm *kadm.Client, groups ...string) (map[string]groupInfo, error) {
	described, err := adm.DescribeGroups(ctx, groups...)
	if err != nil {
		return nil, fmt.Errorf("groups: describe %s: %w", strings.Join(groups, ", "), err)
	}
	out := make(map[string]groupInfo, len(groups))
	for _, g := range groups {
		d, ok := described[g]
		switch {
		case !ok, errors.Is(d.Err, kerr.GroupIDNotFound):
			out[g] = groupInfo{state: "Dead"}
		case d.Err != nil:
			return nil, fmt.Errorf("groups: describe %s: %w", g, d.Err)
		default:
			info := groupInfo{state: d.State, owners: make(map[topicPartition]string)}
			for _, m := range d.Members {
				name := memberName(m)
				info.members = append(info.members, name)
				if assigned, ok := m.Assigned.AsConsumer(); ok {
					for _, t := range assigned.Topics {
						for _, p := range t.Partitions {
							info.owners[topicPartition{t.Topic, p}] = name
						}
					}
				}
			}
			slices.Sort(info.members)
			out[g] = info
		}
	}
	return out, nil
}

// memberName names a member the way an operator finds it: its static
// instance id or member id (which starts with the client id), and its host.
func memberName(m kadm.DescribedGroupMember) string {
	id := m.MemberID
	if m.InstanceID != nil && *m.InstanceID != "" {
		id = *m.InstanceID
	}
	if host := strings.TrimPrefix(m.ClientHost, "/"); host != "" {
		return id + " on " + host
	}
	return id
}

// committedOffsets fetches the group's committed offsets; a group that
// does not exist has none.
func committedOffsets(ctx context.Context, adm *kadm.Client, group string) (kadm.OffsetResponses, error) {
	fetched, err := adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("groups: committed offsets of %s: %w", group, err)
	}
	return fetched, nil
}

// committedAt returns the committed offset of topic/partition, -1 when none.
func committedAt(c kadm.OffsetResponses, topic string, partition int32) (int64, error) {
	o, ok := c.Lookup(topic, partition)
	switch {
	case !ok:
		return -1, nil
	case o.Err != nil:
		return 0, fmt.Errorf("groups: committed offset of %s/%d: %w", topic, partition, o.Err)
	case o.At < 0:
		return -1, nil
	}
	return o.At, nil
}

// errNoTopic says a topic is missing, with the way to create hookstream's.
func errNoTopic(topic string) error {
	return fmt.Errorf("topic %s does not exist (hookstream topics create makes hookstream's topics)", topic)
}

// partitionOffsets returns topic's offsets from a listing, partition by
// partition, or nil when the topic does not exist; what names the listing
// in errors.
func partitionOffsets(l kadm.ListedOffsets, what, topic string) (map[int32]int64, error) {
	ps, ok := l[topic]
	if !ok {
		return nil, nil
	}
	out := make(map[int32]int64, len(ps))
	for p, o := range ps {
		if o.Err != nil {
			if p < 0 || errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
				return nil, nil
			}
			return nil, fmt.Errorf("groups: %s offset of %s/%d: %w", what, topic, p, o.Err)
		}
		out[p] = o.Offset
	}
	return out, nil
}

// sortedPartitions returns the keys of m in order.
func sortedPartitions[V any](m map[int32]V) []int32 {
	ps := make([]int32, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// SubscriptionID returns the subscription whose group g is, ok false when
// g is not a subscription's group.
func SubscriptionID(names topics.Names, g topics.Group) (id string, ok bool) {
	if k, ok := classify(names, g); !ok || k != kindSubscription {
		return "", false
	}
	return strings.TrimPrefix(string(g), string(names.SubscriptionGroup(""))), true
}

// WithoutDeleted returns lags without the groups of subscriptions that are
// not in subs: Kafka keeps a group's offsets after its subscription is
// deleted, until they expire.
func WithoutDeleted[T any](names topics.Names, lags []GroupLag, subs map[string]T) []GroupLag {
	return slices.DeleteFunc(lags, func(g GroupLag) bool {
		id, ok := SubscriptionID(names, topics.Group(g.Group))
		if !ok {
			return false
		}
		_, exists := subs[id]
		return !exists
	})
}

// WaitAssigned waits, for at most timeout, until group is stable with
// every partition of topic assigned to a member: until its consumers
// (the dispatchers of <prefix>-dispatch, say) read all of the topic.
func WaitAssigned(ctx context.Context, adm *kadm.Client, group topics.Group, topic topics.Topic, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		parts, err := adm.ListTopics(ctx, string(topic))
		if err == nil {
			var described kadm.DescribedGroups
			described, err = adm.DescribeGroups(ctx, string(group))
			if err == nil {
				last = assigned(described[string(group)], string(topic), len(parts[string(topic)].Partitions))
				if last == "" {
					return nil
				}
			}
		}
		if err != nil {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the group %s did not form within %v (%s)", group, timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// assigned is "" when g is stable with n partitions of topic assigned,
// else what it is still missing.
func assigned(g kadm.DescribedGroup, topic string, n int) string {
	if g.Err != nil {
		return g.Err.Error()
	}
	if g.State != "Stable" {
		return "state " + g.State
	}
	count := 0
	for _, m := range g.Members {
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range a.Topics {
				if t.Topic == topic {
					count += len(t.Partitions)
				}
			}
		}
	}
	if n == 0 || count < n {
		return fmt.Sprintf("%d of %d partitions assigned", count, n)
	}
	return ""
}
