package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/hookstream/hookstream/config"
	"github.com/hookstream/hookstream/ingest"
	"github.com/hookstream/hookstream/internal/apitest"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/tracing"
)

// accessToken is HOOKSTREAM_ADMIN_TOKEN of the access tests.
const accessToken = "bootstrap-token-of-the-access-tests"

// accessNode is a hookstream running no role in this process, only what
// every instance runs (the admin API with every service mounted, the
// console, the tallies, the tokens), on the test's broker.
type accessNode struct {
	n    *node
	base string // http://<admin address>
	addr string
}

func startAccessNode(t *testing.T) *accessNode {
	t.Helper()
	env := kafkatest.New(t, 1, 1<<20)
	addr := kafkatest.FreeAddr(t)
	vars := map[string]string{
		"HOOKSTREAM_BROKERS": strings.Join(env.Seeds, ","), "HOOKSTREAM_TOPIC_PREFIX": env.Names.Prefix,
		"HOOKSTREAM_PARTITIONS": "1", "HOOKSTREAM_ADMIN_ADDR": addr, "HOOKSTREAM_ADMIN_TOKEN": accessToken,
	}
	cfg, err := config.Load(nil, func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	security, err := subscriptionSecurity(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n, err := newNode(ctx, cfg, nil, security, tracing.Tracing{}, kafkatest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	g, gctx := errgroup.WithContext(ctx)
	if err := n.start(gctx, g, ingest.Sources{}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := g.Wait(); err != nil {
			t.Errorf("node: %v", err)
		}
		n.close()
	})
	a := &accessNode{n: n, base: "http://" + addr, addr: addr}
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		resp, err := http.Get(a.base + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			raw, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("/readyz: %d %s", resp.StatusCode, raw)
		}
		return nil
	})
	return a
}

// call sends method path with body (JSON when not empty) and the bearer
// token tok (none when empty).
func (a *accessNode) call(t *testing.T, tok, method, path, body string) (int, []byte) {
	t.Helper()
	return apitest.Call(t, a.base, apitest.Bearer(tok), method, path, body)
}

// token makes a token of role (and team) with the bootstrap token and
// returns its secret.
func (a *accessNode) token(t *testing.T, name, role, team string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"name": name, "role": role, "team": team})
	status, raw := a.call(t, accessToken, http.MethodPost, "/api/tokens", string(body))
	var c struct{ Token string }
	if status != http.StatusCreated || json.Unmarshal(raw, &c) != nil {
		t.Fatalf("POST /api/tokens %s: got %d %s, want 201", body, status, raw)
	}
	return c.Token
}

// routeCase is one route of the admin API, a request that reaches its
// handler, and the status each role is answered.
type routeCase struct {
	route string // METHOD /api/path as mounted
	path  string // the request's path, when not the route's
	body  string
	// The statuses of admin (the bootstrap token and an admin token
	// alike), operator, viewer and team tokens.
	admin, operator, viewer, team int
}

const (
	ok        = http.StatusOK
	bad       = http.StatusBadRequest
	forbidden = http.StatusForbidden
	missing   = http.StatusNotFound
)

