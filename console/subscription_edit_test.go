package console_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hookstream/hookstream/subscriptions"
)

// headerValues are the header values of the subscriptions these tests
// create or type: no page may show any of them.
var headerValues = []string{"k3y-value-original", "t34m-value-original", "k3y-value-n3w", "n3w-header-value", "typed-but-refused"}

// noHeaderValue fails when a page shows a header value.
func noHeaderValue(t *testing.T, what string, a answer) {
	t.Helper()
	for _, v := range headerValues {
		if strings.Contains(a.body, v) {
			t.Errorf("%s: the page shows the header value %q", what, v)
		}
	}
}

var versionField = regexp.MustCompile(`<input type="hidden" name="version" value="([^"]+)">`)

// editForm is the edit page's form as a browser would send it unchanged:
// its CSRF token, version and the subscription's fields.
func editForm(t *testing.T, b *browser, id string) url.Values {
	t.Helper()
	a := b.get("/ui/subscriptions/" + id + "/edit")
	if a.status != http.StatusOK {
		t.Fatalf("edit page: got %d %s", a.status, a.body)
	}
	m := versionField.FindStringSubmatch(a.body)
	c := csrfMeta.FindStringSubmatch(a.body)
	if m == nil || c == nil {
		t.Fatalf("edit page: no version or CSRF field:\n%s", a.body)
	}
	return url.Values{"csrf": {c[1]}, "version": {m[1]}}
}

