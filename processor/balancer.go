package processor

import (
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// copartitioned is the processor group's balancer: cooperative-sticky over
// the ingest topic, each follower topic's partition p going to the member
// that owns ingest partition p, so the state store of p, which the ingest
// records build, also takes the delivery attempts of p. It keeps the
// cooperative-sticky protocol name, so members that do not consume the
// followers (an older version, during a rolling upgrade) share the group.
type copartitioned struct {
	kgo.GroupBalancer
	lead      string
	followers []string
}

func newCopartitioned(lead string, followers ...string) kgo.GroupBalancer {
	return &copartitioned{GroupBalancer: kgo.CooperativeStickyBalancer(), lead: lead, followers: followers}
}

func (c *copartitioned) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	b, topics, err := c.GroupBalancer.MemberBalancer(members)
	if err != nil {
		return nil, nil, err
	}
	cb, ok := b.(*kgo.ConsumerBalancer)
	if !ok {
		return b, topics, nil
	}
	return &copartitionedMembers{c: c, b: cb}, topics, nil
}

type copartitionedMembers struct {
	c *copartitioned
	b *kgo.ConsumerBalancer
}

// BalanceOrError balances the lead topic with cooperative-sticky, then gives each
// follower partition to the owner of the same lead partition, if it is
// interested. A follower partition still owned by another member waits
// for the next round (cooperative: it is revoked first).
func (m *copartitionedMembers) BalanceOrError(topics map[string]int32) (kgo.IntoSyncAssignment, error) {
	lead := make(map[string]int32, len(topics))
	for t, n := range topics {
		if !m.c.isFollower(t) {
			lead[t] = n
		}
	}
	into, err := m.b.BalanceOrError(lead)
	plan, ok := into.(*kgo.BalancePlan)
	if err != nil || !ok {
		return into, err
	}
	owners := make(map[string]map[int32]string) // follower -> partition -> member owning it now
	members := make(map[string]*kmsg.JoinGroupResponseMember)
	interested := make(map[string]map[string]bool)
	m.b.EachMember(func(member *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
		members[member.MemberID] = member
		interested[member.MemberID] = make(map[string]bool)
		for _, t := range meta.Topics {
			interested[member.MemberID][t] = true
		}
		for _, owned := range meta.OwnedPartitions {
			if !m.c.isFollower(owned.Topic) {
				continue
			}
			if owners[owned.Topic] == nil {
				owners[owned.Topic] = make(map[int32]string)
			}
			for _, p := range owned.Partitions {
				owners[owned.Topic][p] = member.MemberID
			}
		}
	})
	for id, assigned := range plan.AsMemberIDMap() {
		for _, p := range assigned[m.c.lead] {
			for _, f := range m.c.followers {
				if p >= topics[f] || !interested[id][f] {
					continue
				}
				if owner, ok := owners[f][p]; ok && owner != id {
					continue
				}
				plan.AddPartition(members[id], f, p)
			}
		}
	}
	return plan, nil
}

// Balance is never called: kgo calls BalanceOrError.
func (m *copartitionedMembers) Balance(topics map[string]int32) kgo.IntoSyncAssignment {
	into, _ := m.BalanceOrError(topics)
	return into
}

func (c *copartitioned) isFollower(topic string) bool {
	for _, f := range c.followers {
		if f == topic {
			return true
		}
	}
	return false
}