// routeTable is every route of the admin API and who may call it. A route
// mounted without a row here fails TestEveryRouteDeclaresItsRoles: adding
// a route means deciding, and writing down, who may call it.
var routeTable = []routeCase{
	{route: "GET /api/debug/pprof/", admin: ok, operator: forbidden, viewer: forbidden, team: forbidden},
	{route: "GET /api/debug/pprof/:name", path: "/api/debug/pprof/goroutine?debug=1", admin: ok, operator: forbidden, viewer: forbidden, team: forbidden},
	{route: "GET /api/debug/pprof/cmdline", admin: ok, operator: forbidden, viewer: forbidden, team: forbidden},
	{route: "GET /api/debug/pprof/profile", path: "/api/debug/pprof/profile?seconds=1", admin: ok, operator: forbidden, viewer: forbidden, team: forbidden},
	{route: "GET /api/debug/pprof/symbol", admin: ok, operator: forbidden, viewer: forbidden, team: forbidden},
	{route: "GET /api/debug/pprof/trace", path: "/api/debug/pprof/trace?seconds=0.1", admin: ok, operator: forbidden, viewer: forbidden, team: forbidden},

	{route: "GET /api/tokens", admin: ok, operator: forbidden, viewer: forbidden, team: forbidden},
	{route: "POST /api/tokens", body: `{"name":"Not A Name","role":"viewer"}`, admin: bad, operator: forbidden, viewer: forbidden, team: forbidden},
	{route: "DELETE /api/tokens/:id", path: "/api/tokens/tok_none", admin: missing, operator: forbidden, viewer: forbidden, team: forbidden},
	{route: "GET /api/audit", admin: ok, operator: ok, viewer: forbidden, team: forbidden},

	{route: "GET /api/subscriptions", admin: ok, operator: ok, viewer: ok, team: ok},
	{route: "POST /api/subscriptions", body: `{}`, admin: bad, operator: forbidden, viewer: forbidden, team: bad},
	{route: "GET /api/subscriptions/:id", path: "/api/subscriptions/none", admin: missing, operator: missing, viewer: missing, team: missing},
	{route: "PATCH /api/subscriptions/:id", path: "/api/subscriptions/none", body: `{"enabled":false}`, admin: missing, operator: missing, viewer: forbidden, team: missing},
	{route: "PATCH /api/subscriptions/:id", path: "/api/subscriptions/none", body: `{"url":"https://example.com/hook"}`, admin: missing, operator: forbidden, viewer: forbidden, team: missing},
	{route: "DELETE /api/subscriptions/:id", path: "/api/subscriptions/none", admin: missing, operator: forbidden, viewer: forbidden, team: missing},
	{route: "POST /api/subscriptions/:id/rotate-secret", path: "/api/subscriptions/none/rotate-secret", admin: missing, operator: forbidden, viewer: forbidden, team: missing},
	{route: "GET /api/subscriptions/:id/attempts", path: "/api/subscriptions/none/attempts", admin: missing, operator: missing, viewer: forbidden, team: missing},
	{route: "POST /api/subscriptions/:id/test", path: "/api/subscriptions/none/test", body: `{"event":"github:1"}`, admin: missing, operator: missing, viewer: forbidden, team: missing},

	{route: "GET /api/dlq", admin: ok, operator: ok, viewer: ok, team: forbidden},
	{route: "GET /api/dlq", path: "/api/dlq?kind=delivery", admin: ok, operator: ok, viewer: ok, team: ok},
	{route: "POST /api/dlq/redrive", body: `{}`, admin: bad, operator: bad, viewer: forbidden, team: forbidden},

	{route: "GET /api/stats", admin: ok, operator: ok, viewer: ok, team: forbidden},
	{route: "GET /api/groups", admin: ok, operator: ok, viewer: ok, team: forbidden},
	{route: "GET /api/groups/:group", path: "/api/groups/nosuchgroup", admin: bad, operator: bad, viewer: bad, team: forbidden},
	{route: "POST /api/replay/plan", body: `{}`, admin: bad, operator: bad, viewer: bad, team: forbidden},
	{route: "POST /api/replay/execute", body: `{}`, admin: bad, operator: bad, viewer: forbidden, team: forbidden},
	{route: "GET /api/instances", admin: ok, operator: ok, viewer: ok, team: forbidden},

	{route: "GET /api/events", admin: ok, operator: ok, viewer: ok, team: forbidden},
	{route: "GET /api/events/*", path: "/api/events/", admin: bad, operator: bad, viewer: bad, team: bad},
	{route: "POST /api/events/*", path: "/api/events/github:1/resend", body: `{}`, admin: bad, operator: bad, viewer: forbidden, team: bad},
}

// TestEveryRouteDeclaresItsRoles asks every route of the admin API as
// every role, and without a valid token, and checks the status written
// down for each; every mounted route must have a row.
func TestEveryRouteDeclaresItsRoles(t *testing.T) {
	a := startAccessNode(t)
	tokens := map[string]string{
		"bootstrap": accessToken,
		"admin":     a.token(t, "root", "admin", ""),
		"operator":  a.token(t, "oncall", "operator", ""),
		"viewer":    a.token(t, "dashboards", "viewer", ""),
		"team":      a.token(t, "payments-ci", "team", "payments"),
		"unknown":   "hst_" + strings.Repeat("A", 43),
		"none":      "",
	}

	var mounted []string
	for _, r := range a.n.srv.Routes() {
		mounted = append(mounted, r.Method+" "+r.Path)
	}
	var tabled []string
	for _, c := range routeTable {
		if !slices.Contains(tabled, c.route) {
			tabled = append(tabled, c.route)
		}
	}
	for _, r := range mounted {
		if !slices.Contains(tabled, r) {
			t.Errorf("route %s is mounted but not in routeTable: decide which roles may call it and write it down", r)
		}
	}
	for _, r := range tabled {
		if !slices.Contains(mounted, r) {
			t.Errorf("route %s is in routeTable but not mounted", r)
		}
	}

	for _, c := range routeTable {
		method, path, _ := strings.Cut(c.route, " ")
		if c.path != "" {
			path = c.path
		}
		want := map[string]int{"bootstrap": c.admin, "admin": c.admin, "operator": c.operator, "viewer": c.viewer, "team": c.team,
			"unknown": http.StatusUnauthorized, "none": http.StatusUnauthorized}
		for _, role := range []string{"bootstrap", "admin", "operator", "viewer", "team", "unknown", "none"} {
			status, raw := a.call(t, tokens[role], method, path, c.body)
			if status != want[role] {
				t.Errorf("%s %s %s as %s: got %d %s, want %d", method, path, c.body, role, status, raw, want[role])
			}
			if status == forbidden && !bytes.Contains(raw, []byte("needs role")) {
				t.Errorf("%s %s as %s: 403 %s does not say which role it needs", method, path, role, raw)
			}
		}
	}
}

