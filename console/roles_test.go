package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookstream/hookstream/access"
	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/audit"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
)

// addToken makes an access token of role (and team) and returns it.
func (h *harness) addToken(t *testing.T, name string, role admin.Role, team string) (access.Token, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tok, secret, err := h.tokens.Create(ctx, access.Token{Name: name, Role: role, Team: team}, 0)
	if err != nil {
		t.Fatalf("make token %s: %v", name, err)
	}
	return tok, secret
}

// signInWith signs in with secret, once the instance accepts it, and
// returns the CSRF token of the page it lands on.
func (b *browser) signInWith(secret string) string {
	b.t.Helper()
	var to string
	kafkatest.WaitFor(b.t, 10*time.Second, func() error {
		a := b.post("/ui/login", url.Values{"token": {secret}})
		if a.status != http.StatusSeeOther {
			return fmt.Errorf("sign in: got %d, want 303", a.status)
		}
		to = a.header.Get("Location")
		return nil
	})
	return b.csrf(to)
}

// TestEveryConsoleRouteAnswersByRole: every console route names the
// roles that may call it, as written down here (the API's for the same
// reads and changes), and each role is served exactly those: any other
// is answered 403 before the handler runs.
func TestEveryConsoleRouteAnswersByRole(t *testing.T) {
	var (
		all       = admin.Roles
		readers   = admin.Readers
		operators = admin.Operators
		adminsT   = admin.AdminsAndTeams
		opsT      = admin.OperatorsAndTeams
		readersT  = admin.ReadersAndTeams
	)
	want := map[string][]admin.Role{
		"POST /logout":                          all,
		"GET /":                                 readers,
		"GET /subscriptions":                    readersT,
		"GET /subscriptions/new":                adminsT,
		"POST /subscriptions/new":               adminsT,
		"GET /subscriptions/:id":                readersT,
		"GET /subscriptions/:id/edit":           adminsT,
		"POST /subscriptions/:id/edit":          adminsT,
		"POST /subscriptions/:id/enable":        opsT,
		"POST /subscriptions/:id/disable":       opsT,
		"POST /subscriptions/:id/rotate-secret": adminsT,
		"POST /subscriptions/:id/delete":        adminsT,
		"POST /subscriptions/:id/test":          opsT,
		"GET /groups":                           readers,
		"GET /replay":                           readers,
		"POST /replay/execute":                  operators,
		"GET /dlq":                              operators,
		"GET /dlq/redrive":                      operators,
		"POST /dlq/redrive":                     operators,
		"GET /dlq/:kind/:partition/:offset":     operators,
		"GET /events":                           readers,
		"GET /events/tail":                      readers,
		"GET /events/tail/stream":               readers,
		"GET /events/*":                         readersT,
		"POST /events/*":                        opsT,
		"GET /audit":                            operators,
	}
	h := serve(t, options{token: token})
	var mounted []string
	for _, r := range h.ui.Routes() {
		key := r.Method + " " + r.Path
		mounted = append(mounted, key)
		if roles, ok := want[key]; !ok {
			t.Errorf("%s is mounted for %v, and not written down here", key, r.May)
		} else if !slices.Equal(r.May, roles) {
			t.Errorf("%s: got roles %v, want %v", key, r.May, roles)
		}
	}
	for key := range want {
		if !slices.Contains(mounted, key) {
			t.Errorf("%s is written down here and not mounted", key)
		}
	}

	ctx := context.Background()
	sub := subscriptions.Subscription{ID: "blue-orders", URL: "https://example.com/hook", Team: "blue"}
	if err := h.registry.Create(ctx, &sub, ""); err != nil {
		t.Fatal(err)
	}
	// The requests are harmless where served: forms missing what they
	// need, a delete not confirmed; the stream is asked for nothing.
	paths := map[string]string{":id": "blue-orders", ":kind": "delivery", ":partition": "0", ":offset": "0", "*": "src:e1"}
	for _, role := range all {
		t.Run(string(role), func(t *testing.T) {
			_, secret := h.addToken(t, "as-"+string(role), role, map[bool]string{true: "blue"}[role == admin.Team])
			b := h.browser(t)
			csrf := b.signInWith(secret)
			for _, key := range mounted {
				if key == "POST /logout" || key == "GET /events/tail/stream" {
					continue // ends the session; streams until stopped
				}
				method, path, _ := strings.Cut(key, " ")
				for k, v := range paths {
					path = strings.ReplaceAll(path, k, v)
				}
				var form url.Values
				if method == http.MethodPost {
					form = url.Values{"csrf": {csrf}}
				}
				a := b.do(method, "/ui"+path, form)
				may := slices.Contains(want[key], role)
				switch {
				case may && (a.status == http.StatusForbidden || a.status == http.StatusSeeOther && strings.HasPrefix(a.header.Get("Location"), "/ui/login")):
					t.Errorf("%s as %s: got %d, want it served", key, role, a.status)
				case !may && a.status != http.StatusForbidden:
					t.Errorf("%s as %s: got %d, want 403", key, role, a.status)
				case !may && !strings.Contains(a.body, "needs role"):
					t.Errorf("%s as %s: the 403 page does not say which role it needs: %s", key, role, a.body)
				}
			}
		})
	}
}

