package events_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookstream/hookstream/access"
	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/events"
	"github.com/hookstream/hookstream/internal/apitest"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// startTokens follows env's access tokens until the test ends; each
// admin server it is given judges tokens by it.
func startTokens(t *testing.T, env *kafkatest.Env) *access.Service {
	t.Helper()
	tokens := access.New(access.Config{}, env.ClusterOf(env.Client(t)), kafkatest.Logger(t), prometheus.NewRegistry())
	runUntilCleanup(t, "tokens", tokens.Run)
	return tokens
}

// newToken makes a token of role (and team) and returns its secret.
func newToken(t *testing.T, tokens *access.Service, role admin.Role, team string) string {
	t.Helper()
	_, secret, err := tokens.Create(testContext(t), access.Token{Name: strings.ToLower(string(role) + "-" + team + "-reader"), Role: role, Team: team}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// TestStoryAsEachRoleSees: an event's story through two instances, told
// by the owner of its partition and forwarded by the other: a team sees
// only its subscriptions' deliveries, and nothing of an event in which
// none has a part; a viewer sees every delivery without the errors that
// quote answers; an operator sees those errors. A forwarded query names
// the caller's role and team under its signature: replayed with a wider
// role it is refused. A team resends only to its subscriptions, events in
// which one of them has a part. Viewers search events; teams do not.
func TestStoryAsEachRoleSees(t *testing.T) {
	const partitions = 4
	env := kafkatest.New(t, partitions, 1<<20)
	tokens := startTokens(t, env)
	auth := func(s *admin.Server) { s.Authenticate(tokens.Authenticate) }
	a := startProcessorNode(t, env, "a", admin.Config{Token: token}, auth)
	var (
		mu       sync.Mutex
		captured []*http.Request
	)
	b := startProcessorNode(t, env, "b", admin.Config{Token: token}, auth)
	handler := b.srv.Config.Handler
	b.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, admin.PeerPrefix) {
			mu.Lock()
			captured = append(captured, r.Clone(context.Background()))
			mu.Unlock()
		}
		handler.ServeHTTP(w, r)
	})
	waitReady(t, a, b)

	cl := env.Client(t)
	registry := subscriptions.NewRegistry(env.ClusterOf(cl), kafkatest.Logger(t))
	create := func(team string) subscriptions.Subscription {
		t.Helper()
		s := subscriptions.Subscription{URL: "https://example.com/" + team, Team: team}
		if err := registry.Create(testContext(t), &s, "latest"); err != nil {
			t.Fatal(err)
		}
		return s
	}
	payments, shipping := create("payments"), create("shipping")

	// Keys b's processor owns: a forwards their queries to b.
	var shared, theirs string
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		shared, theirs = "", ""
		for i := range 200 {
			k := fmt.Sprintf("shop:scope-%d", i)
			p := topics.PartitionOf([]byte(k), partitions)
			if _, _, err := b.p.Lookup(p, []byte(k)); err != nil {
				continue
			}
			if shared == "" {
				shared = k
			} else {
				theirs = k
				return nil
			}
		}
		return fmt.Errorf("b owns no partition yet")
	})
	const answer = "answer-body-of-shipping"
	for _, key := range []string{shared, theirs} {
		source, id, _ := strings.Cut(key, ":")
		if err := cl.ProduceSync(testContext(t), kafkatest.IngestRecord(env.Names, source, id, `{"secret-payload":1}`)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// An attempt is folded into a story the ledger holds already.
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		for _, k := range []string{shared, theirs} {
			if status, _, _ := b.get(t, k); status != http.StatusOK {
				return fmt.Errorf("%s: got %d, want its story", k, status)
			}
		}
		return nil
	})
	now := time.Now()
	for _, at := range []topics.Attempt{
		{Subscription: payments.ID, EventID: shared, N: 1, Outcome: topics.OutcomeDelivered, Status: 200, At: now},
		{Subscription: shipping.ID, EventID: shared, N: 1, Outcome: topics.OutcomeFailed, Status: 500, Error: `500 Internal Server Error: "` + answer + `"`, At: now},
		{Subscription: shipping.ID, EventID: theirs, N: 1, Outcome: topics.OutcomeDelivered, Status: 200, At: now},
	} {
		if err := cl.ProduceSync(testContext(t), at.Record(env.Names.DeliveryAttempts)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		for _, k := range []string{shared, theirs} {
			status, s, _ := b.get(t, k)
			if status != http.StatusOK || len(s.Deliveries) == 0 {
				return fmt.Errorf("%s: got %d %+v, want its deliveries", k, status, s)
			}
		}
		return nil
	})

	team := newToken(t, tokens, admin.Team, "payments")
	viewer := newToken(t, tokens, admin.Viewer, "")
	operator := newToken(t, tokens, admin.Operator, "")
	for _, n := range []*processorNode{a, b} {
		story := func(tok, key string) (int, string) {
			t.Helper()
			var status int
			var raw []byte
			kafkatest.WaitFor(t, 30*time.Second, func() error { // the token reaches the listener
				status, raw = apitest.Call(t, n.srv.URL, apitest.Bearer(tok), http.MethodGet, "/api/events/"+url.PathEscape(key), "")
				if status == http.StatusUnauthorized {
					return fmt.Errorf("%s: 401 %s", key, raw)
				}
				return nil
			})
			return status, string(raw)
		}
		var s events.Story
		status, raw := story(team, shared)
		if status != http.StatusOK || json.Unmarshal([]byte(raw), &s) != nil || len(s.Deliveries) != 1 || s.Deliveries[0].Subscription != payments.ID {
			t.Errorf("%s: the team's story of %s: got %d %s, want only the delivery to %s", n.srv.URL, shared, status, raw, payments.ID)
		}
		if strings.Contains(raw, shipping.ID) || strings.Contains(raw, answer) {
			t.Errorf("%s: the team's story of %s: got %s, want nothing of another team's subscription", n.srv.URL, shared, raw)
		}
		if status, raw := story(team, theirs); status != http.StatusNotFound || strings.Contains(raw, shipping.ID) {
			t.Errorf("%s: the team's story of %s, another team's event: got %d %s, want 404 as for an unknown one", n.srv.URL, theirs, status, raw)
		}
		status, raw = story(viewer, shared)
		if status != http.StatusOK || !strings.Contains(raw, shipping.ID) || !strings.Contains(raw, payments.ID) || strings.Contains(raw, answer) {
			t.Errorf("%s: the viewer's story of %s: got %d %s, want every delivery and no answer body", n.srv.URL, shared, status, raw)
		}
		if status, raw := story(operator, shared); status != http.StatusOK || !strings.Contains(raw, answer) {
			t.Errorf("%s: the operator's story of %s: got %d %s, want the attempt's error with the answer", n.srv.URL, shared, status, raw)
		}
		for _, tok := range []string{team, viewer, operator} {
			if _, raw := story(tok, shared); strings.Contains(raw, "secret-payload") || strings.Contains(raw, tok) {
				t.Errorf("%s: a story of %s holds the payload or the token: %s", n.srv.URL, shared, raw)
			}
		}
	}

	// A search shows keys and places, no bodies: viewers search; it
	// lists every source's events: teams do not.
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		status, raw := apitest.Call(t, a.srv.URL, apitest.Bearer(viewer), http.MethodGet, "/api/events?source=shop", "")
		if status != http.StatusOK || !strings.Contains(string(raw), shared) || strings.Contains(string(raw), "secret-payload") {
			return fmt.Errorf("the viewer's search: got %d %s, want the events without their payloads", status, raw)
		}
		return nil
	})
	if status, raw := apitest.Call(t, a.srv.URL, apitest.Bearer(team), http.MethodGet, "/api/events?source=shop", ""); status != http.StatusForbidden {
		t.Errorf("the team's search: got %d %s, want 403", status, raw)
	}

	// A team resends only to its own subscriptions, and only events in
	// which one of them has a part; a viewer not at all.
	for _, tc := range []struct {
		tok, key, sub string
		want          int
	}{
		{team, shared, payments.ID, http.StatusAccepted},
		{team, shared, shipping.ID, http.StatusNotFound},
		{team, theirs, payments.ID, http.StatusNotFound},
		{viewer, shared, payments.ID, http.StatusForbidden},
	} {
		status, raw := apitest.Call(t, a.srv.URL, apitest.Bearer(tc.tok), http.MethodPost, "/api/events/"+url.PathEscape(tc.key)+"/resend", `{"subscription":"`+tc.sub+`"}`)
		if status != tc.want {
			t.Errorf("resend %s to %s: got %d %s, want %d", tc.key, tc.sub, status, raw, tc.want)
		}
	}

	// The team's query a forwarded to b, replayed as sent, and with a
	// wider role.
	mu.Lock()
	var query *http.Request
	for _, r := range captured {
		if r.URL.Query().Get("team") == "payments" && strings.HasSuffix(r.URL.Path, "/"+shared) {
			query = r
		}
	}
	mu.Unlock()
	if query == nil {
		t.Fatalf("b received no forwarded query of the team for %s", shared)
	}
	replay := func(rawQuery string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, b.srv.URL+query.URL.Path+"?"+rawQuery, nil)
		for _, h := range []string{"X-Hookstream-Peer-Time", "X-Hookstream-Peer-Signature"} {
			req.Header.Set(h, query.Header.Get(h))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	if status, raw := replay(query.URL.RawQuery); status != http.StatusOK || strings.Contains(raw, shipping.ID) {
		t.Errorf("the captured query replayed: got %d %s, want the team's story", status, raw)
	}
	for _, wider := range []string{"role=admin&team=", "role=operator&team=", "role=team&team=shipping", ""} {
		if status, raw := replay(wider); status != http.StatusUnauthorized || strings.Contains(raw, shipping.ID) {
			t.Errorf("the captured query replayed as %q: got %d %s, want 401 and no story", wider, status, raw)
		}
	}
}
