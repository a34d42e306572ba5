package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookstream/hookstream/access"
	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/attempts"
	"github.com/hookstream/hookstream/audit"
	"github.com/hookstream/hookstream/internal/apitest"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
)

const bootstrapToken = "bootstrap-secret-of-the-audit-tests"

// node is an admin listener with the tokens, the subscriptions and the
// audit trail mounted, on the test's broker.
type node struct {
	*httptest.Server
	env *kafkatest.Env
	reg *prometheus.Registry
}

func startNode(t *testing.T) node {
	t.Helper()
	return startNodeBehind(t, nil)
}

// startNodeBehind is startNode behind the proxies of networks
// (HOOKSTREAM_TRUSTED_PROXIES).
func startNodeBehind(t *testing.T, proxies []netip.Prefix) node {
	t.Helper()
	env := kafkatest.New(t, 1, 1<<20)
	log := kafkatest.Logger(t)
	reg := prometheus.NewRegistry()
	c := env.ClusterOf(env.Client(t))
	srv := admin.New(admin.Config{Token: bootstrapToken, TrustedProxies: proxies}, reg, log)
	tokens := access.New(access.Config{}, c, log, reg)
	tokens.Mount(srv)
	tally := attempts.NewTally(c, log)
	subscriptions.New(subscriptions.NewRegistry(c, log), tally, "").Mount(srv)
	audit.New(c, log, reg).Mount(srv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { _ = tokens.Run(ctx); done <- struct{}{} }()
	go func() { _ = tally.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return node{Server: hs, env: env, reg: reg}
}

func (n node) call(t *testing.T, tok, method, path, body string) (int, []byte) {
	t.Helper()
	return apitest.Call(t, n.URL, apitest.Bearer(tok), method, path, body)
}

// must calls and fails the test unless the answer is want; it returns
// the answer decoded into a map.
func (n node) must(t *testing.T, want int, tok, method, path, body string) map[string]any {
	t.Helper()
	status, raw := n.call(t, tok, method, path, body)
	if status != want {
		t.Fatalf("%s %s: got %d %s, want %d", method, path, status, raw, want)
	}
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return out
}

// trail reads the audit trail through the API: every page.
func (n node) trail(t *testing.T, tok, query string) []admin.Record {
	t.Helper()
	var all []admin.Record
	cursor := ""
	for range 100 {
		status, raw := n.call(t, tok, http.MethodGet, "/api/audit?limit=3&cursor="+cursor+"&"+query, "")
		var page audit.Page
		if status != http.StatusOK || json.Unmarshal(raw, &page) != nil {
			t.Fatalf("GET /api/audit: got %d %s, want 200 and a page", status, raw)
		}
		all = append(all, page.Records...)
		if len(page.Records) == 0 {
			return all
		}
		cursor = page.Cursor
	}
	t.Fatal("GET /api/audit: the cursor never reached the end")
	return nil
}

// TestAuditTrailOfChangesAndRefusals makes changes and refused requests
// through the API and finds each in the trail, with who, what, the
// outcome and the fields changed, and no secret anywhere in the topic.
func TestAuditTrailOfChangesAndRefusals(t *testing.T) {
	n := startNode(t)
	op := n.must(t, http.StatusCreated, bootstrapToken, http.MethodPost, "/api/tokens", `{"name":"oncall","role":"operator"}`)
	viewer := n.must(t, http.StatusCreated, bootstrapToken, http.MethodPost, "/api/tokens", `{"name":"dashboards","role":"viewer"}`)
	opToken, viewerToken := op["token"].(string), viewer["token"].(string)

	const (
		secret  = "whsec_YXVkaXQtdGVzdC1zdWJzY3JpYmVyLXNlY3JldA=="
		rotated = "whsec_cm90YXRlZC1zdWJzY3JpYmVyLXNlY3JldC1hdWRpdA=="
		header  = "Bearer downstream-credential-audit"
		unknown = "hst_presented-but-unknown-token-of-the-audit-test"
	)
	sub := n.must(t, http.StatusCreated, bootstrapToken, http.MethodPost, "/api/subscriptions",
		`{"url":"https://example.com/hook","secret":"`+secret+`","headers":{"Authorization":"`+header+`"},"description":"payments"}`)
	id := sub["id"].(string)
	n.must(t, http.StatusOK, opToken, http.MethodPatch, "/api/subscriptions/"+id, `{"enabled":false}`)
	n.must(t, http.StatusOK, bootstrapToken, http.MethodPatch, "/api/subscriptions/"+id, `{"url":"https://example.com/v2","description":"payments v2"}`)
	n.must(t, http.StatusOK, bootstrapToken, http.MethodPost, "/api/subscriptions/"+id+"/rotate-secret", `{"secret":"`+rotated+`"}`)
	n.must(t, http.StatusUnauthorized, unknown, http.MethodGet, "/api/subscriptions", "")
	n.must(t, http.StatusForbidden, viewerToken, http.MethodDelete, "/api/subscriptions/"+id, "")
	n.must(t, http.StatusForbidden, opToken, http.MethodPatch, "/api/subscriptions/"+id, `{"headers":{"X-Other":"`+header+`"}}`)
	n.must(t, http.StatusNoContent, bootstrapToken, http.MethodDelete, "/api/subscriptions/"+id, "")
	n.must(t, http.StatusNotFound, bootstrapToken, http.MethodDelete, "/api/subscriptions/"+id, "")
	// Operators read the trail; viewers may not.
	n.must(t, http.StatusForbidden, viewerToken, http.MethodGet, "/api/audit", "")
	n.must(t, http.StatusNoContent, bootstrapToken, http.MethodDelete, "/api/tokens/"+viewer["id"].(string), "")

	type line struct {
		actor, action, target string
		status                int
		fields                []string
	}
	want := []line{
		{"HOOKSTREAM_ADMIN_TOKEN", "token.create", op["id"].(string), 201, []string{"name", "role"}},
		{"HOOKSTREAM_ADMIN_TOKEN", "token.create", viewer["id"].(string), 201, []string{"name", "role"}},
		{"HOOKSTREAM_ADMIN_TOKEN", "subscription.create", id, 201, []string{"description", "headers", "secret", "url"}},
		{"oncall", "subscription.disable", id, 200, []string{"enabled"}},
		{"HOOKSTREAM_ADMIN_TOKEN", "subscription.update", id, 200, []string{"description", "url"}},
		{"HOOKSTREAM_ADMIN_TOKEN", "subscription.rotate", id, 200, []string{"secret"}},
		{"", "auth.refused", "GET /api/subscriptions", 401, nil},
		{"dashboards", "auth.refused", "DELETE /api/subscriptions/" + id, 403, nil},
		{"oncall", "subscription.update", id, 403, []string{"headers"}},
		{"HOOKSTREAM_ADMIN_TOKEN", "subscription.delete", id, 204, nil},
		{"HOOKSTREAM_ADMIN_TOKEN", "subscription.delete", id, 404, nil},
		{"dashboards", "auth.refused", "GET /api/audit", 403, nil},
		{"HOOKSTREAM_ADMIN_TOKEN", "token.revoke", viewer["id"].(string), 204, nil},
	}
	var got []line
	for _, r := range n.trail(t, opToken, "") {
		if r.RequestID == "" || r.RemoteAddr == "" || r.At.IsZero() {
			t.Errorf("record %+v: want a time, a request id and a remote address", r)
		}
		got = append(got, line{r.Actor.Name, r.Action, r.Target, r.Status, r.Fields})
	}
	if len(got) != len(want) {
		t.Fatalf("trail: got %d records %+v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.actor != w.actor || g.action != w.action || g.target != w.target || g.status != w.status || !slices.Equal(g.fields, w.fields) {
			t.Errorf("record %d: got %+v, want %+v", i, g, w)
		}
	}

	// Filters.
	if recs := n.trail(t, opToken, "action="+url.QueryEscape("subscription.*")+"&actor=oncall"); len(recs) != 2 {
		t.Errorf("action subscription.* by oncall: got %d records %+v, want 2", len(recs), recs)
	}
	if recs := n.trail(t, opToken, "target="+id+"&action=subscription.delete"); len(recs) != 2 {
		t.Errorf("deletes of %s: got %d records, want 2", id, len(recs))
	}
	if recs := n.trail(t, opToken, "since="+url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339))); len(recs) != 0 {
		t.Errorf("since an hour ahead: got %d records, want none", len(recs))
	}

	// No secret reaches the topic.
	secrets := []string{bootstrapToken, opToken, viewerToken, secret, rotated, header, unknown, "downstream-credential-audit"}
	recs := n.env.Records(t, n.env.Names.Audit)
	if len(recs) < len(want) {
		t.Fatalf("audit topic: %d records, want at least %d", len(recs), len(want))
	}
	for _, r := range recs {
		for _, s := range secrets {
			if bytes.Contains(r.Value, []byte(s)) || bytes.Contains(r.Key, []byte(s)) {
				t.Errorf("audit record at offset %d holds a secret %q: %s", r.Offset, s, r.Value)
			}
		}
	}
}

