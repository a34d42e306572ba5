package events_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/events"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/processor"
	"github.com/hookstream/hookstream/topics"
)

// waitReady waits until every node's processor holds partitions and none
// restores.
func waitReady(t *testing.T, nodes ...*processorNode) {
	t.Helper()
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		for _, n := range nodes {
			if ready, detail := n.p.Ready(context.Background()); !ready || len(detail.(map[string]any)["partitions"].([]int32)) == 0 {
				return fmt.Errorf("processor not ready with partitions: %v", detail)
			}
		}
		return nil
	})
}

// rogue is a Kafka client that joined the processor group as a processor
// would, advertising the admin address of a server the test controls,
// which records every request it receives.
type rogue struct {
	srv *httptest.Server

	mu       sync.Mutex
	owned    map[int32]bool
	requests []*http.Request
}

// joinRogue joins the processor group with a client id that advertises
// handler's server, consuming the ingest topic with the cooperative-sticky
// protocol the group's balancer speaks, so it takes a share of the
// partitions.
func joinRogue(t *testing.T, env *kafkatest.Env, handler http.HandlerFunc) *rogue {
	t.Helper()
	r := &rogue{owned: map[int32]bool{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.requests = append(r.requests, req.Clone(context.Background()))
		r.mu.Unlock()
		handler(w, req)
	}))
	t.Cleanup(r.srv.Close)
	cl := env.Client(t,
		kgo.ClientID(processor.ClientID(r.srv.Listener.Addr().String())),
		kgo.ConsumerGroup(string(env.Names.ProcessorGroup())),
		kgo.ConsumeTopics(string(env.Names.Ingest)),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.DisableAutoCommit(),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			r.mu.Lock()
			defer r.mu.Unlock()
			for _, p := range m[string(env.Names.Ingest)] {
				r.owned[p] = true
			}
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			r.mu.Lock()
			defer r.mu.Unlock()
			for _, p := range m[string(env.Names.Ingest)] {
				delete(r.owned, p)
			}
		}),
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	}()
	t.Cleanup(func() { cancel(); <-done }) // before the client closes
	return r
}

// keyOwned waits until the rogue owns a partition and returns a key of
// that partition, with prefix.
func (r *rogue) keyOwned(t *testing.T, partitions int, prefix string) string {
	t.Helper()
	var key string
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		for i := range 1000 {
			k := fmt.Sprintf("shop:%s-%d", prefix, i)
			if r.owned[topics.PartitionOf([]byte(k), partitions)] {
				key = k
				return nil
			}
		}
		return fmt.Errorf("the rogue owns no partition yet")
	})
	return key
}

// received returns the requests the rogue's server received for key.
func (r *rogue) received(key string) []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*http.Request
	for _, req := range r.requests {
		if strings.HasSuffix(req.URL.Path, "/"+key) {
			out = append(out, req)
		}
	}
	return out
}

// TestRogueMemberGetsNoCredential: a Kafka client that joins the
// processor group advertising an address of its choice takes partitions,
// and story queries for their keys go its way. It must receive no
// credential, whatever it answers (a forged story, a redirect elsewhere)
// its answer must not be shown, and an instance without a token, which
// shares no key with the others, must not ask it at all.
func TestRogueMemberGetsNoCredential(t *testing.T) {
	const partitions = 6
	env := kafkatest.New(t, partitions, 1<<20)
	withToken := startProcessorNode(t, env, "a", admin.Config{Token: token})
	noToken := startProcessorNode(t, env, "b", admin.Config{})
	waitReady(t, withToken, noToken)

	var decoyHits atomic.Int64
	decoy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		decoyHits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"forged-by-redirect","status":"done"}`)
	}))
	t.Cleanup(decoy.Close)
	r := joinRogue(t, env, func(w http.ResponseWriter, req *http.Request) {
		switch {
		case strings.Contains(req.URL.Path, "redirect-"):
			http.Redirect(w, req, decoy.URL+req.URL.Path, http.StatusTemporaryRedirect)
			return
		case strings.Contains(req.URL.Path, "huge-"):
			w.Write(bytes.Repeat([]byte(" "), 2<<20))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"forged","status":"done","partition":0,"offset":0,"processed_at":"2020-01-01T00:00:00Z","expires_at":"2030-01-01T00:00:00Z","duplicates":{"count":0},"replays":{"count":0},"deliveries":[]}`)
	})
	forged, redirected, huge := r.keyOwned(t, partitions, "forge"), r.keyOwned(t, partitions, "redirect"), r.keyOwned(t, partitions, "huge")

	// Without a token there is no key to authenticate the owner's answer:
	// the instance says so and asks no one.
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		status, body, _ := noToken.query(t, forged, "")
		if len(r.received(forged)) > 0 {
			return nil // asked: the check below fails
		}
		if status != http.StatusServiceUnavailable || !strings.Contains(body, "HOOKSTREAM_ADMIN_TOKEN") {
			return fmt.Errorf("without a token: got %d %s, want 503 naming HOOKSTREAM_ADMIN_TOKEN", status, body)
		}
		return nil
	})
	if got := r.received(forged); len(got) > 0 {
		t.Errorf("the instance without a token sent %d queries to the rogue, want none", len(got))
	}

	for _, tc := range []struct{ key, want string }{
		{forged, "answered 200 without a valid signature"},
		{redirected, "answered 307 without a valid signature"},
		{huge, "answered more than 1048576 bytes"},
	} {
		key := tc.key
		var status int
		var body string
		kafkatest.WaitFor(t, 60*time.Second, func() error {
			if status, body, _ = withToken.query(t, key, token); len(r.received(key)) == 0 {
				return fmt.Errorf("%s: got %d %s; waiting for the query to reach the rogue", key, status, body)
			}
			return nil
		})
		for _, req := range r.received(key) {
			for name, values := range req.Header {
				for _, v := range values {
					if strings.Contains(v, token) || strings.EqualFold(name, "Authorization") || strings.EqualFold(name, "Cookie") {
						t.Errorf("%s: the rogue received %s: %s, want no credential", key, name, v)
					}
				}
			}
		}
		if status != http.StatusBadGateway || strings.Contains(body, "forged") || !strings.Contains(body, tc.want) {
			t.Errorf("%s: got %d %s, want 502 saying %q, and no forged story", key, status, body, tc.want)
		}
	}
	if n := decoyHits.Load(); n > 0 {
		t.Errorf("the rogue's redirect was followed %d times, want never", n)
	}
}

