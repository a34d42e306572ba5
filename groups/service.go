package groups

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// Service is the deployment's groups as operators see them: their lag,
// and replay plans it carries out where hookstream replay --execute
// would. Its methods are what the admin API (Mount), the commands and the
// console call.
type Service struct {
	c topics.Cluster
	// registry says which subscriptions exist: the groups of deleted
	// ones are not shown, and are not replayed.
	registry *subscriptions.Registry
}

// New is the service of c's groups; registry says which subscriptions
// exist. It does no I/O.
func New(c topics.Cluster, registry *subscriptions.Registry) *Service {
	return &Service{c: c, registry: registry}
}

// Lags is the lag of group (a name Resolve accepts), or with group empty
// of every group of the deployment, as hookstream lag shows it: counted
// as measure counts, a pull subscription without a cursor on a partition from
// its start as its consumers read it, and without the groups of deleted
// subscriptions. The group of a subscription that does not exist is
// ErrNoGroup, a name Resolve refuses ErrInvalid.
func (s *Service) Lags(ctx context.Context, group string) ([]GroupLag, error) {
	if group != "" {
		g, err := Resolve(s.c.Names, group)
		if err != nil {
			return nil, err
		}
		group = string(g)
	}
	subs, err := s.registry.List(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.exists(topics.Group(group), subs); err != nil {
		return nil, err
	}
	return s.measure(ctx, group, subs, countBudget)
}

// measure is the lag of group (every group when empty) within limit, for
// the subscriptions subs: theirs counted as their consumers read, the
// groups of deleted ones left out.
func (s *Service) measure(ctx context.Context, group string, subs map[string]subscriptions.Subscription, limit budget) ([]GroupLag, error) {
	lags, err := measure(ctx, s.c, group, pulledGroups(s.c.Names, subs), limit)
	if err != nil {
		return nil, err
	}
	return WithoutDeleted(s.c.Names, lags, subs), nil
}

// pulledGroups are the groups of the pull subscriptions of subs.
func pulledGroups(names topics.Names, subs map[string]subscriptions.Subscription) map[string]bool {
	out := make(map[string]bool)
	for id, sub := range subs {
		if sub.Kind() == subscriptions.KindPull {
			out[string(names.SubscriptionGroup(id))] = true
		}
	}
	return out
}

// exists refuses the group of a subscription that is not in subs.
func (s *Service) exists(g topics.Group, subs map[string]subscriptions.Subscription) error {
	if id, ok := SubscriptionID(s.c.Names, g); ok {
		if _, exists := subs[id]; !exists {
			return admin.Of(ErrNoGroup, fmt.Errorf("no subscription %s (hookstream subscriptions list shows them)", id))
		}
	}
	return nil
}

// Replay is a replay plan as the API, the command and the console show
// it.
type Replay struct {
	Plan
	// Text is the plan as hookstream replay prints it (Plan.WriteText).
	Text string `json:"text"`
	// Executable says Execute would carry the plan out now; Refusal says
	// why it would not.
	Executable bool   `json:"executable"`
	Refusal    string `json:"refusal,omitempty"`
	// Executed says the plan was carried out, and Outcome, then, what
	// follows from it in a sentence: committed for consumers to resume
	// from, applied by the running dispatchers, or served from a pull
	// consumer's next request.
	Executed bool   `json:"executed"`
	Outcome  string `json:"outcome,omitempty"`
}

// Replay plans moving group (a name Resolve accepts) to t on topic
// (empty: the group's own), over partitions (nil: all), as PlanReplay
// does; with execute it commits the plan, as hookstream replay --execute
// does, or refuses with an ErrRefused that says why (the group has active
// members, or the plan moves nothing). The group of a subscription that
// does not exist is ErrNoGroup: its offsets would outlive it.
func (s *Service) Replay(ctx context.Context, group, topic string, partitions []int32, t Target, execute bool) (Replay, error) {
	g, err := Resolve(s.c.Names, group)
	if err != nil {
		return Replay{}, err
	}
	if err := t.validate(); err != nil {
		return Replay{}, err
	}
	var sub *subscriptions.Subscription // of a subscription's group
	if id, ok := SubscriptionID(s.c.Names, g); ok {
		subs, err := s.registry.List(ctx)
		if err != nil {
			return Replay{}, err
		}
		if err := s.exists(g, subs); err != nil {
			return Replay{}, err
		}
		got := subs[id]
		sub = &got
	}
	pulled := sub != nil && sub.Kind() == subscriptions.KindPull
	plan, err := PlanReplay(ctx, s.c, string(g), topic, partitions, t)
	if err != nil {
		return Replay{}, err
	}
	if pulled {
		plan.Effect = "these events are served again to the pull subscription's consumer, from its next request on; " +
			"a cursor it holds from before the replay is not committed"
	}
	r := Replay{Plan: plan, Text: plan.Text(), Executable: true}
	if err := plan.Refusal(); err != nil {
		r.Executable, r.Refusal = false, err.Error()
	}
	if !execute {
		return r, nil
	}
	outcome, err := s.carryOut(ctx, g, plan, sub)
	if err != nil {
		return Replay{}, err
	}
	r.Executed, r.Outcome = true, outcome
	return r, nil
}

// carryOut carries the plan of group g out, and says what follows from
// it. The replay of subscription sub (nil for another group) goes to its
// running dispatchers or its pull consumer (rewind); without dispatchers
// running, or for another group, the plan is committed for the group's
// consumers to resume from.
func (s *Service) carryOut(ctx context.Context, g topics.Group, plan Plan, sub *subscriptions.Subscription) (string, error) {
	if sub != nil {
		handed, err := s.rewind(ctx, sub.ID, plan)
		switch {
		case err != nil:
			return "", err
		case sub.Kind() == subscriptions.KindPull:
			return fmt.Sprintf("Committed: subscription %s's pull consumer is served from these targets at its next request.", sub.ID), nil
		case handed:
			return fmt.Sprintf("Applied: the running dispatchers moved subscription %s to these targets and deliver from them now.", sub.ID), nil
		}
	}
	if err := Execute(ctx, s.c.Admin(), plan); err != nil {
		return "", err
	}
	switch {
	case sub != nil && !sub.Enabled:
		return fmt.Sprintf("Committed: %s resumes from these targets once subscription %s is enabled.", g, sub.ID), nil
	case sub != nil:
		return fmt.Sprintf("Committed: %s resumes from these targets when a dispatcher starts.", g), nil
	}
	return fmt.Sprintf("Committed: %s resumes from these targets when its consumers start.", g), nil
}

// rewindWait bounds how long a replay handed to running dispatchers waits
// for them to apply it.
const rewindWait = time.Minute

// rewind hands the replay of subscription id to the running dispatchers
// (members of the dispatch group) through the subscriptions topic: each
// moves the cursor of the partitions it owns, and commits it tagged
// (subscriptions.Rewind). It waits until every partition of the plan
// carries the tag. With no dispatcher running, or the subscription
// disabled, it clears any earlier rewind and says it did not hand the
// replay on: the plan is committed directly. A pull subscription's
// replay is rewindPull's.
func (s *Service) rewind(ctx context.Context, id string, plan Plan) (bool, error) {
	if err := plan.Refusal(); err != nil {
		return false, err
	}
	adm := s.c.Admin()
	dispatch := string(s.c.Names.DispatchGroup())
	infos, err := describe(ctx, adm, dispatch)
	if err != nil {
		return false, err
	}
	sub, err := s.registry.Get(ctx, id)
	if err != nil {
		return false, err
	}
	if sub.Kind() == subscriptions.KindPull {
		return true, s.rewindPull(ctx, sub, plan)
	}
	if len(infos[dispatch].members) == 0 || !sub.Enabled {
		// No dispatcher holds the cursor: it is committed directly, and
		// an earlier rewind must not apply again over it.
		if sub.Rewind != nil {
			if _, err := s.registry.Update(ctx, id, func(s *subscriptions.Subscription) error {
				s.Rewind = nil
				return nil
			}); err != nil {
				return false, fmt.Errorf("groups: clear the earlier replay of %s: %w", id, err)
			}
		}
		return false, nil
	}
	rw := &subscriptions.Rewind{ID: rand.Text(), Offsets: make(map[int32]int64, len(plan.Moves))}
	for _, m := range plan.Moves {
		if m.Topic != string(s.c.Names.Events) {
			return false, admin.Of(ErrRefused, fmt.Errorf("dispatchers are running (%s): a subscription's replay while they run moves only its cursor on %s, not %s",
				strings.Join(infos[dispatch].members, ", "), s.c.Names.Events, m.Topic))
		}
		rw.Offsets[m.Partition] = m.Target
	}
	if _, err := s.registry.Update(ctx, id, func(s *subscriptions.Subscription) error {
		s.Rewind = rw
		return nil
	}); err != nil {
		return false, fmt.Errorf("groups: hand the replay of %s to the dispatchers: %w", id, err)
	}
	ctx, cancel := context.WithTimeout(ctx, rewindWait)
	defer cancel()
	group := string(s.c.Names.SubscriptionGroup(id))
	for {
		fetched, err := adm.FetchOffsets(ctx, group)
		if err == nil {
			applied := true
			for _, m := range plan.Moves {
				if o, ok := fetched.Lookup(m.Topic, m.Partition); !ok || o.Metadata != rw.Tag() {
					applied = false
				}
			}
			if applied {
				return true, nil
			}
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("groups: the replay of %s was handed to the running dispatchers, which have not applied it within %v; they apply it when they own its partitions", id, rewindWait)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// rewindPull replays a pull subscription, whose cursor its consumers
// move (no dispatcher holds it): the replay becomes the subscription's
// rewind and its targets are committed tagged with it. A cursor minted
// before the replay, or a commit of one already under way, cannot undo
// it: the pull endpoint commits no cursor of an earlier rewind, and reads
// a commit without the rewind's tag as the rewind's targets.
func (s *Service) rewindPull(ctx context.Context, sub subscriptions.Subscription, plan Plan) error {
	rw := &subscriptions.Rewind{ID: rand.Text(), Offsets: make(map[int32]int64, len(plan.Moves))}
	for _, m := range plan.Moves {
		if m.Topic != string(s.c.Names.Events) {
			return admin.Of(ErrRefused, fmt.Errorf("the replay of a pull subscription moves only its cursor on %s, not %s", s.c.Names.Events, m.Topic))
		}
		rw.Offsets[m.Partition] = m.Target
	}
	if _, err := s.registry.Update(ctx, sub.ID, func(s *subscriptions.Subscription) error {
		s.Rewind = rw
		return nil
	}); err != nil {
		return fmt.Errorf("groups: replay of %s: %w", sub.ID, err)
	}
	return execute(ctx, s.c.Admin(), plan, rw.Tag())
}
