package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestPullSubscriptionPages: a pull subscription created in the form
// shows its pull token once; its page and the list say its kind and
// offer none of a webhook's things (URL, ordering, concurrency); its
// Test shows what a pull answer carries for an event, no webhook request;
// its edit form has none of a webhook's fields, and saving it keeps it a
// pull subscription.
func TestPullSubscriptionPages(t *testing.T) {
	h := serve(t, options{token: token})
	b := h.browser(t)
	csrf := b.signIn()

	a := b.post("/ui/subscriptions/new", url.Values{"csrf": {csrf}, "id": {"sub_pulled"}, "pull": {"on"},
		"url": {"https://ignored.example.com/hook"}, "ordered": {"on"}, "sources": {"shop"}, "from": {"earliest"}})
	if a.status != http.StatusCreated {
		t.Fatalf("create: got %d %s", a.status, a.body)
	}
	s := getSub(t, h, "sub_pulled")
	if !s.Pull || s.URL != "" || s.Ordered || shownSecret(a.body) != s.Secret || !strings.Contains(a.body, "Pull token") {
		t.Fatalf("created: %+v; want a pull subscription without a webhook's fields, its token shown", s.Redacted())
	}
	page := b.get("/ui/subscriptions/sub_pulled")
	for _, want := range []string{"<dt>Kind</dt><dd>pull", "GET /subscriptions/sub_pulled/events", ">Rotate pull token</button>"} {
		if !strings.Contains(page.body, want) {
			t.Errorf("detail: missing %q", want)
		}
	}
	for _, webhookOnly := range []string{"<dt>URL</dt>", "<dt>Ordered</dt>", "<dt>Concurrency</dt>", s.Secret} {
		if strings.Contains(page.body, webhookOnly) {
			t.Errorf("detail: shows %q", webhookOnly)
		}
	}
	envelope := `{"id":"shop:1","source":"shop","event_id":"1","type":"order.paid","received_at":"2026-01-01T00:00:00Z","data":{"id":"o-1"}}`
	test := b.post("/ui/subscriptions/sub_pulled/test", url.Values{"csrf": {csrf}, "envelope": {envelope}})
	for _, want := range []string{`<span class="badge ok">served</span>`, "GET /subscriptions/sub_pulled/events", "Item in <code>events</code>", "&#34;o-1&#34;"} {
		if test.status != http.StatusOK || !strings.Contains(test.body, want) {
			t.Errorf("test: got %d, missing %q", test.status, want)
		}
	}
	if strings.Contains(test.body, "webhook-signature") || strings.Contains(test.body, ">sent</span>") {
		t.Errorf("test: shows a webhook request")
	}
	if list := b.get("/ui/subscriptions"); !strings.Contains(list.body, `<td data-label="Kind">pull</td>`) {
		t.Errorf("list: no kind pull")
	}
	edit := b.get("/ui/subscriptions/sub_pulled/edit")
	for _, webhookOnly := range []string{`name="url"`, `name="ordered"`, `name="batch_max"`, `name="schedule"`, `name="new_header_name"`, `name="pull"`} {
		if strings.Contains(edit.body, webhookOnly) {
			t.Errorf("edit form: has %s", webhookOnly)
		}
	}
	form := editForm(t, b, "sub_pulled")
	form.Set("sources", "shop, crm")
	form.Set("description", "orders for the warehouse")
	if a := b.post("/ui/subscriptions/sub_pulled/edit", form); a.status != http.StatusSeeOther {
		t.Fatalf("save: got %d %s", a.status, a.body)
	}
	if got := getSub(t, h, "sub_pulled"); !got.Pull || got.Secret != s.Secret || strings.Join(got.Sources, ",") != "shop,crm" {
		t.Errorf("saved: %+v, want the sources changed, still pull with its token", got.Redacted())
	}
}

// TestPullSubscriptionEventsBehind: a pull subscription's page and the
// list say how many events its consumers have still to pull, transaction
// markers left out, counted from where a pull reads (the log start, as
// it has no cursor yet).
func TestPullSubscriptionEventsBehind(t *testing.T) {
	h := serve(t, options{token: token})
	b := h.browser(t)
	csrf := b.signIn()
	if a := b.post("/ui/subscriptions/new", url.Values{"csrf": {csrf}, "id": {"sub_behind"}, "pull": {"on"}}); a.status != http.StatusCreated {
		t.Fatalf("create: got %d %s", a.status, a.body)
	}
	h.env.Transact(t, h.env.Names.Events, 0, 4, 3, 100) // 12 events in 16 offsets
	if page := text(b.get("/ui/subscriptions/sub_behind").body); !strings.Contains(page, "Lag 12 events behind") {
		t.Errorf("detail: want %q in %s", "Lag 12 events behind", page)
	}
	if list := b.get("/ui/subscriptions").body; !strings.Contains(list, `<td class="num" data-label="Lag">12</td>`) {
		t.Errorf("list: want a lag of 12 in %s", list)
	}
}
