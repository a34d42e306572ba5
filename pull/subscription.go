package pull

import (
	"context"
	"net/http"

	"github.com/hookstream/hookstream/subscriptions"
)

// maxLookups bounds the registry reads under way for subscriptions the
// watch has not seen (just created, or unknown): each costs Kafka a
// request, and anyone reaching the listener can name any id.
const maxLookups = 8

// compiled is a subscription as the server uses it.
type compiled struct {
	sub    subscriptions.Subscription
	render *subscriptions.Compiled // nil but for a pull subscription
}

func (s *Server) reconcile(subs map[string]subscriptions.Subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.subs
	s.subs = make(map[string]*compiled, len(subs))
	for id, sub := range subs {
		c := old[id]
		if c == nil || !c.sub.UpdatedAt.Equal(sub.UpdatedAt) {
			c = compile(sub)
		}
		s.subs[id] = c
	}
	for id := range old {
		if _, ok := s.subs[id]; !ok {
			s.metrics.forget(id)
		}
	}
}

// subscription returns subscription id as last watched, or as the
// registry has it when the watch has not seen it yet (just created): at
// most maxLookups such reads at once, 429 past them.
func (s *Server) subscription(ctx context.Context, id string) (*compiled, error) {
	s.mu.Lock()
	c, ok := s.subs[id]
	s.mu.Unlock()
	if ok {
		return c, nil
	}
	select {
	case s.lookups <- struct{}{}:
		defer func() { <-s.lookups }()
	default:
		return nil, refuse(http.StatusTooManyRequests, "too many requests for subscriptions not known here yet: try again")
	}
	sub, err := s.registry.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return compile(sub), nil
}

// compile is sub as the server keeps it: other kinds than pull are kept
// to be refused, their expressions left alone.
func compile(sub subscriptions.Subscription) *compiled {
	c := &compiled{sub: sub}
	if sub.Kind() == subscriptions.KindPull {
		c.render = subscriptions.Compile(sub)
	}
	return c
}