// TestRevokedTokenSessionEnds: a session signed in with an access token
// ends once the token is revoked: within 5 s its next request is sent
// to sign in.
func TestRevokedTokenSessionEnds(t *testing.T) {
	h := serve(t, options{token: token})
	tok, secret := h.addToken(t, "night-shift", admin.Operator, "")
	b := h.browser(t)
	b.signInWith(secret)
	if a := b.get("/ui/subscriptions"); a.status != http.StatusOK {
		t.Fatalf("GET /ui/subscriptions signed in: got %d, want 200", a.status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.tokens.Revoke(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	kafkatest.WaitFor(t, 5*time.Second, func() error {
		if a := b.get("/ui/subscriptions"); a.status != http.StatusSeeOther || !strings.HasPrefix(a.header.Get("Location"), "/ui/login") {
			return fmt.Errorf("GET /ui/subscriptions after the revocation: got %d to %q, want 303 to sign in", a.status, a.header.Get("Location"))
		}
		return nil
	})
}

// TestConsoleChangesAudited: a sign-in, a refused one, and changes made
// through the console are in the audit trail as the API's are, each with
// its actor, target, request id, remote address and outcome, changed
// fields named, and no record holds a token, a secret or a header value;
// /ui/audit shows them, newest first, to operators and not to viewers.
func TestConsoleChangesAudited(t *testing.T) {
	h := serve(t, options{token: token})
	_, teamSecret := h.addToken(t, "blue-bot", admin.Team, "blue")
	_, opSecret := h.addToken(t, "night-shift", admin.Operator, "")
	_, viewerSecret := h.addToken(t, "dashboards", admin.Viewer, "")

	b := h.browser(t)
	if a := b.post("/ui/login", url.Values{"token": {"hst_not-a-token"}}); a.status != http.StatusUnauthorized {
		t.Fatalf("sign in with a wrong token: got %d, want 401", a.status)
	}
	csrf := b.signInWith(teamSecret)
	const headerValue = "Bearer subscriber-credential-42"
	a := b.post("/ui/subscriptions/new", url.Values{"csrf": {csrf}, "id": {"blue-hook"}, "url": {"https://example.com/blue"},
		"new_header_name": {"Authorization"}, "new_header_value": {headerValue}})
	if a.status != http.StatusCreated {
		t.Fatalf("create as a team: got %d %s", a.status, a.body)
	}
	ctx := context.Background()
	created, err := h.registry.Get(ctx, "blue-hook")
	if err != nil || created.Team != "blue" {
		t.Fatalf("the subscription a team made: got team %q (%v), want blue", created.Team, err)
	}
	if a := b.post("/ui/subscriptions/blue-hook/disable", url.Values{"csrf": {csrf}}); a.status != http.StatusSeeOther {
		t.Fatalf("disable: got %d", a.status)
	}
	if a := b.post("/ui/subscriptions/blue-hook/rotate-secret", url.Values{"csrf": {csrf}}); a.status != http.StatusOK {
		t.Fatalf("rotate: got %d", a.status)
	}
	rotated, _ := h.registry.Get(ctx, "blue-hook")

	op := h.browser(t)
	op.signInWith(opSecret)
	var page string
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		a := op.get("/ui/audit?actor=blue-bot")
		page = a.body
		if a.status != http.StatusOK || !strings.Contains(page, "subscription.rotate") {
			return fmt.Errorf("/ui/audit as an operator: got %d without the rotation", a.status)
		}
		return nil
	})
	order := []string{"subscription.rotate", "subscription.disable", "subscription.create", "console.signin"}
	last := -1
	for _, action := range order {
		i := strings.Index(page, "<code>"+action+"</code>")
		if i < last {
			t.Errorf("/ui/audit: %s at %d, before the newer at %d: want newest first", action, i, last)
		}
		last = i
	}
	if a := h.browser(t); true {
		a.signInWith(viewerSecret)
		if got := a.get("/ui/audit"); got.status != http.StatusForbidden {
			t.Errorf("/ui/audit as a viewer: got %d, want 403", got.status)
		}
	}

	got, err := h.trail.List(ctx, audit.Query{Limit: audit.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	find := func(action, name string) *admin.Record {
		for i, r := range got.Records {
			if r.Action == action && r.Actor.Name == name {
				return &got.Records[i]
			}
		}
		return nil
	}
	for _, w := range []struct {
		action, actor, target string
		status                int
		fields                []string
	}{
		{"console.signin", "blue-bot", "", http.StatusSeeOther, nil},
		{"subscription.create", "blue-bot", "blue-hook", http.StatusCreated, []string{"headers", "id", "url"}},
		{"subscription.disable", "blue-bot", "blue-hook", http.StatusSeeOther, nil},
		{"subscription.rotate", "blue-bot", "blue-hook", http.StatusOK, nil},
		{admin.ActionRefused, "", "POST /ui/login", http.StatusUnauthorized, nil},
		{admin.ActionRefused, "dashboards", "GET /ui/audit", http.StatusForbidden, nil},
	} {
		r := find(w.action, w.actor)
		switch {
		case r == nil:
			t.Errorf("no %s record of %q in the trail", w.action, w.actor)
		case r.Target != w.target || r.Status != w.status || !slices.Equal(r.Fields, w.fields):
			t.Errorf("%s of %q: got target %q status %d fields %v, want %q %d %v", w.action, w.actor, r.Target, r.Status, r.Fields, w.target, w.status, w.fields)
		case r.RequestID == "" || r.RemoteAddr == "":
			t.Errorf("%s of %q: no request id or remote address: %+v", w.action, w.actor, *r)
		case w.actor != "" && r.Actor.TokenID == "":
			t.Errorf("%s of %q: no token id: %+v", w.action, w.actor, *r)
		}
	}
	raw, _ := json.Marshal(got.Records)
	for _, secret := range []string{teamSecret, opSecret, viewerSecret, "hst_not-a-token", token, headerValue, rotated.Secret, created.Secret} {
		if secret != "" && strings.Contains(string(raw), secret) {
			t.Errorf("the trail holds a secret %q: %s", secret, raw)
		}
	}
}
