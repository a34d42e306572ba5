package events

import (
	"context"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// Service is a cluster's events topic and each event's story as operators
// query them: the search, resends and stories the admin API (Mount), the
// console and the commands call.
type Service struct {
	c        topics.Cluster
	registry *subscriptions.Registry
	stories  *StoryQuery
}

// New is the service of c's events topic: registry and stories (the
// story query) serve resends and stories, and may be nil for a service
// that only searches. It does no I/O.
func New(c topics.Cluster, registry *subscriptions.Registry, stories *StoryQuery) *Service {
	return &Service{c: c, registry: registry, stories: stories}
}

// Story is the story of key as who may read it, wherever its processor
// runs (StoryQuery.Story).
func (s *Service) Story(ctx context.Context, key string, who admin.Identity) (Story, error) {
	return s.stories.Story(ctx, key, who)
}
