package events_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/events"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/processor"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// processorNode is a processor with its admin listener, as `hookstream run
// --roles processor` serves it.
type processorNode struct {
	srv  *httptest.Server
	p    *processor.Processor
	stop func(t *testing.T)
}

// startProcessorNode starts a processor whose admin listener is
// configured by cfg, its address filled in, and then by setup: the
// processor advertises cfg.AdvertisedAddr when set, else the listener.
// The listener serves the events service (stories, search, resend).
func startProcessorNode(t *testing.T, env *kafkatest.Env, name string, cfg admin.Config, setup ...func(*admin.Server)) *processorNode {
	t.Helper()
	log := kafkatest.Logger(t)
	cl := env.Client(t)
	opts := []kgo.Opt{kgo.SeedBrokers(env.Seeds...)}
	reg := prometheus.NewRegistry()
	srv := httptest.NewUnstartedServer(nil)
	cfg.Addr = srv.Listener.Addr().String()
	s := admin.New(cfg, reg, log)
	for _, f := range setup {
		f(s)
	}
	srv.Config.Handler = s
	srv.Start()
	t.Cleanup(srv.Close)
	p := processor.New(processor.Config{
		Names:           env.Names,
		StateDir:        t.TempDir(),
		MaxRecordBytes:  topics.MaxRecordBytes(1 << 20),
		TransactionalID: env.Names.Prefix + "-processor-" + name,
		SessionTimeout:  6 * time.Second,
		AdminAddr:       cmp.Or(cfg.AdvertisedAddr, cfg.Addr),
	}, append(opts, kgo.RebalanceTimeout(10*time.Second)), log, reg)
	registry := subscriptions.NewRegistry(env.ClusterOf(cl), log)
	events.New(env.ClusterOf(cl), registry, events.NewStoryQuery(p, registry, env.ClusterOf(cl), "", log)).Mount(s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop := func(t *testing.T) {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("processor %s: %v", name, err)
			}
		})
	}
	t.Cleanup(func() { stop(t) })
	return &processorNode{srv: srv, p: p, stop: stop}
}

// get asks n's admin API for an event's story, with the token.
func (n *processorNode) get(t *testing.T, key string) (int, events.Story, string) {
	t.Helper()
	status, raw, servedBy := n.query(t, key, token)
	var s events.Story
	if status == http.StatusOK {
		if err := json.Unmarshal([]byte(raw), &s); err != nil {
			t.Fatalf("story %q: %v", raw, err)
		}
	}
	return status, s, servedBy
}

// query asks n's admin API for key's story, with bearer as the token when
// given, and returns the status, the body and the instance that served it
// when the query was forwarded.
func (n *processorNode) query(t *testing.T, key, bearer string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", n.srv.URL+"/api/events/"+url.PathEscape(key), nil)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := n.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw), resp.Header.Get("X-Hookstream-Served-By")
}

// TestEventQueriesReachTheOwner: with two processors sharing the
// partitions, each instance answers every event: from its own store, or
// forwarded to the owner. Unknown events are 404 everywhere, and the token
// guards the endpoint like the rest of /api.
func TestEventQueriesReachTheOwner(t *testing.T) {
	env := kafkatest.New(t, 4, 1<<20)
	a := startProcessorNode(t, env, "a", admin.Config{Token: token})
	b := startProcessorNode(t, env, "b", admin.Config{Token: token})
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		for _, n := range []*processorNode{a, b} {
			if ready, detail := n.p.Ready(context.Background()); !ready || len(detail.(map[string]any)["partitions"].([]int32)) == 0 {
				return fmt.Errorf("processor not ready with partitions: %v", detail)
			}
		}
		return nil
	})
	cl := env.Client(t)
	var keys []string
	for i := range 8 {
		id := fmt.Sprintf("q-%d", i)
		keys = append(keys, "shop:"+id)
		if err := cl.ProduceSync(context.Background(), kafkatest.IngestRecord(env.Names, "shop", id, `{"n":1}`)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	forwarded := map[bool]bool{}
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		for _, k := range keys {
			for _, n := range []*processorNode{a, b} {
				status, s, by := n.get(t, k)
				if status != http.StatusOK || s.ID != k || s.Status != "done" || s.ReceivedAt == nil {
					return fmt.Errorf("%s from %s: got %d %+v, want its story", k, n.srv.URL, status, s)
				}
				forwarded[by != ""] = true
			}
		}
		return nil
	})
	if !forwarded[true] || !forwarded[false] {
		t.Errorf("answers forwarded: got %v, want some answered locally and some by the owner", forwarded)
	}
	for _, n := range []*processorNode{a, b} {
		if status, _, _ := n.get(t, "shop:never-sent"); status != http.StatusNotFound {
			t.Errorf("unknown event from %s: got %d, want 404", n.srv.URL, status)
		}
		resp, err := http.Get(n.srv.URL + "/api/events/" + keys[0])
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("without the token: got %d, want 401", resp.StatusCode)
		}
	}
}

// TestStoryNamesItsEventsRecord: an event's story names its latest record
// on the events topic, as a read_committed reader finds it: its first
// emission, and after a replay of the processor, the replay's record.
func TestStoryNamesItsEventsRecord(t *testing.T) {
	env := kafkatest.New(t, 2, 1<<20)
	cl := env.Client(t)
	for i := range 6 {
		if err := cl.ProduceSync(context.Background(), kafkatest.IngestRecord(env.Names, "shop", fmt.Sprintf("r-%d", i), `{"n":1}`)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// latest is each event's latest events record: replays come later.
	latest := func() map[string]events.Position {
		got := map[string]events.Position{}
		for _, r := range env.Records(t, env.Names.Events) {
			got[string(r.Key)] = events.Position{Partition: r.Partition, Offset: r.Offset}
		}
		return got
	}
	check := func(n *processorNode, want map[string]events.Position) {
		t.Helper()
		kafkatest.WaitFor(t, 60*time.Second, func() error {
			for key, pos := range want {
				status, s, _ := n.get(t, key)
				if status != http.StatusOK || s.Events == nil || *s.Events != pos {
					return fmt.Errorf("%s: got %d, events record %+v; want %+v", key, status, s.Events, pos)
				}
			}
			return nil
		})
	}
	a := startProcessorNode(t, env, "a", admin.Config{Token: token})
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		if n := len(latest()); n != 6 {
			return fmt.Errorf("%d events, want 6", n)
		}
		return nil
	})
	first := latest()
	check(a, first)
	a.stop(t)

	env.ReplayProcessor(t)
	b := startProcessorNode(t, env, "a", admin.Config{Token: token})
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		if n := len(env.Records(t, env.Names.Events)); n != 12 {
			return fmt.Errorf("%d events records, want 12 (6 and their replays)", n)
		}
		return nil
	})
	replayed := latest()
	for key, pos := range replayed {
		if pos == first[key] {
			t.Fatalf("%s: the replay wrote no new record", key)
		}
	}
	check(b, replayed)
}
