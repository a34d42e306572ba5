package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookstream/hookstream/topics"
)

// Subscriber behaviours.
const (
	subHealthy = "healthy" // 204 at once
	subSlow    = "slow"    // 204 after 250ms
	subFlaky   = "flaky"   // 503 on each event's first two tries, then 204
	subDead    = "dead"    // 500 until the recovery time, then 204
	subFlap    = "flap"    // down and up in turns while faults run, then up
	subGone    = "gone"    // 410: the subscription is disabled at once
	subToggled = "toggled" // 204; disabled and re-enabled with the CLI during the run
	subBatched = "batched" // 204; batches of up to 20 events ({"events":[...]}), flaky like subFlaky
	subOps     = "ops"     // 204; hookstream's operational events only (--source hookstream)
	// subFiltered: 204; only the events its filter lets through
	// (filteredWants), flaky like subFlaky.
	subFiltered = "filtered"
	// subTransformed: 204; each event's transform result as the body
	// (transformedBody), never the envelope.
	subTransformed = "transformed"
	// subOrdered: ordered delivery (retries in place), flaky like
	// subFlaky.
	subOrdered = "ordered"
)

// subKinds have one subscriber each in every profile. subOrdered is
// among the fan-out kinds only: retrying each event's failures in place,
// holding its partition, it delivers about 8 events a second, a fifth of
// the short profile's load.
var subKinds = []string{subHealthy, subSlow, subFlaky, subDead, subFlap, subGone, subToggled, subBatched, subOps, subFiltered, subTransformed}

// fanKinds are the behaviours the fan-out subscriptions take in turn
// (the many profile): each is checked as its kind's single one is.
var fanKinds = []string{subHealthy, subSlow, subFlaky, subBatched, subFiltered, subTransformed, subOrdered}

// The filter and transform of subFiltered and subTransformed, over the
// load's bodies, {"id":"<event id>","type":"bench","pad":"..."}.
const (
	campaignFilter    = `has(data.id) && (source == "alpha" || data.id.endsWith("7"))`
	campaignTransform = `{"key": id, "n": data.id, "kind": "campaign-" + source}`
)

// filteredWants reports whether campaignFilter lets the event key
// (<source>:<event id>) through.
func filteredWants(key string) bool {
	source, id, _ := strings.Cut(key, ":")
	return source == "alpha" || strings.HasSuffix(id, "7")
}

// transformedBody is campaignTransform's JSON for the event key, as
// package expr writes it: keys sorted, no spaces.
func transformedBody(key string) string {
	source, id, _ := strings.Cut(key, ":")
	return fmt.Sprintf(`{"key":%q,"kind":%q,"n":%q}`, key, "campaign-"+source, id)
}

// addFlags are the `subscriptions add` flags of a kind beyond the common ones.
var addFlags = map[string][]string{
	subBatched:     {"--batch-max", "20", "--batch-wait", "200ms"},
	subOps:         {"--source", topics.OperationalSource},
	subFiltered:    {"--filter", campaignFilter},
	subTransformed: {"--transform", campaignTransform},
	subOrdered:     {"--ordered"},
}

// subscriber is a loopback endpoint with one behaviour. It counts the
// deliveries it answered with 2xx by webhook-id.
type subscriber struct {
	kind string
	id   string // subscription id, once added

	// recoverAt is when a dead subscriber comes back; flapUntil ends the
	// flapping.
	recoverAt, flapUntil atomic.Int64 // unix nanos

	mu  sync.Mutex
	got map[string]int // 2xx answers by webhook-id
	// first is when each webhook-id was first answered 2xx, kept by
	// healthy subscribers (invariant 5's pace).
	first map[string]time.Time
	// ops: operational events received, by type and subscription id:
	// the distinct event ids.
	ops      map[[2]string]map[string]bool
	tries    map[string]int // every request by webhook-id
	requests int64
	failures int64
	// badBodies samples the bodies of subTransformed that are not what
	// its transform makes of their event; nBad counts them.
	badBodies []string
	nBad      int
}

func newSubscriber(kind string) *subscriber {
	return &subscriber{kind: kind, got: make(map[string]int), tries: make(map[string]int), ops: make(map[[2]string]map[string]bool),
		first: make(map[string]time.Time)}
}

