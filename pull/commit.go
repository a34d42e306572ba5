package pull

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/hookstream/hookstream/subscriptions"
)

// committed reads sub's committed cursor on each of the n partitions,
// with its last replay applied where the commit does not carry the
// replay's tag yet. A partition without a commit is at its start: every
// partition has one from the subscription's creation on (its start,
// committed), so one without is a partition added to the events topic
// since, or one whose commit Kafka expired (offsets.retention.minutes):
// from its start, none of its events is skipped (groups.Service.Lags
// counts a pull subscription's lag from there too).
func (s *Server) committed(ctx context.Context, sub subscriptions.Subscription, n int) ([]int64, error) {
	adm := kadm.NewClient(s.cl)
	topic := string(s.cfg.Names.Events)
	fetched, err := adm.FetchOffsets(ctx, string(s.cfg.Names.SubscriptionGroup(sub.ID)))
	if err == nil {
		err = fetched.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("pull: cursor of %s: %w", sub.ID, err)
	}
	pos := make([]int64, n)
	var missing bool
	for p := range pos {
		pos[p] = -1
		if o, ok := fetched.Lookup(topic, int32(p)); ok && o.At >= 0 {
			pos[p] = o.At
			if rw := sub.Rewind; rw != nil && o.Metadata != rw.Tag() {
				if at, ok := rw.Offsets[int32(p)]; ok {
					pos[p] = at
				}
			}
		}
		missing = missing || pos[p] < 0
	}
	if missing {
		starts, err := s.listOffsets(ctx, adm.ListStartOffsets, "start offsets")
		if err != nil {
			return nil, err
		}
		for p := range pos {
			if o, ok := starts.Lookup(topic, int32(p)); ok && pos[p] < 0 {
				pos[p] = o.Offset
			}
		}
	}
	return pos, nil
}

// commit commits pos as sub's cursor, tagged with its last replay.
func (s *Server) commit(ctx context.Context, sub subscriptions.Subscription, pos []int64) error {
	var offs kadm.Offsets
	for p, at := range pos {
		offs.Add(kadm.Offset{Topic: string(s.cfg.Names.Events), Partition: int32(p), At: at, LeaderEpoch: -1, Metadata: sub.Rewind.Tag()})
	}
	resp, err := kadm.NewClient(s.cl).CommitOffsets(ctx, string(s.cfg.Names.SubscriptionGroup(sub.ID)), offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("pull: commit the cursor of %s: %w", sub.ID, err)
	}
	return nil
}