// TestViewerSeesNoSecrets: what a viewer or an operator reads of
// subscriptions holds no secret, header value or pull token.
func TestViewerSeesNoSecrets(t *testing.T) {
	a := startAccessNode(t)
	const (
		secret = "whsec_c2VjcmV0LW9mLXRoZS12aWV3ZXItdGVzdA=="
		header = "Bearer downstream-credential-of-the-test"
	)
	status, raw := a.call(t, accessToken, http.MethodPost, "/api/subscriptions",
		`{"url":"https://example.com/hook","secret":"`+secret+`","headers":{"Authorization":"`+header+`"}}`)
	var hook struct{ ID string }
	if status != http.StatusCreated || json.Unmarshal(raw, &hook) != nil {
		t.Fatalf("POST /api/subscriptions: got %d %s, want 201", status, raw)
	}
	status, raw = a.call(t, accessToken, http.MethodPost, "/api/subscriptions", `{"pull":true}`)
	var pull struct {
		ID        string
		PullToken string `json:"pull_token"`
	}
	if status != http.StatusCreated || json.Unmarshal(raw, &pull) != nil || pull.PullToken == "" {
		t.Fatalf("POST /api/subscriptions (pull): got %d %s, want 201 with a pull token", status, raw)
	}
	// A failed attempt whose error quotes the subscriber's answer: an
	// answer body, which operators read and viewers do not.
	const answer = "answer-body-of-the-subscriber"
	failed := topics.Attempt{Subscription: hook.ID, EventID: "github:1", N: 1, Outcome: topics.OutcomeFailed, Status: 500,
		Error: `status 500: "` + answer + `"`, At: time.Now()}
	if err := a.n.Client.ProduceSync(context.Background(), failed.Record(a.n.Names.DeliveryAttempts)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"viewer", "operator"} {
		tok := a.token(t, role+"-reader", role, "")
		for _, path := range []string{"/api/subscriptions", "/api/subscriptions/" + hook.ID, "/api/subscriptions/" + pull.ID} {
			status, raw := a.call(t, tok, http.MethodGet, path, "")
			if status != http.StatusOK {
				t.Fatalf("GET %s as %s: got %d %s, want 200", path, role, status, raw)
			}
			for _, s := range []string{secret, header, pull.PullToken} {
				if bytes.Contains(raw, []byte(s)) {
					t.Errorf("GET %s as %s shows %q: %s", path, role, s, raw)
				}
			}
			if got, want := bytes.Contains(raw, []byte(answer)), role == "operator"; path == "/api/subscriptions/"+hook.ID && got != want {
				t.Errorf("GET %s as %s shows the answer body its last failure quotes: got %v, want %v: %s", path, role, got, want, raw)
			}
		}
	}
}

