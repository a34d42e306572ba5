package events_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/events"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/processor"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/webhook"
)

// sink records the webhook-id of every delivery, by path.
type sink struct {
	mu  sync.Mutex
	ids map[string][]string // path -> webhook-ids, in order
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.ids[r.URL.Path] = append(s.ids[r.URL.Path], r.Header.Get("webhook-id"))
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *sink) received(path string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ids[path]...)
}

// runUntilCleanup runs f until the test ends.
func runUntilCleanup(t *testing.T, name string, f func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
}

// TestResend runs the pipeline (processor, dispatcher, the admin API as
// run mounts it) on a broker: an event delivered once is resent to its
// subscription over the API, and the subscriber receives it again with the
// same webhook-id; the event's story shows the resend as attempt 1 of a
// resend. A subscription that would not receive the event, and a disabled
// one, are refused unless forced; an unknown subscription or event, an
// event whose record retention took, and bad requests are refused.
func TestResend(t *testing.T) {
	t.Parallel()
	const maxBody = 1 << 20
	env := kafkatest.New(t, 2, maxBody)
	names := env.Names
	log := kafkatest.Logger(t)
	opts := []kgo.Opt{kgo.SeedBrokers(env.Seeds...)}
	cl := env.Client(t)
	registry := subscriptions.NewRegistry(env.ClusterOf(cl), log)

	p := processor.New(processor.Config{
		Names: names, StateDir: t.TempDir(), MaxRecordBytes: topics.MaxRecordBytes(maxBody),
		TransactionalID: names.Prefix + "-processor", SessionTimeout: 6 * time.Second,
	}, opts, log, prometheus.NewRegistry())
	runUntilCleanup(t, "processor", p.Run)
	d := dispatch.New(dispatch.Config{
		Client:   webhook.Config{AllowPrivate: true, Timeout: 5 * time.Second},
		Schedule: []time.Duration{100 * time.Millisecond}, DisableAfter: time.Hour,
	}, topics.Cluster{Client: cl, Opts: append(opts, kgo.HeartbeatInterval(200*time.Millisecond)), Names: names}, registry, log, prometheus.NewRegistry())
	runUntilCleanup(t, "dispatcher", d.Run)

	srv := admin.New(admin.Config{Token: token}, prometheus.NewRegistry(), log)
	c := env.ClusterOf(cl)
	events.New(c, registry, events.NewStoryQuery(p, registry, c, "", log)).Mount(srv)
	api := httptest.NewServer(srv)
	t.Cleanup(api.Close)
	call := func(method, path string, body any) (int, []byte) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequestWithContext(testContext(t), method, api.URL+path, rd)
		req.Header.Set("Authorization", "Bearer "+token)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, raw
	}

	recv := &sink{ids: map[string][]string{}}
	sinkSrv := httptest.NewServer(recv)
	t.Cleanup(sinkSrv.Close)
	create := func(path, from string, sources ...string) subscriptions.Subscription {
		t.Helper()
		s := subscriptions.Subscription{URL: sinkSrv.URL + path, Sources: sources}
		if err := registry.Create(testContext(t), &s, from); err != nil {
			t.Fatalf("create subscription: %v", err)
		}
		return s
	}
	shop, crm := create("/shop", "earliest", "shop"), create("/crm", "earliest", "crm")

	const key = "shop:1"
	if err := env.Client(t).ProduceSync(testContext(t), kafkatest.IngestRecord(names, "shop", "1", `{"n":1}`)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	story := func() events.Story {
		t.Helper()
		status, body := call("GET", "/api/events/"+url.PathEscape(key), nil)
		var s events.Story
		if status != http.StatusOK || json.Unmarshal(body, &s) != nil {
			t.Logf("story: %d %s", status, body)
		}
		return s
	}
	delivery := func(s events.Story, sub string) events.Delivery {
		for _, dl := range s.Deliveries {
			if dl.Subscription == sub {
				return dl
			}
		}
		return events.Delivery{}
	}
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		if got := recv.received("/shop"); len(got) != 1 {
			return fmt.Errorf("/shop received %v, want %s once", got, key)
		}
		if dl := delivery(story(), shop.ID); dl.State != topics.OutcomeDelivered || len(dl.Recent) != 1 {
			return fmt.Errorf("story: delivery to %s %+v, want delivered once", shop.ID, dl)
		}
		return nil
	})

	// A subscription created after the event, and disabled: it never
	// received the event.
	off := create("/off", "latest", "shop")
	if _, err := registry.Update(testContext(t), off.ID, func(s *subscriptions.Subscription) error { s.Enabled = false; return nil }); err != nil {
		t.Fatalf("disable: %v", err)
	}

	resend := func(k string, body any) (int, string) {
		t.Helper()
		status, raw := call("POST", "/api/events/"+url.PathEscape(k)+"/resend", body)
		var e struct{ Error string }
		_ = json.Unmarshal(raw, &e)
		return status, e.Error
	}
	status, raw := call("POST", "/api/events/"+url.PathEscape(key)+"/resend", events.ResendRequest{Subscription: shop.ID})
	var r events.Resent
	if status != http.StatusAccepted || json.Unmarshal(raw, &r) != nil || r.Event != key || r.Subscription != shop.ID || r.Waiting || r.Forced != nil {
		t.Fatalf("resend: got %d %s, want 202 with the resend", status, raw)
	}
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		if got := recv.received("/shop"); len(got) != 2 || got[0] != key || got[1] != key {
			return fmt.Errorf("/shop received %v, want %s twice, with the same webhook-id", got, key)
		}
		dl := delivery(story(), shop.ID)
		if len(dl.Recent) != 2 {
			return fmt.Errorf("story: delivery to %s %+v, want two attempts", shop.ID, dl)
		}
		if first, again := dl.Recent[0], dl.Recent[1]; first.Resend || !again.Resend || again.Attempt != 1 || again.Outcome != topics.OutcomeDelivered {
			return fmt.Errorf("story: attempts %+v, want the first delivery, then attempt 1 of a resend, delivered", dl.Recent)
		}
		return nil
	})

	// Refused even forced: a pull subscription, sent nothing.
	pulled := subscriptions.Subscription{Pull: true}
	if err := registry.Create(testContext(t), &pulled, "earliest"); err != nil {
		t.Fatalf("create a pull subscription: %v", err)
	}
	if status, msg := resend(key, events.ResendRequest{Subscription: pulled.ID, Force: true}); status != http.StatusConflict || !strings.Contains(msg, "pull subscription") {
		t.Errorf("resend to a pull subscription: got %d %q, want 409 saying it is pulled", status, msg)
	}

	// Refused unless forced: a subscription that does not receive shop
	// events, and a disabled one.
	if status, msg := resend(key, events.ResendRequest{Subscription: crm.ID}); status != http.StatusConflict ||
		msg != fmt.Sprintf(`subscription %s would not receive %s: source "shop" matches none of sources ["crm"]; resend with --force to send it anyway`, crm.ID, key) {
		t.Errorf("resend to a subscription of another source: got %d %q, want 409 saying why", status, msg)
	}
	if status, msg := resend(key, events.ResendRequest{Subscription: off.ID}); status != http.StatusConflict ||
		msg != fmt.Sprintf("subscription %s is disabled: enable it first, or resend with --force to send it when it is enabled", off.ID) {
		t.Errorf("resend to a disabled subscription: got %d %q, want 409", status, msg)
	}
	status, raw = call("POST", "/api/events/"+url.PathEscape(key)+"/resend", events.ResendRequest{Subscription: crm.ID, Force: true})
	r = events.Resent{}
	if status != http.StatusAccepted || json.Unmarshal(raw, &r) != nil || len(r.Forced) != 1 {
		t.Errorf("forced resend: got %d %s, want 202 saying what was forced", status, raw)
	}
	status, raw = call("POST", "/api/events/"+url.PathEscape(key)+"/resend", events.ResendRequest{Subscription: off.ID, Force: true})
	r = events.Resent{}
	if status != http.StatusAccepted || json.Unmarshal(raw, &r) != nil || !r.Waiting {
		t.Errorf("forced resend to a disabled subscription: got %d %s, want 202, waiting", status, raw)
	}
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		if got := recv.received("/crm"); len(got) != 1 || got[0] != key {
			return fmt.Errorf("/crm received %v, want %s once, forced", got, key)
		}
		return nil
	})
	if got := recv.received("/off"); len(got) != 0 {
		t.Errorf("/off received %v while disabled, want nothing", got)
	}
	// The forced resend to the disabled subscription waits for enable.
	if _, err := registry.Update(testContext(t), off.ID, func(s *subscriptions.Subscription) error { s.Enabled = true; return nil }); err != nil {
		t.Fatalf("enable: %v", err)
	}
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		if got := recv.received("/off"); len(got) != 1 || got[0] != key {
			return fmt.Errorf("/off received %v once enabled, want %s once", got, key)
		}
		if dl := delivery(story(), off.ID); len(dl.Recent) != 1 || !dl.Recent[0].Resend || dl.State != topics.OutcomeDelivered {
			return fmt.Errorf("story: delivery to %s %+v, want the resend alone, delivered", off.ID, dl)
		}
		return nil
	})

	for _, tt := range []struct {
		name, key string
		body      any
		status    int
		err       string
	}{
		{"unknown subscription", key, events.ResendRequest{Subscription: "sub_nope"}, http.StatusNotFound, "no subscription sub_nope (hookstream subscriptions list shows them)"},
		{"unknown event", "shop:nope", events.ResendRequest{Subscription: shop.ID}, http.StatusNotFound, "no event shop:nope in the ledger (never received, or forgotten after HOOKSTREAM_DEDUP_TTL): nothing to resend"},
		{"no subscription", key, map[string]any{}, http.StatusBadRequest, "subscription: required (the id of the subscription to resend to)"},
		{"unknown field", key, map[string]any{"subscription": shop.ID, "now": true}, http.StatusBadRequest, `invalid JSON: json: unknown field "now"`},
		{"not an event", "nope", events.ResendRequest{Subscription: shop.ID}, http.StatusBadRequest, `event "nope": want <source>:<event-id>`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if status, msg := resend(tt.key, tt.body); status != tt.status || msg != tt.err {
				t.Errorf("resend: got %d %q, want %d %q", status, msg, tt.status, tt.err)
			}
		})
	}

	// Retention takes the event's record: nothing to resend.
	adm := env.Admin(t)
	ends, err := adm.ListEndOffsets(testContext(t), string(names.Events))
	if err != nil {
		t.Fatal(err)
	}
	var deleted kadm.Offsets
	ends.Each(func(o kadm.ListedOffset) {
		deleted.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: o.Offset, LeaderEpoch: -1})
	})
	if _, err := adm.DeleteRecords(testContext(t), deleted); err != nil {
		t.Fatalf("delete records: %v", err)
	}
	if status, msg := resend(key, events.ResendRequest{Subscription: shop.ID}); status != http.StatusNotFound || !strings.Contains(msg, "is no longer on the events topic") {
		t.Errorf("resend after retention: got %d %q, want 404", status, msg)
	}
}
