package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/attempts"
	"github.com/hookstream/hookstream/deadletter"
	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/stats"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/webhook"
)

const token = "t0ken"

type apiHarness struct {
	srv      *httptest.Server
	env      *kafkatest.Env
	cl       *kgo.Client
	registry *subscriptions.Registry
	reg      *prometheus.Registry
}

// newAPI serves the admin API with a running dispatcher on a test broker.
func newAPI(t *testing.T) *apiHarness {
	t.Helper()
	env := kafkatest.New(t, 2, 1<<20)
	h := serveAPI(t, env, nil)
	stop := h.runDispatcher(t, nil)
	t.Cleanup(stop)
	return h
}

// serveAPI serves the admin API of a process on env, with the dispatcher d
// when not nil.
func serveAPI(t *testing.T, env *kafkatest.Env, d *dispatch.Dispatcher) *apiHarness {
	t.Helper()
	cl := env.Client(t)
	log := kafkatest.Logger(t)
	c := env.ClusterOf(cl)
	h := &apiHarness{env: env, cl: cl, registry: subscriptions.NewRegistry(c, log), reg: prometheus.NewRegistry()}
	tally := attempts.NewTally(c, log)
	h.run(t, "attempts tally", tally.Run)
	counts := stats.NewTally(c, log)
	h.run(t, "stats tally", counts.Run)
	s := admin.New(admin.Config{Token: token}, h.reg, log)
	subscriptions.New(h.registry, tally, "").Mount(s)
	deadletter.New(c).Mount(s)
	stats.New(counts, tally, groups.New(c, h.registry), nil).Mount(s)
	h.srv = httptest.NewServer(s)
	t.Cleanup(h.srv.Close)
	return h
}

// runDispatcher runs a dispatcher with schedule (nil: the default) until
// the returned stop is called.
func (h *apiHarness) runDispatcher(t *testing.T, schedule []time.Duration) (stop func()) {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(h.env.Seeds...)}
	d := dispatch.New(dispatch.Config{Client: webhook.Config{AllowPrivate: true}, Schedule: schedule, DisableAfter: time.Hour},
		topics.Cluster{Client: h.cl, Opts: opts, Names: h.env.Names}, h.registry, kafkatest.Logger(t), prometheus.NewRegistry())
	return h.run(t, "dispatcher", d.Run)
}

// run runs fn until the returned stop is called, or the test ends.
func (h *apiHarness) run(t *testing.T, name string, fn func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// call sends a request with the token and decodes the JSON answer into out.
func (h *apiHarness) call(t *testing.T, method, path, auth string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, h.srv.URL+path, rd)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: answer %q is not JSON: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode
}

func TestAPIErrors(t *testing.T) {
	h := newAPI(t)
	bearer := "Bearer " + token
	tests := []struct {
		name, method, path, auth string
		body                     any
		status                   int
		err                      string
	}{
		{"no token", "GET", "/api/subscriptions", "", nil, 401, "missing or invalid bearer token"},
		{"wrong token", "GET", "/api/subscriptions", "Bearer nope", nil, 401, "missing or invalid bearer token"},
		{"unknown subscription", "GET", "/api/subscriptions/sub_nope", bearer, nil, 404, "subscription not found: sub_nope"},
		{"no url", "POST", "/api/subscriptions", bearer, map[string]any{}, 400, "url, topic or pull: required"},
		{"bad url", "POST", "/api/subscriptions", bearer, map[string]any{"url": "ftp://x"}, 400, "invalid subscription: url: must be http or https"},
		{"bad glob", "POST", "/api/subscriptions", bearer, map[string]any{"url": "http://127.0.0.1:1/", "event_types": []string{"["}}, 400, `invalid subscription: event_types: invalid glob "["`},
		{"bad from", "POST", "/api/subscriptions", bearer, map[string]any{"url": "http://127.0.0.1:1/", "from": "yesterday"}, 400, `invalid subscription: from: "yesterday" is not earliest, latest or an RFC 3339 time`},
		{"unknown field", "POST", "/api/subscriptions", bearer, map[string]any{"url": "http://127.0.0.1:1/", "color": "red"}, 400, `invalid JSON: json: unknown field "color"`},
		{"batch_max 0", "POST", "/api/subscriptions", bearer, map[string]any{"url": "http://127.0.0.1:1/", "batch_max": 0}, 400, "invalid subscription: batch_max: 0 is not between 1 and 1000"},
		{"batch_max 1001", "POST", "/api/subscriptions", bearer, map[string]any{"url": "http://127.0.0.1:1/", "batch_max": 1001}, 400, "invalid subscription: batch_max: 1001 is not between 1 and 1000"},
		{"batch_wait 11s", "POST", "/api/subscriptions", bearer, map[string]any{"url": "http://127.0.0.1:1/", "batch_max": 10, "batch_wait": "11s"}, 400, "invalid subscription: batch_wait: 11s is not between 0s and 10s"},
		{"batch_wait not a duration", "POST", "/api/subscriptions", bearer, map[string]any{"url": "http://127.0.0.1:1/", "batch_wait": "soon"}, 400, `invalid JSON: "soon" is not a duration such as 500ms or 2s`},
		{"patch batch_max 0", "PATCH", "/api/subscriptions/sub_x", bearer, map[string]any{"batch_max": 0}, 400, "invalid subscription: batch_max: 0 is not between 1 and 1000"},
		{"bad limit", "GET", "/api/subscriptions/x/attempts?limit=0", bearer, nil, 400, "limit: want a number from 1 to 1000"},
		{"bad dlq kind", "GET", "/api/dlq?kind=other", bearer, nil, 400, `kind: unknown dead-letter queue "other" (want processor or delivery)`},
		{"redrive without selection", "POST", "/api/dlq/redrive", bearer, map[string]any{"kind": "processor"}, 400, "select letters with since, key, or all: true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got map[string]string
			status := h.call(t, tt.method, tt.path, tt.auth, tt.body, &got)
			if status != tt.status || got["error"] != tt.err {
				t.Errorf("got %d %q, want %d %q", status, got["error"], tt.status, tt.err)
			}
		})
	}
	// Health and metrics need no token.
	if status := h.call(t, "GET", "/healthz", "", nil, nil); status != 200 {
		t.Errorf("/healthz: got %d, want 200", status)
	}
}