func (s *subscriber) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	id := r.Header.Get("webhook-id") // the event's key, or a batch's id
	ids := []string{id}
	if s.kind == subBatched {
		if ids, err = batchIDs(body); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
	}
	now := time.Now()
	s.mu.Lock()
	s.requests++
	s.tries[id]++
	try := s.tries[id]
	s.mu.Unlock()

	status := http.StatusNoContent
	switch s.kind {
	case subSlow:
		time.Sleep(250 * time.Millisecond) // the behaviour under test: a slow endpoint
	case subFlaky, subBatched, subFiltered, subOrdered:
		if try <= 2 {
			status = http.StatusServiceUnavailable
		}
	case subDead:
		if now.UnixNano() < s.recoverAt.Load() {
			status = http.StatusInternalServerError
		}
	case subFlap:
		if now.UnixNano() < s.flapUntil.Load() && now.Unix()/5%2 == 0 {
			status = http.StatusServiceUnavailable
		}
	case subGone:
		status = http.StatusGone
	}
	s.mu.Lock()
	if status < 300 {
		for _, id := range ids {
			s.got[id]++
			if _, ok := s.first[id]; !ok && s.kind == subHealthy {
				s.first[id] = now
			}
		}
		if s.kind == subOps {
			s.noteOp(body)
		}
		if want := transformedBody(id); s.kind == subTransformed && string(body) != want {
			s.nBad++
			if len(s.badBodies) < 5 {
				s.badBodies = append(s.badBodies, fmt.Sprintf("%s: got %.200s, want %s", id, body, want))
			}
		}
	} else {
		s.failures++
	}
	s.mu.Unlock()
	w.WriteHeader(status)
}

// noteOp records an operational event's envelope; s.mu is held.
func (s *subscriber) noteOp(body []byte) {
	var env struct {
		ID   string `json:"id"`
		Type string `json:"type"`
		Data struct {
			SubscriptionID string `json:"subscription_id"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &env) != nil {
		return
	}
	k := [2]string{env.Type, env.Data.SubscriptionID}
	if s.ops[k] == nil {
		s.ops[k] = make(map[string]bool)
	}
	s.ops[k][env.ID] = true
}

// opsAbout counts the distinct operational events of type typ about
// subscription sub that were received.
func (s *subscriber) opsAbout(typ, sub string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ops[[2]string{typ, sub}])
}

// batchIDs returns the event keys of a batch body, {"events":[envelope,...]}.
func batchIDs(body []byte) ([]string, error) {
	var b struct {
		Events []struct {
			ID string `json:"id"`
		} `json:"events"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, err
	}
	if len(b.Events) == 0 {
		return nil, errors.New("a batch without events")
	}
	ids := make([]string, len(b.Events))
	for i, e := range b.Events {
		ids[i] = e.ID
	}
	return ids, nil
}

// bad returns how many bodies of subTransformed were not its transform's,
// and a few of them.
func (s *subscriber) bad() (int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nBad, append([]string(nil), s.badBodies...)
}

// keys returns every id delivered with a 2xx answer.
func (s *subscriber) keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.got))
	for id := range s.got {
		out = append(out, id)
	}
	return out
}

// received reports whether key was delivered with a 2xx answer.
func (s *subscriber) received(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got[key] > 0
}

// counts returns the distinct ids delivered and the excess deliveries
// (an id delivered n times counts n-1) among the ids keep selects.
func (s *subscriber) counts(keep func(string) bool) (distinct, excess int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, n := range s.got {
		if keep(id) {
			distinct++
			excess += n - 1
		}
	}
	return distinct, excess
}

// subscribers serves every subscriber on one loopback listener, one path
// per behaviour (/sub/<kind>), and the fan-out subscribers
// (/sub/fan/<i>).
type subscribers struct {
	byKind map[string]*subscriber
	fan    []*subscriber
}

// newSubscribers makes one subscriber of each kind and fan more, of the
// fanKinds in turn.
func newSubscribers(fan int) *subscribers {
	s := &subscribers{byKind: make(map[string]*subscriber)}
	for _, k := range subKinds {
		s.byKind[k] = newSubscriber(k)
	}
	for i := range fan {
		s.fan = append(s.fan, newSubscriber(fanKinds[i%len(fanKinds)]))
	}
	return s
}

// all are every subscriber: one of each kind, then the fan-out ones.
func (s *subscribers) all() []*subscriber {
	var out []*subscriber
	for _, k := range subKinds {
		out = append(out, s.byKind[k])
	}
	return append(out, s.fan...)
}

// ofKind are the subscribers of kind, its own and the fan-out ones.
func (s *subscribers) ofKind(kind string) []*subscriber {
	var out []*subscriber
	for _, sub := range s.all() {
		if sub.kind == kind {
			out = append(out, sub)
		}
	}
	return out
}

// path is where sub is served.
func (s *subscribers) path(sub *subscriber) string {
	if i := slices.Index(s.fan, sub); i >= 0 {
		return "/sub/fan/" + strconv.Itoa(i)
	}
	return "/sub/" + sub.kind
}

func (s *subscribers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/sub/")
	sub, ok := s.byKind[name]
	if i, err := strconv.Atoi(strings.TrimPrefix(name, "fan/")); strings.HasPrefix(name, "fan/") && err == nil && i >= 0 && i < len(s.fan) {
		sub, ok = s.fan[i], true
	}
	if !ok {
		http.NotFound(w, r)
		return
	}
	sub.ServeHTTP(w, r)
}