// TestQueriesNeverForwardedToSelf: instances on several hosts with the
// default loopback admin listener all advertise the same address; an
// instance that finds its own address advertised by another partition's
// owner says why it cannot forward, at once, instead of sending the query
// to itself.
func TestQueriesNeverForwardedToSelf(t *testing.T) {
	env := kafkatest.New(t, 4, 1<<20)
	a := startProcessorNode(t, env, "a", admin.Config{Token: token})
	var toSelf atomic.Int64
	handler := a.srv.Config.Handler
	a.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			toSelf.Add(1) // not the test's own query
		}
		handler.ServeHTTP(w, r)
	})
	// b is on "another host" where the same loopback address is its own.
	b := startProcessorNode(t, env, "b", admin.Config{Token: token, AdvertisedAddr: a.srv.Listener.Addr().String()})
	waitReady(t, a, b)
	var key string
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		for i := range 100 {
			k := fmt.Sprintf("shop:self-%d", i)
			if _, _, err := a.p.Lookup(topics.PartitionOf([]byte(k), 4), []byte(k)); err != nil {
				key = k
				return nil
			}
		}
		return fmt.Errorf("a owns every partition")
	})
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		status, body, _ := a.query(t, key, token)
		if status != http.StatusServiceUnavailable || !strings.Contains(body, "HOOKSTREAM_ADMIN_ADVERTISED_ADDR") {
			return fmt.Errorf("%s: got %d %s, want 503 naming HOOKSTREAM_ADMIN_ADVERTISED_ADDR", key, status, body)
		}
		return nil
	})
	if n := toSelf.Load(); n > 0 {
		t.Errorf("a sent %d queries to itself, want none", n)
	}
}

// TestStartSaysWhyForwardingCannotWork: a processor's admin listener says
// at start, in one line, when other instances cannot forward story queries
// to it, and is silent when they can.
func TestStartSaysWhyForwardingCannotWork(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  admin.Config
		want string // "" for no line
	}{
		{"loopback", admin.Config{Addr: "127.0.0.1:0", Token: token}, "HOOKSTREAM_ADMIN_ADVERTISED_ADDR"},
		{"no token", admin.Config{Addr: "127.0.0.1:0", AdvertisedAddr: "10.0.0.5:8081"}, "HOOKSTREAM_ADMIN_TOKEN"},
		{"advertised", admin.Config{Addr: "127.0.0.1:0", AdvertisedAddr: "10.0.0.5:8081", Token: token}, ""},
		{"every interface", admin.Config{Addr: "0.0.0.0:0", Token: token}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			tc.cfg.Roles = []string{"processor"}
			log := slog.New(slog.NewTextHandler(&buf, nil))
			s := admin.New(tc.cfg, prometheus.NewRegistry(), log)
			p := processor.New(processor.Config{}, nil, log, prometheus.NewRegistry())
			events.NewStoryQuery(p, nil, topics.Cluster{}, "", log).Mount(s)
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // the line comes before the listener starts
			if err := s.Run(ctx); err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
				if strings.Contains(l, "story queries") {
					lines = append(lines, l)
				}
			}
			switch {
			case tc.want == "" && len(lines) > 0:
				t.Errorf("got %q, want no line about story queries", lines)
			case tc.want != "" && (len(lines) != 1 || !strings.Contains(lines[0], tc.want)):
				t.Errorf("got %q, want one line about story queries naming %s", lines, tc.want)
			}
		})
	}
}