func createSub(t *testing.T, h *harness, s subscriptions.Subscription) subscriptions.Subscription {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.registry.Create(ctx, &s, ""); err != nil {
		t.Fatal(err)
	}
	got, err := h.registry.Get(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func getSub(t *testing.T, h *harness, id string) subscriptions.Subscription {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := h.registry.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSubscriptionEdit: the Edit page of a subscription shows its fields
// (header names, never their values) and saving changes them as PATCH
// /api/subscriptions/{id} would: a header given a value is replaced, one
// marked removed goes, one left blank keeps its value, a new one is
// added.
func TestSubscriptionEdit(t *testing.T) {
	h := serve(t, options{token: token})
	createSub(t, h, subscriptions.Subscription{ID: "sub_e", URL: "https://example.com/hook", Description: "orders",
		Sources: []string{"shop"}, Filter: `type == "order.paid"`,
		Headers: map[string]string{"X-Api-Key": "k3y-value-original", "X-Team": "t34m-value-original", "X-Keep": "kept-value"}})
	b := h.browser(t)
	b.signIn()

	detail := b.get("/ui/subscriptions/sub_e")
	if !strings.Contains(detail.body, `<a href="/ui/subscriptions/sub_e/edit"`) || !strings.Contains(detail.body, ">Edit</a>") {
		t.Errorf("detail: no Edit link:\n%s", detail.body)
	}
	noHeaderValue(t, "detail", detail)
	page := b.get("/ui/subscriptions/sub_e/edit")
	if page.status != http.StatusOK {
		t.Fatalf("edit page: got %d", page.status)
	}
	for _, want := range []string{`<label for="url">URL</label>`, `value="https://example.com/hook"`, `type == &#34;order.paid&#34;</textarea>`,
		`<label for="schedule">`, `<label for="timeout">`, `<label for="max_in_flight">`, `<label for="rate_limit">`,
		`<label for="batch_max">`, `<label for="batch_wait">`, "X-Api-Key", "X-Team", "X-Keep", ">Save</button>"} {
		if !strings.Contains(page.body, want) {
			t.Errorf("edit page: missing %s", want)
		}
	}
	noHeaderValue(t, "edit page", page)
	if strings.Contains(page.body, "kept-value") {
		t.Errorf("edit page: shows a header value")
	}

	form := editForm(t, b, "sub_e")
	for k, v := range map[string]string{
		"url": "https://example.com/hook2", "description": "orders, paid", "sources": "shop, crm", "event_types": "order.*",
		"filter": "type == \"order.paid\" &&\r\n  data.total > 10", "transform": "", "max_in_flight": "4", "rate_limit": "2.5",
		"batch_max": "10", "batch_wait": "200ms", "schedule": "10s, 1m", "timeout": "5s",
		"header.X-Api-Key": "k3y-value-n3w", "header.X-Team": "", "header.X-Keep": "",
	} {
		form.Set(k, v)
	}
	form.Set("ordered", "on")
	form.Add("remove_header", "X-Team")
	form["new_header_name"] = []string{"x-new", ""}
	form["new_header_value"] = []string{"n3w-header-value", ""}
	a := b.post("/ui/subscriptions/sub_e/edit", form)
	if a.status != http.StatusSeeOther || a.header.Get("Location") != "/ui/subscriptions/sub_e" {
		t.Fatalf("save: got %d to %q:\n%s", a.status, a.header.Get("Location"), a.body)
	}
	s := getSub(t, h, "sub_e")
	if s.URL != "https://example.com/hook2" || s.Description != "orders, paid" || strings.Join(s.Sources, ",") != "shop,crm" ||
		strings.Join(s.EventTypes, ",") != "order.*" || !s.Ordered || s.MaxInFlight != 4 || s.RateLimit != 2.5 ||
		s.BatchMax != 10 || time.Duration(s.BatchWait) != 200*time.Millisecond || time.Duration(s.Timeout) != 5*time.Second ||
		len(s.Schedule) != 2 || time.Duration(s.Schedule[1]) != time.Minute {
		t.Errorf("saved: got %+v", s.Redacted())
	}
	if s.Filter != "type == \"order.paid\" &&\n  data.total > 10" {
		t.Errorf("saved filter: got %q", s.Filter)
	}
	want := map[string]string{"X-Api-Key": "k3y-value-n3w", "X-Keep": "kept-value", "X-New": "n3w-header-value"}
	if len(s.Headers) != len(want) {
		t.Errorf("saved headers: got %d (%v), want %v", len(s.Headers), s.Redacted().Headers, want)
	}
	for k, v := range want {
		if s.Headers[k] != v {
			t.Errorf("saved header %s: got %q, want %q", k, s.Headers[k], v)
		}
	}
	if !s.Enabled || s.Secret == "" {
		t.Errorf("saved: the edit changed what the form does not show: enabled %v", s.Enabled)
	}

	// The detail page says so, and no page shows a value.
	detail = b.get("/ui/subscriptions/sub_e")
	if !strings.Contains(detail.body, "Subscription sub_e saved.") || !strings.Contains(detail.body, "X-New") {
		t.Errorf("after save: the detail page does not say so or lacks the new header")
	}
	for path, a := range map[string]answer{"detail": detail, "list": b.get("/ui/subscriptions"), "edit": b.get("/ui/subscriptions/sub_e/edit"), "save": a} {
		noHeaderValue(t, path, a)
		if strings.Contains(a.body, "kept-value") {
			t.Errorf("%s: shows a header value", path)
		}
	}

	// Clearing the filter, the schedule and the timeout goes back to
	// every event and the global settings.
	form = editForm(t, b, "sub_e")
	for k, v := range map[string]string{"url": "https://example.com/hook2", "filter": "", "schedule": "", "timeout": "",
		"max_in_flight": "4", "batch_max": "10"} {
		form.Set(k, v)
	}
	if a := b.post("/ui/subscriptions/sub_e/edit", form); a.status != http.StatusSeeOther {
		t.Fatalf("clear: got %d:\n%s", a.status, a.body)
	}
	s = getSub(t, h, "sub_e")
	if s.Filter != "" || s.Schedule != nil || s.Timeout != 0 || s.Headers["X-Api-Key"] != "k3y-value-n3w" {
		t.Errorf("cleared: got filter %q schedule %v timeout %v, headers kept %v", s.Filter, s.Schedule, s.Timeout, s.Redacted().Headers)
	}
	if a := b.get("/ui/subscriptions/sub_nope/edit"); a.status != http.StatusNotFound {
		t.Errorf("edit page of an unknown subscription: got %d, want 404", a.status)
	}
}

// TestSubscriptionEditRefused: a filter that does not compile is refused
// with its line and column, the form keeps what was typed (header values
// aside: they are never shown), and nothing is stored; so is a form
// opened before another change of the subscription.
func TestSubscriptionEditRefused(t *testing.T) {
	h := serve(t, options{token: token})
	before := createSub(t, h, subscriptions.Subscription{ID: "sub_r", URL: "https://example.com/hook", Filter: `type == "a"`,
		Headers: map[string]string{"X-Api-Key": "k3y-value-original"}})
	b := h.browser(t)
	b.signIn()
	cases := []struct {
		name   string
		form   map[string]string
		status int
		want   []string
	}{
		{"filter that does not parse", map[string]string{"filter": "type ==\n  "}, http.StatusBadRequest,
			[]string{"invalid filter: line 2, column 3"}},
		{"filter that is not bool", map[string]string{"filter": `"x"`}, http.StatusBadRequest, []string{"invalid filter: line 1, column 1"}},
		{"reserved header", map[string]string{"new_header_name": "Webhook-Id", "new_header_value": "typed-but-refused"}, http.StatusBadRequest,
			[]string{"headers: Webhook-Id is set by hookstream"}},
		{"header value without a name", map[string]string{"new_header_value": "typed-but-refused"}, http.StatusBadRequest,
			[]string{"headers: a value without a name"}},
		{"header set and removed", map[string]string{"header.X-Api-Key": "typed-but-refused", "remove_header": "X-Api-Key"}, http.StatusBadRequest,
			[]string{"headers: X-Api-Key both given a value and removed"}},
		{"bad numbers and durations", map[string]string{"max_in_flight": "many", "timeout": "90s", "schedule": "10s,soon"}, http.StatusBadRequest,
			[]string{"max_in_flight: &#34;many&#34; is not a whole number", "schedule: invalid duration &#34;soon&#34;"}},
		{"timeout over the bound", map[string]string{"timeout": "90s"}, http.StatusBadRequest, []string{"timeout: 1m30s is not between"}},
		{"stale form", map[string]string{"version": "2001-01-01T00:00:00Z"}, http.StatusConflict,
			[]string{"sub_r changed after this form was opened"}},
	}
	for _, tc := range cases {
		form := editForm(t, b, "sub_r")
		form.Set("url", "https://example.com/hook")
		form.Set("description", "kept <b>as typed</b>")
		form.Set("filter", `type == "a"`)
		form.Set("header.X-Api-Key", "typed-but-refused")
		for k, v := range tc.form {
			form.Set(k, v)
		}
		a := b.post("/ui/subscriptions/sub_r/edit", form)
		if a.status != tc.status || !strings.Contains(a.body, "The subscription was not saved") {
			t.Errorf("%s: got %d, want %d saying it was not saved:\n%s", tc.name, a.status, tc.status, a.body)
		}
		for _, want := range tc.want {
			if !strings.Contains(a.body, want) {
				t.Errorf("%s: the page does not say %q:\n%s", tc.name, want, a.body)
			}
		}
		if !strings.Contains(a.body, `value="kept &lt;b&gt;as typed&lt;/b&gt;"`) {
			t.Errorf("%s: the form does not keep what was typed", tc.name)
		}
		if f, ok := tc.form["filter"]; ok && !strings.Contains(a.body, ">"+strings.ReplaceAll(f, `"`, "&#34;")+"</textarea>") {
			t.Errorf("%s: the form does not keep the filter typed", tc.name)
		}
		noHeaderValue(t, tc.name, a)
		if s := getSub(t, h, "sub_r"); !s.UpdatedAt.Equal(before.UpdatedAt) || s.Filter != before.Filter || s.Description != "" ||
			s.Headers["X-Api-Key"] != "k3y-value-original" || len(s.Headers) != 1 {
			t.Errorf("%s: stored a change: %+v", tc.name, s.Redacted())
		}
	}
}

// TestSubscriptionEditNeedsCSRF: saving is refused without the session's
// CSRF token or from another origin, and changes nothing.
func TestSubscriptionEditNeedsCSRF(t *testing.T) {
	h := serve(t, options{token: token})
	before := createSub(t, h, subscriptions.Subscription{ID: "sub_c", URL: "https://example.com/hook"})
	b := h.browser(t)
	b.signIn()
	form := editForm(t, b, "sub_c")
	form.Set("url", "https://evil.example/hook")
	good := form.Get("csrf")
	form.Del("csrf")
	if a := b.post("/ui/subscriptions/sub_c/edit", form); a.status != http.StatusForbidden {
		t.Errorf("without the CSRF token: got %d, want 403", a.status)
	}
	form.Set("csrf", good+"x")
	if a := b.post("/ui/subscriptions/sub_c/edit", form); a.status != http.StatusForbidden {
		t.Errorf("with a wrong CSRF token: got %d, want 403", a.status)
	}
	form.Set("csrf", good)
	b.header = http.Header{"Origin": {"http://evil.example"}}
	if a := b.post("/ui/subscriptions/sub_c/edit", form); a.status != http.StatusForbidden {
		t.Errorf("from another origin: got %d, want 403", a.status)
	}
	if s := getSub(t, h, "sub_c"); s.URL != before.URL || !s.UpdatedAt.Equal(before.UpdatedAt) {
		t.Errorf("refused posts changed the subscription: %+v", s.Redacted())
	}
	// Signed out, the edit page sends to the sign-in page.
	if a := h.browser(t).get("/ui/subscriptions/sub_c/edit"); a.status != http.StatusSeeOther {
		t.Errorf("edit page signed out: got %d, want 303", a.status)
	}
}

// TestNewSubscriptionControls: the new-subscription form takes the
// schedule, the timeout and headers, whose values the answer does not
// show.
func TestNewSubscriptionControls(t *testing.T) {
	h := serve(t, options{token: token})
	b := h.browser(t)
	csrf := b.signIn()
	page := b.get("/ui/subscriptions/new")
	for _, want := range []string{`<label for="schedule">`, `<label for="timeout">`, `name="new_header_name"`, `name="new_header_value"`} {
		if !strings.Contains(page.body, want) {
			t.Errorf("new form: missing %s", want)
		}
	}
	form := url.Values{"csrf": {csrf}, "id": {"sub_n"}, "url": {"https://example.com/hook"}, "from": {"latest"},
		"schedule": {"5s,30s,5m"}, "timeout": {"3s"}, "max_in_flight": {"8"}, "batch_max": {"1"},
		"new_header_name": {"Authorization", ""}, "new_header_value": {"Bearer n3w-header-value", ""}}
	a := b.post("/ui/subscriptions/new", form)
	if a.status != http.StatusCreated {
		t.Fatalf("create: got %d:\n%s", a.status, a.body)
	}
	noHeaderValue(t, "create", a)
	s := getSub(t, h, "sub_n")
	if len(s.Schedule) != 3 || time.Duration(s.Timeout) != 3*time.Second || s.MaxInFlight != 8 ||
		s.Headers["Authorization"] != "Bearer n3w-header-value" {
		t.Errorf("created: got schedule %v timeout %v max in flight %d headers %v", s.Schedule, s.Timeout, s.MaxInFlight, s.Redacted().Headers)
	}
	// A refused form keeps the header's name, not its value.
	form.Set("id", "sub_n2")
	form.Set("timeout", "2m")
	a = b.post("/ui/subscriptions/new", form)
	if a.status != http.StatusBadRequest || !strings.Contains(a.body, "timeout: 2m is not between") || !strings.Contains(a.body, `value="Authorization"`) {
		t.Errorf("refused create: got %d:\n%s", a.status, a.body)
	}
	noHeaderValue(t, "refused create", a)
}