// cli runs hookstream with args against the node's admin API as the
// holder of tok.
func (a *accessNode) cli(t *testing.T, tok string, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(io.Discard)
	root.SetArgs(append(args, "--admin-addr", a.addr, "--admin-token", tok))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// TestTokensAndAuditCommands: tokens add, list and revoke, and audit,
// through the admin API of a running hookstream.
func TestTokensAndAuditCommands(t *testing.T) {
	a := startAccessNode(t)
	out, err := a.cli(t, accessToken, "tokens", "add", "--name", "oncall", "--role", "operator", "--expires", "24h", "--output", "json")
	var c struct {
		ID, Name, Role, Token string
		ExpiresAt             time.Time `json:"expires_at"`
	}
	if err != nil || json.Unmarshal([]byte(out), &c) != nil || c.Role != "operator" || !strings.HasPrefix(c.Token, "hst_") || c.ExpiresAt.IsZero() {
		t.Fatalf("tokens add: got %q (%v), want the operator token as JSON with its expiry", out, err)
	}
	out, err = a.cli(t, accessToken, "tokens", "add", "--name", "payments-ci", "--role", "team", "--team", "payments")
	if err != nil || !strings.Contains(out, "role team, team payments") || !strings.Contains(out, "hst_") {
		t.Errorf("tokens add (table): got %q (%v), want the team token", out, err)
	}

	out, err = a.cli(t, accessToken, "tokens", "list")
	if err != nil || !strings.Contains(out, c.ID) || !strings.Contains(out, "oncall") || !strings.Contains(out, "payments") || strings.Contains(out, "hst_") {
		t.Errorf("tokens list: got %q (%v), want both tokens and no token's secret", out, err)
	}
	if _, err := a.cli(t, c.Token, "tokens", "list"); err == nil || !strings.Contains(err.Error(), "needs role admin") {
		t.Errorf("tokens list as an operator: got %v, want a refusal naming the role admin", err)
	}

	// The operator reads the trail.
	out, err = a.cli(t, c.Token, "audit", "--action", "token.*", "--output", "json")
	if err != nil || strings.Count(out, `"action":"token.create"`) != 2 || strings.Contains(out, "hst_") {
		t.Errorf("audit --action token.*: got %q (%v), want the two token.create records", out, err)
	}
	if out, err := a.cli(t, accessToken, "tokens", "revoke", c.ID); err != nil || !strings.Contains(out, "revoked") {
		t.Errorf("tokens revoke: got %q (%v)", out, err)
	}
	if _, err := a.cli(t, c.Token, "audit"); err == nil || !strings.Contains(err.Error(), "refused the token (missing, wrong, revoked or expired)") {
		t.Errorf("audit with the revoked token: got %v, want a refusal", err)
	}
	out, err = a.cli(t, accessToken, "audit", "--since", "1h", "--target", c.ID)
	if err != nil || !strings.Contains(out, "token.revoke") || !strings.Contains(out, "HOOKSTREAM_ADMIN_TOKEN") || !strings.HasPrefix(out, "TIME") {
		t.Errorf("audit --target: got %q (%v), want the revocation by the bootstrap admin in a table", out, err)
	}
}

// TestTeamTokenManagesOnlyItsSubscriptions: a team token lists, reads,
// changes, rotates, tests and deletes only its team's subscriptions; it
// creates subscriptions owned by its team and cannot give one to another
// team; another team's subscription is not found, as an unknown one.
func TestTeamTokenManagesOnlyItsSubscriptions(t *testing.T) {
	a := startAccessNode(t)
	payments := a.token(t, "payments-ci", "team", "payments")
	search := a.token(t, "search-ci", "team", "search")
	create := func(tok, body string) map[string]any {
		t.Helper()
		status, raw := a.call(t, tok, http.MethodPost, "/api/subscriptions", body)
		var sub map[string]any
		if status != http.StatusCreated || json.Unmarshal(raw, &sub) != nil {
			t.Fatalf("POST /api/subscriptions %s: got %d %s, want 201", body, status, raw)
		}
		return sub
	}
	own := create(payments, `{"url":"https://example.com/payments"}`)
	if own["team"] != "payments" || own["secret"] == nil {
		t.Errorf("created by a team token: got %v, want team payments and its secret shown once", own)
	}
	theirs := create(search, `{"url":"https://example.com/search"}`)
	unowned := create(accessToken, `{"url":"https://example.com/ops"}`)
	if status, raw := a.call(t, payments, http.MethodPost, "/api/subscriptions", `{"url":"https://example.com/x","team":"search"}`); status != http.StatusForbidden {
		t.Errorf("a team token creating for another team: got %d %s, want 403", status, raw)
	}

	status, raw := a.call(t, payments, http.MethodGet, "/api/subscriptions", "")
	var list []struct{ ID, Team string }
	if status != http.StatusOK || json.Unmarshal(raw, &list) != nil || len(list) != 1 || list[0].ID != own["id"] {
		t.Errorf("list as payments: got %d %s, want only %s", status, raw, own["id"])
	}
	status, raw = a.call(t, accessToken, http.MethodGet, "/api/subscriptions", "")
	if status != http.StatusOK || json.Unmarshal(raw, &list) != nil || len(list) != 3 {
		t.Errorf("list as the admin: got %d %s, want all 3", status, raw)
	}

	id := own["id"].(string)
	for _, c := range []struct{ method, path, body string }{
		{http.MethodGet, "/api/subscriptions/" + id, ""},
		{http.MethodPatch, "/api/subscriptions/" + id, `{"description":"ours","enabled":false}`},
		{http.MethodPost, "/api/subscriptions/" + id + "/rotate-secret", ""},
		{http.MethodGet, "/api/subscriptions/" + id + "/attempts", ""},
	} {
		if status, raw := a.call(t, payments, c.method, c.path, c.body); status != http.StatusOK {
			t.Errorf("%s %s as its team: got %d %s, want 200", c.method, c.path, status, raw)
		}
	}
	if status, raw := a.call(t, payments, http.MethodPatch, "/api/subscriptions/"+id, `{"team":"search"}`); status != http.StatusForbidden {
		t.Errorf("moving its subscription to another team: got %d %s, want 403", status, raw)
	}
	for _, other := range []string{theirs["id"].(string), unowned["id"].(string)} {
		for _, c := range []struct{ method, path, body string }{
			{http.MethodGet, "/api/subscriptions/" + other, ""},
			{http.MethodPatch, "/api/subscriptions/" + other, `{"enabled":false}`},
			{http.MethodDelete, "/api/subscriptions/" + other, ""},
			{http.MethodPost, "/api/subscriptions/" + other + "/rotate-secret", ""},
			{http.MethodGet, "/api/subscriptions/" + other + "/attempts", ""},
			{http.MethodPost, "/api/subscriptions/" + other + "/test", `{"event":"github:1"}`},
		} {
			status, raw := a.call(t, payments, c.method, c.path, c.body)
			if want := `{"error":"subscription not found: ` + other + `"}`; status != http.StatusNotFound || strings.TrimSpace(string(raw)) != want {
				t.Errorf("%s %s as another team: got %d %s, want 404 %s", c.method, c.path, status, raw, want)
			}
		}
	}
	if status, raw := a.call(t, payments, http.MethodDelete, "/api/subscriptions/"+id, ""); status != http.StatusNoContent {
		t.Errorf("deleting its own: got %d %s, want 204", status, raw)
	}
	// The CLI, which writes the topic itself, gives a subscription to a team.
	root := newRootCommand()
	root.SetOut(io.Discard)
	root.SetArgs([]string{"subscriptions", "add", "--url", "https://example.com/cli", "--team", "payments",
		"--brokers", strings.Join(a.n.cfg.Brokers, ","), "--topic-prefix", a.n.cfg.TopicPrefix})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("subscriptions add --team: %v", err)
	}
	status, raw = a.call(t, payments, http.MethodGet, "/api/subscriptions", "")
	if status != http.StatusOK || json.Unmarshal(raw, &list) != nil || len(list) != 1 || list[0].Team != "payments" {
		t.Errorf("list as payments after subscriptions add --team payments: got %d %s, want that one", status, raw)
	}
	// An admin gives a subscription to a team, which then sees it.
	if status, raw := a.call(t, accessToken, http.MethodPatch, "/api/subscriptions/"+unowned["id"].(string), `{"team":"payments"}`); status != http.StatusOK {
		t.Fatalf("an admin giving a subscription to a team: got %d %s, want 200", status, raw)
	}
	if status, raw := a.call(t, payments, http.MethodGet, "/api/subscriptions/"+unowned["id"].(string), ""); status != http.StatusOK {
		t.Errorf("reading the subscription given to its team: got %d %s, want 200", status, raw)
	}
	if status, raw := a.call(t, accessToken, http.MethodPatch, "/api/subscriptions/"+unowned["id"].(string), `{"team":"Not A Team"}`); status != http.StatusBadRequest {
		t.Errorf("an invalid team: got %d %s, want 400", status, raw)
	}
}

// TestAuditFollow: audit --follow prints records written after it
// started, until interrupted.
func TestAuditFollow(t *testing.T) {
	a := startAccessNode(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	root := newRootCommand()
	root.SetOut(&out)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"audit", "--follow", "--action", "token.*", "--output", "json", "--admin-addr", a.addr, "--admin-token", accessToken})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	a.token(t, "first", "viewer", "")
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		if n := strings.Count(out.String(), `"action":"token.create"`); n != 1 {
			return fmt.Errorf("followed %d token.create records, want 1: %s", n, out.String())
		}
		return nil
	})
	a.token(t, "second", "viewer", "")
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		if !strings.Contains(out.String(), `"name":"HOOKSTREAM_ADMIN_TOKEN"`) || strings.Count(out.String(), `"action":"token.create"`) != 2 {
			return fmt.Errorf("followed: %s, want both token.create records", out.String())
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("audit --follow, interrupted: %v", err)
	}
}