// TestRefusalsBounded: refusals are recorded at most 10 a second; the
// others are counted.
func TestRefusalsBounded(t *testing.T) {
	n := startNode(t)
	const sent = 60
	start := time.Now()
	for i := range sent {
		n.must(t, http.StatusUnauthorized, fmt.Sprintf("hst_wrong-%d", i), http.MethodGet, "/api/subscriptions", "")
	}
	// In any span of time, at most 10 and 10 more a second of it.
	most := 10 + int(10*time.Since(start).Seconds())
	recorded := len(n.trail(t, bootstrapToken, "action=auth.refused"))
	if recorded > most || recorded < 10 {
		t.Errorf("refusals recorded: got %d in %v, want 10 to %d", recorded, time.Since(start), most)
	}
	var dropped float64
	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "hookstream_audit_refusals_dropped_total" {
			dropped = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if int(dropped)+recorded != sent {
		t.Errorf("refusals: %d recorded and %v counted as dropped, want %d in all", recorded, dropped, sent)
	}
}

// TestRemoteAddressBehindAProxy: a request through a proxy of
// HOOKSTREAM_TRUSTED_PROXIES is recorded with the client's address its
// X-Forwarded-For names (the nearest outside the trusted networks: what
// the proxy saw, not what the client wrote before it); a request from any
// other peer with the connection's address, whatever the header says.
func TestRemoteAddressBehindAProxy(t *testing.T) {
	for _, c := range []struct {
		name    string
		proxies []netip.Prefix
		want    string
	}{
		{"from a trusted proxy", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, "203.0.113.7"},
		{"from an untrusted peer", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, "127.0.0.1"},
		{"with no trusted proxy", nil, "127.0.0.1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := startNodeBehind(t, c.proxies)
			send := func(tok, body string) int {
				t.Helper()
				req, err := http.NewRequest(http.MethodPost, n.URL+"/api/tokens", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+tok)
				// A client's own claim first, then what the proxy saw.
				req.Header.Set("X-Forwarded-For", "198.51.100.9, 203.0.113.7")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			if status := send(bootstrapToken, `{"name":"behind","role":"viewer"}`); status != http.StatusCreated {
				t.Fatalf("POST /api/tokens: got %d, want 201", status)
			}
			if status := send("hst_unknown-token-behind-the-proxy", `{"name":"refused","role":"viewer"}`); status != http.StatusUnauthorized {
				t.Fatalf("POST /api/tokens with an unknown token: got %d, want 401", status)
			}
			recs := n.trail(t, bootstrapToken, "")
			if len(recs) != 2 {
				t.Fatalf("trail: got %d records %+v, want the creation and the refusal", len(recs), recs)
			}
			for _, r := range recs {
				if r.RemoteAddr != c.want {
					t.Errorf("%s: remote address %q, want %q", r.Action, r.RemoteAddr, c.want)
				}
			}
		})
	}
}
