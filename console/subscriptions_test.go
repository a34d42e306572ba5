package console_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

var secretShown = regexp.MustCompile(`<code>(whsec_[^<]{10,})</code>`)

// shownSecret is the secret a page shows, as the browser reads it.
func shownSecret(body string) string {
	m := secretShown.FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// TestSubscriptionLifecycle: a subscription created in the form shows its
// secret once; Disable, Enable, Rotate secret and Delete (confirmed by
// typing the id) change it in the registry as the API would.
func TestSubscriptionLifecycle(t *testing.T) {
	h := serve(t, options{token: token})
	b := h.browser(t)
	csrf := b.signIn()

	if a := b.get("/ui/subscriptions"); a.status != http.StatusOK || !strings.Contains(a.body, "No subscriptions yet.") {
		t.Fatalf("empty list: got %d, want the empty state", a.status)
	}
	if a := b.get("/ui/subscriptions/new"); a.status != http.StatusOK || !strings.Contains(a.body, `<label for="url">URL</label>`) {
		t.Fatalf("new form: got %d", a.status)
	}
	a := b.post("/ui/subscriptions/new", url.Values{"csrf": {csrf}, "id": {"sub_console"}, "url": {"https://example.com/hook"},
		"description": {"orders"}, "sources": {"shop, crm"}, "event_types": {"order.*"}, "ordered": {"on"},
		"filter": {`type == "order.paid"`}, "from": {"latest"}})
	if a.status != http.StatusCreated {
		t.Fatalf("create: got %d %s", a.status, a.body)
	}
	secret := shownSecret(a.body)
	if secret == "" || !strings.Contains(a.body, "shown only this once") {
		t.Fatalf("create: the new secret is not shown:\n%s", a.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := h.registry.Get(ctx, "sub_console")
	if err != nil {
		t.Fatal(err)
	}
	if s.Secret != secret || !s.Ordered || strings.Join(s.Sources, ",") != "shop,crm" || s.Filter != `type == "order.paid"` {
		t.Errorf("created: got %+v, want the form's fields and the secret shown", s.Redacted())
	}
	page := b.get("/ui/subscriptions/sub_console")
	if page.status != http.StatusOK || strings.Contains(page.body, s.Secret) || secretShown.MatchString(page.body) {
		t.Errorf("detail: got %d, and the secret must not be shown again", page.status)
	}
	for _, want := range []string{`<span class="badge">unknown</span> <span class="muted">this instance runs no dispatcher`, "https://example.com/hook", "type == &#34;order.paid&#34;", ">Disable</button>", ">Rotate secret</button>", ">Delete</button>"} {
		if !strings.Contains(page.body, want) {
			t.Errorf("detail: missing %s", want)
		}
	}

	if a := b.post("/ui/subscriptions/sub_console/disable", url.Values{"csrf": {csrf}}); a.status != http.StatusSeeOther {
		t.Fatalf("disable: got %d %s", a.status, a.body)
	}
	if s, _ := h.registry.Get(ctx, "sub_console"); s.Enabled {
		t.Error("disable: still enabled")
	}
	page = b.get("/ui/subscriptions/sub_console")
	if !strings.Contains(page.body, "disabled: no deliveries until it is enabled") || !strings.Contains(page.body, ">Enable</button>") {
		t.Errorf("after disable: the page does not say so or offer Enable")
	}
	if a := b.post("/ui/subscriptions/sub_console/enable", url.Values{"csrf": {csrf}}); a.status != http.StatusSeeOther {
		t.Fatalf("enable: got %d", a.status)
	}
	if s, _ := h.registry.Get(ctx, "sub_console"); !s.Enabled {
		t.Error("enable: still disabled")
	}

	a = b.post("/ui/subscriptions/sub_console/rotate-secret", url.Values{"csrf": {csrf}})
	rotated, _ := h.registry.Get(ctx, "sub_console")
	if a.status != http.StatusOK || shownSecret(a.body) != rotated.Secret || rotated.Secret == s.Secret || rotated.PreviousSecret != s.Secret {
		t.Errorf("rotate: got %d; want the new secret shown once, the old one kept as previous", a.status)
	}

	if a := b.post("/ui/subscriptions/sub_console/delete", url.Values{"csrf": {csrf}, "confirm": {"sub_other"}}); a.status != http.StatusSeeOther {
		t.Fatalf("delete with the wrong id: got %d", a.status)
	}
	if _, err := h.registry.Get(ctx, "sub_console"); err != nil {
		t.Fatalf("delete with the wrong id typed deleted it: %v", err)
	}
	if a := b.post("/ui/subscriptions/sub_console/delete", url.Values{"csrf": {csrf}, "confirm": {"sub_console"}}); a.status != http.StatusSeeOther || a.header.Get("Location") != "/ui/subscriptions" {
		t.Fatalf("delete: got %d to %q", a.status, a.header.Get("Location"))
	}
	if _, err := h.registry.Get(ctx, "sub_console"); err == nil {
		t.Error("delete: still there")
	}
	if a := b.get("/ui/subscriptions/sub_console"); a.status != http.StatusNotFound {
		t.Errorf("deleted subscription's page: got %d, want 404", a.status)
	}
}

// TestSubscriptionFormErrors: the registry's refusals show in the form,
// which keeps what was typed; nothing is created.
func TestSubscriptionFormErrors(t *testing.T) {
	h := serve(t, options{token: token})
	b := h.browser(t)
	csrf := b.signIn()
	cases := []struct {
		name string
		form url.Values
		want string
	}{
		{"invalid filter", url.Values{"url": {"https://example.com/hook"}, "filter": {"type ==\n  "}}, "filter: line 2"},
		{"invalid URL", url.Values{"url": {"ftp://example.com/hook"}}, "url"},
		{"invalid glob", url.Values{"url": {"https://example.com/hook"}, "sources": {"[x"}}, `sources: invalid glob &#34;[x&#34;`},
	}
	for _, tc := range cases {
		tc.form.Set("csrf", csrf)
		tc.form.Set("description", "kept <b>as typed</b>")
		a := b.post("/ui/subscriptions/new", tc.form)
		if a.status != http.StatusBadRequest || !strings.Contains(a.body, "The subscription was not created") || !strings.Contains(a.body, tc.want) {
			t.Errorf("%s: got %d, want 400 naming %q:\n%s", tc.name, a.status, tc.want, a.body)
		}
		if !strings.Contains(a.body, `value="kept &lt;b&gt;as typed&lt;/b&gt;"`) {
			t.Errorf("%s: the form does not keep what was typed", tc.name)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if subs, err := h.registry.List(ctx); err != nil || len(subs) != 0 {
		t.Errorf("after refusals: got %d subscriptions (%v), want none", len(subs), err)
	}
}

// TestSubscriptionPagesEscapeAndShowAttempts: attempts show on the page,
// filtered by status; text from the topics renders as text.
func TestSubscriptionPagesEscapeAndShowAttempts(t *testing.T) {
	h := serve(t, options{token: token})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := subscriptions.Subscription{ID: "sub_a", URL: "https://example.com/hook", Description: "<script>alert(1)</script>"}
	if err := h.registry.Create(ctx, &s, ""); err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC()
	if err := h.cl.ProduceSync(ctx,
		(&topics.Attempt{Subscription: "sub_a", EventID: "shop:1", N: 1, Outcome: topics.OutcomeDelivered, Status: 200, At: at}).Record(h.env.Names.DeliveryAttempts),
		(&topics.Attempt{Subscription: "sub_a", EventID: "shop:2", N: 1, Outcome: topics.OutcomeFailed, Status: 500,
			Error: `status 500 "<img src=x onerror=alert(1)>"`, At: at}).Record(h.env.Names.DeliveryAttempts),
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	b := h.browser(t)
	b.signIn()
	list := b.get("/ui/subscriptions")
	if strings.Contains(list.body, "<script>alert(1)</script>") || !strings.Contains(list.body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("list: the description is not escaped")
	}
	if strings.Contains(list.body, "<img src=x") {
		t.Errorf("list: the last failure's error is not escaped")
	}
	page := b.get("/ui/subscriptions/sub_a")
	if !strings.Contains(page.body, "shop:1") || !strings.Contains(page.body, "shop:2") || strings.Contains(page.body, "<img src=x") {
		t.Errorf("detail: want both attempts, escaped:\n%s", page.body)
	}
	failed := b.get("/ui/subscriptions/sub_a?status=failed")
	if strings.Contains(failed.body, ">shop:1<") || !strings.Contains(failed.body, ">shop:2<") {
		t.Errorf("detail filtered by failed: want shop:2 only:\n%s", failed.body)
	}
	if !strings.Contains(failed.body, `<option value="failed" selected>`) {
		t.Errorf("detail filtered by failed: the filter does not show the status chosen")
	}
}

// TestSubscriptionTest: the Test form shows what the subscription would
// send for an envelope: the filter's decision, the transformed body and
// the headers, the subscription's own header values hidden; a bad
// envelope or an unknown event is said in the page.
func TestSubscriptionTest(t *testing.T) {
	h := serve(t, options{token: token})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := subscriptions.Subscription{ID: "sub_t", URL: "https://example.com/hook", Filter: `data.total > 10`,
		Transform: `{"order": data.id, "note": "<b>" + data.note + "</b>"}`, Headers: map[string]string{"X-Api-Key": "k3y-value"}}
	if err := h.registry.Create(ctx, &s, ""); err != nil {
		t.Fatal(err)
	}
	b := h.browser(t)
	csrf := b.signIn()
	envelope := func(total int) string {
		return `{"id":"shop:1","source":"shop","event_id":"1","type":"order.paid","received_at":"2026-01-01T00:00:00Z",` +
			`"data":{"id":"o-1","total":` + strconv.Itoa(total) + `,"note":"<script>x</script>"}}`
	}
	a := b.post("/ui/subscriptions/sub_t/test", url.Values{"csrf": {csrf}, "envelope": {envelope(42)}})
	if a.status != http.StatusOK || !strings.Contains(a.body, `<span class="badge ok">would send</span>`) {
		t.Fatalf("test a matching envelope: got %d:\n%s", a.status, a.body)
	}
	for _, want := range []string{"&#34;order&#34;: &#34;o-1&#34;", "x-api-key: …", "webhook-signature: v1,"} {
		if !strings.Contains(a.body, want) {
			t.Errorf("test a matching envelope: missing %s", want)
		}
	}
	if strings.Contains(a.body, "k3y-value") || strings.Contains(a.body, "<script>x") {
		t.Errorf("test a matching envelope: a header value shown, or the payload not escaped")
	}
	a = b.post("/ui/subscriptions/sub_t/test", url.Values{"csrf": {csrf}, "envelope": {envelope(3)}})
	if a.status != http.StatusOK || !strings.Contains(a.body, `<span class="badge warn">would not send</span>`) {
		t.Errorf("test an envelope the filter refuses: got %d", a.status)
	}
	if a = b.post("/ui/subscriptions/sub_t/test", url.Values{"csrf": {csrf}, "envelope": {"{not json"}}); a.status != http.StatusBadRequest {
		t.Errorf("test a bad envelope: got %d, want 400", a.status)
	}
	if a = b.post("/ui/subscriptions/sub_t/test", url.Values{"csrf": {csrf}, "event": {"shop:nope"}}); a.status != http.StatusNotFound || !strings.Contains(a.body, `class="error"`) {
		t.Errorf("test an unknown event: got %d, want 404 said in the page", a.status)
	}
}

// TestTopicSubscriptionPages: the list and the page of a topic
// subscription show its topic, and the page offers none of a webhook's
// controls (secret rotation, delivery shape).
func TestTopicSubscriptionPages(t *testing.T) {
	h := serve(t, options{token: token})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	target := h.env.Names.Prefix + "-orders"
	s := subscriptions.Subscription{ID: "sub_t", Topic: target}
	if err := h.registry.Create(ctx, &s, ""); err != nil {
		t.Fatal(err)
	}
	b := h.browser(t)
	b.signIn()
	if list := b.get("/ui/subscriptions"); !strings.Contains(list.body, `topic <code class="clip" title="`+target+`">`+target+"</code>") {
		t.Errorf("list: want the topic %s shown:\n%s", target, list.body)
	}
	page := b.get("/ui/subscriptions/sub_t")
	if !strings.Contains(page.body, "<dt>Topic</dt><dd><code>"+target+"</code>") {
		t.Errorf("detail: want the topic %s shown:\n%s", target, page.body)
	}
	for _, webhookOnly := range []string{"Rotate secret", "<dt>Concurrency</dt>", "<dt>URL</dt>"} {
		if strings.Contains(page.body, webhookOnly) {
			t.Errorf("detail: a topic subscription's page offers %q", webhookOnly)
		}
	}
}

// TestSubscriptionAttemptsOneRowEach: a subscription's page lists each
// real attempt once, with its next step folded in: a failed attempt the
// dispatcher retries reads "failed · retry at HH:MM:SS", one it
// dead-lettered "failed · dead-lettered", a delivered one "delivered";
// never a failed row and a retrying row for the same attempt.
func TestSubscriptionAttemptsOneRowEach(t *testing.T) {
	h := serve(t, options{token: token})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := subscriptions.Subscription{ID: "sub_r", URL: "https://example.com/hook"}
	if err := h.registry.Create(ctx, &s, ""); err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC().Truncate(time.Second).Add(-time.Minute)
	due := at.Add(30 * time.Second)
	names := h.env.Names
	if err := h.cl.ProduceSync(ctx,
		(&topics.Attempt{Subscription: "sub_r", EventID: "shop:1", N: 1, Outcome: topics.OutcomeFailed, Status: 503, Latency: 12 * time.Millisecond, At: at}).Record(names.DeliveryAttempts),
		(&topics.Attempt{Subscription: "sub_r", EventID: "shop:1", N: 1, Outcome: topics.OutcomeRetrying, Status: 503, At: at.Add(time.Millisecond), DueAt: due}).Record(names.DeliveryAttempts),
		(&topics.Attempt{Subscription: "sub_r", EventID: "shop:1", N: 2, Outcome: topics.OutcomeFailed, Status: 503, At: due}).Record(names.DeliveryAttempts),
		(&topics.Attempt{Subscription: "sub_r", EventID: "shop:1", N: 2, Outcome: topics.OutcomeDeadLettered, Status: 503, At: due.Add(time.Millisecond)}).Record(names.DeliveryAttempts),
		(&topics.Attempt{Subscription: "sub_r", EventID: "shop:2", N: 1, Outcome: topics.OutcomeDelivered, Status: 200, At: due.Add(time.Second)}).Record(names.DeliveryAttempts),
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	b := h.browser(t)
	b.signIn()
	page := b.get("/ui/subscriptions/sub_r")
	start := strings.Index(page.body, `aria-labelledby="attempts-h"`)
	end := strings.Index(page.body[max(start, 0):], "</table>")
	if start < 0 || end < 0 {
		t.Fatalf("no attempts table:\n%s", page.body)
	}
	var rows []string
	for _, tr := range strings.Split(page.body[start:start+end], "<tr>")[2:] { // past the head
		rows = append(rows, text(tr))
	}
	want := []string{
		"shop:2 1 delivered 200",
		"shop:1 2 failed · dead-lettered 503",
		"shop:1 1 failed · retry at " + due.Format("15:04:05") + " 503 12.0 ms",
	}
	if len(rows) != len(want) {
		t.Fatalf("attempts: got %d rows %q, want %d, one per attempt", len(rows), rows, len(want))
	}
	for i, w := range want {
		if !strings.Contains(rows[i], w) {
			t.Errorf("attempt row %d: got %q, want it to read %q", i+1, rows[i], w)
		}
	}
}

// TestSubscriptionTeam: an admin sets a subscription's team in the form;
// the list and its page show it; a team token's form offers no team
// field, and what it creates is its team's.
func TestSubscriptionTeam(t *testing.T) {
	h := serve(t, options{token: token})
	b := h.browser(t)
	csrf := b.signIn()
	if a := b.post("/ui/subscriptions/new", url.Values{"csrf": {csrf}, "id": {"sub_blue"}, "url": {"https://example.com/blue"}, "team": {"blue"}}); a.status != http.StatusCreated {
		t.Fatalf("create: got %d %s", a.status, a.body)
	}
	if s := getSub(t, h, "sub_blue"); s.Team != "blue" {
		t.Errorf("created: team %q, want blue", s.Team)
	}
	if list := b.get("/ui/subscriptions").body; !strings.Contains(list, `<td data-label="Team">blue</td>`) {
		t.Errorf("list: no team blue in\n%s", list)
	}
	if page := text(b.get("/ui/subscriptions/sub_blue").body); !strings.Contains(page, "Team blue") {
		t.Errorf("detail: no team blue in %s", page)
	}

	_, secret := h.addToken(t, "green-bot", admin.Team, "green")
	g := h.browser(t)
	csrf = g.signInWith(secret)
	if form := g.get("/ui/subscriptions/new").body; strings.Contains(form, `name="team"`) || !strings.Contains(form, "Owned by team green") {
		t.Errorf("a team's new form: want no team field and its team named, got\n%s", form)
	}
	if a := g.post("/ui/subscriptions/new", url.Values{"csrf": {csrf}, "id": {"sub_green"}, "url": {"https://example.com/green"}, "team": {"blue"}}); a.status != http.StatusCreated {
		t.Fatalf("create as team green: got %d %s", a.status, a.body)
	}
	if s := getSub(t, h, "sub_green"); s.Team != "green" {
		t.Errorf("created by team green asking for blue: team %q, want green", s.Team)
	}
}