// TestSubscriptionRoundTrip creates, reads, patches, rotates and deletes a
// subscription over the API, and a running dispatcher follows each change.
func TestSubscriptionRoundTrip(t *testing.T) {
	h := newAPI(t)
	bearer := "Bearer " + token
	var hits atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer sink.Close()

	var created subscriptions.Subscription
	if status := h.call(t, "POST", "/api/subscriptions", bearer, map[string]any{"url": sink.URL, "from": "earliest", "description": "ci"}, &created); status != 201 {
		t.Fatalf("create: got %d, want 201", status)
	}
	if created.ID == "" || len(created.Secret) < 10 || !created.Enabled || created.MaxInFlight != subscriptions.DefaultMaxInFlight {
		t.Fatalf("created: got %+v, want an id, a secret, enabled, default in-flight", created)
	}
	produce := func() {
		e := &topics.Envelope{ID: "shop:1", Source: "shop", EventID: "1", Type: "order", ReceivedAt: time.Now(), ProcessedAt: time.Now(), Data: []byte(`{}`)}
		v, _ := e.Marshal()
		if err := h.cl.ProduceSync(context.Background(), &kgo.Record{Topic: string(h.env.Names.Events), Key: []byte(e.ID), Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce()
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if hits.Load() < 1 {
			return fmt.Errorf("no delivery yet")
		}
		return nil
	})
	var tried []attempts.Attempt
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if status := h.call(t, "GET", "/api/subscriptions/"+created.ID+"/attempts?limit=5", bearer, nil, &tried); status != 200 || len(tried) != 1 || tried[0].Status != 204 || tried[0].EventID != "shop:1" {
			return fmt.Errorf("attempts: got %d %+v, want one 204 for shop:1", status, tried)
		}
		return nil
	})

	var got subscriptions.Subscription
	if status := h.call(t, "GET", "/api/subscriptions/"+created.ID, bearer, nil, &got); status != 200 || got.Secret == created.Secret || got.Description != "ci" {
		t.Errorf("get: got %d %+v, want the subscription with its secret hidden", status, got)
	}
	if status := h.call(t, "PATCH", "/api/subscriptions/"+created.ID, bearer, map[string]any{"enabled": false}, &got); status != 200 || got.Enabled {
		t.Errorf("patch: got %d enabled=%v, want 200 and disabled", status, got.Enabled)
	}
	// The dispatcher follows the change: the subscription's consumer
	// leaves its group.
	adm := h.env.Admin(t)
	group := string(h.env.Names.SubscriptionGroup(created.ID))
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		described, err := adm.DescribeGroups(context.Background(), group)
		if err != nil {
			return err
		}
		if n := len(described[group].Members); n > 0 {
			return fmt.Errorf("group %s: %d members, want none once disabled", group, n)
		}
		return nil
	})
	before := hits.Load()
	produce()
	time.Sleep(time.Second) // what must not happen has no event to wait for: a delivery in this second fails the test
	if hits.Load() != before {
		t.Errorf("a disabled subscription got a delivery")
	}
	var rotated subscriptions.Subscription
	if status := h.call(t, "POST", "/api/subscriptions/"+created.ID+"/rotate-secret", bearer, nil, &rotated); status != 200 || rotated.Secret == created.Secret || rotated.PreviousSecret != created.Secret {
		t.Errorf("rotate: got %d, want a new secret with the old one kept for the overlap", status)
	}
	if status := h.call(t, "DELETE", "/api/subscriptions/"+created.ID, bearer, nil, nil); status != 204 {
		t.Errorf("delete: got %d, want 204", status)
	}
	if status := h.call(t, "GET", "/api/subscriptions/"+created.ID, bearer, nil, nil); status != 404 {
		t.Errorf("get after delete: got %d, want 404", status)
	}
	var st map[string]any
	if status := h.call(t, "GET", "/api/stats", bearer, nil, &st); status != 200 || st["delivered"].(float64) < 1 || st["lag"] == nil {
		t.Errorf("stats: got %d %v, want delivered >= 1 and group lag", status, st)
	}
	var letters []map[string]any
	if status := h.call(t, "GET", "/api/dlq?kind=delivery&limit=10", bearer, nil, &letters); status != 200 || len(letters) != 0 {
		t.Errorf("dlq: got %d %v, want 200 and none", status, letters)
	}
}

func TestProfilesNeedTheToken(t *testing.T) {
	s := admin.New(admin.Config{Token: token}, prometheus.NewRegistry(), kafkatest.Logger(t))
	srv := httptest.NewServer(s)
	defer srv.Close()
	for _, tt := range []struct {
		auth   string
		status int
	}{{"", 401}, {"Bearer " + token, 200}} {
		req, _ := http.NewRequest("GET", srv.URL+"/api/debug/pprof/heap", nil)
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("heap profile with %q: got %d, want %d", tt.auth, resp.StatusCode, tt.status)
		}
		if ct := resp.Header.Get("Content-Type"); tt.status == 200 && ct != "application/octet-stream" {
			t.Errorf("heap profile: got Content-Type %q, want application/octet-stream (a profile, not the index)", ct)
		}
	}
}
