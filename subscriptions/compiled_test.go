package subscriptions_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/expr"
	"github.com/hookstream/hookstream/signature"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// eventRecord is the events record of an event of source and type with
// data, as the processor writes it.
func eventRecord(t testing.TB, source, eventType, id, data string) *kgo.Record {
	t.Helper()
	e := &topics.Envelope{ID: source + ":" + id, Source: source, EventID: id, Type: eventType,
		ReceivedAt: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC), ProcessedAt: time.Date(2026, 11, 21, 10, 0, 1, 0, time.UTC),
		ContentType: "application/json", Headers: map[string]string{"x-github-event": eventType}, Data: json.RawMessage(data)}
	v, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Key: []byte(e.ID), Value: v, Headers: []kgo.RecordHeader{
		{Key: topics.HeaderSource, Value: []byte(source)},
		{Key: topics.HeaderEventID, Value: []byte(id)},
		{Key: topics.HeaderEventType, Value: []byte(eventType)},
	}}
}

// TestMatchSaysWhy: the globs, then the filter, decide; operational
// events go only where asked for and never to the subscription they are
// about; a failing filter is no match with its error; and the reason
// names what decided.
func TestMatchSaysWhy(t *testing.T) {
	opened := eventRecord(t, "github", "pull_request", "1", `{"action":"opened","number":7}`)
	closed := eventRecord(t, "github", "pull_request", "2", `{"action":"closed","number":8}`)
	noAction := eventRecord(t, "github", "pull_request", "3", `{"number":9}`)
	ops := func(about string) *kgo.Record {
		return eventRecord(t, topics.OperationalSource, topics.OpSubscriptionDisabled, "op-"+about, `{"subscription_id":"`+about+`"}`)
	}
	tests := []struct {
		name   string
		sub    subscriptions.Subscription
		rec    *kgo.Record
		match  bool
		rule   subscriptions.Rule
		reason string
	}{
		{"no globs, no filter", subscriptions.Subscription{}, opened, true, subscriptions.RuleMatch,
			`source "github" (no sources: all), type "pull_request" (no event_types: all), no filter`},
		{"globs", subscriptions.Subscription{Sources: []string{"stripe", "git*"}, EventTypes: []string{"pull_*"}}, opened, true, subscriptions.RuleMatch,
			`source "github" matches "git*", type "pull_request" matches "pull_*", no filter`},
		{"source glob", subscriptions.Subscription{Sources: []string{"stripe"}}, opened, false, subscriptions.RuleSources,
			`source "github" matches none of sources ["stripe"]`},
		{"type glob", subscriptions.Subscription{EventTypes: []string{"push"}}, opened, false, subscriptions.RuleEventTypes,
			`type "pull_request" matches none of event_types ["push"]`},
		{"filter true", subscriptions.Subscription{Filter: `data.action == "opened"`}, opened, true, subscriptions.RuleMatch, "the filter is true"},
		{"filter false", subscriptions.Subscription{Filter: `data.action == "opened"`}, closed, false, subscriptions.RuleFilter, "but the filter is false"},
		{"filter fails", subscriptions.Subscription{Filter: `data.action == "opened"`}, noAction, false, subscriptions.RuleFilterError, "but the filter failed, which is no match"},
		{"has() guards", subscriptions.Subscription{Filter: `has(data.action) && data.action == "opened"`}, noAction, false, subscriptions.RuleFilter, "the filter is false"},
		{"globs before the filter", subscriptions.Subscription{Sources: []string{"stripe"}, Filter: `data.action == "opened"`}, noAction, false, subscriptions.RuleSources, "matches none of sources"},
		{"stored filter that does not compile", subscriptions.Subscription{Filter: `data.action ==`}, opened, false, subscriptions.RuleFilterError, "the stored filter does not compile"},
		{"operational, not asked for", subscriptions.Subscription{Sources: []string{"*"}}, ops("sub_other"), false, subscriptions.RuleOperational, "only subscriptions whose sources name"},
		{"operational, asked for", subscriptions.Subscription{ID: "sub_me", Sources: []string{topics.OperationalSource}}, ops("sub_other"), true, subscriptions.RuleMatch, ""},
		{"operational, about itself", subscriptions.Subscription{ID: "sub_me", Sources: []string{topics.OperationalSource}}, ops("sub_me"), false, subscriptions.RuleSelf, "about this subscription"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := subscriptions.Compile(tt.sub).Match(subscriptions.NewEvent(tt.rec))
			if d.Match != tt.match || d.Rule != tt.rule || !strings.Contains(d.Reason(), tt.reason) {
				t.Errorf("got match %v rule %d reason %q, want %v rule %d reason with %q", d.Match, d.Rule, d.Reason(), tt.match, tt.rule, tt.reason)
			}
			if (d.Err != nil) != (tt.rule == subscriptions.RuleFilterError) {
				t.Errorf("Err: got %v with rule %d", d.Err, d.Rule)
			}
		})
	}
}

// TestFilterCostLimit: a filter within the estimated cost that a payload
// makes too costly to evaluate stops at the runtime limit: no match,
// with an error.
func TestFilterCostLimit(t *testing.T) {
	const filter = `data.items.exists(i, i == 2)`
	if _, err := expr.CompileFilter(filter); err != nil {
		t.Fatalf("the filter is refused: %v", err)
	}
	rec := eventRecord(t, "shop", "order", "1", `{"items":[`+strings.Repeat(`1,`, 450_000)+`1]}`)
	d := subscriptions.Compile(subscriptions.Subscription{Filter: filter}).Match(subscriptions.NewEvent(rec))
	if d.Match || d.Rule != subscriptions.RuleFilterError || !strings.Contains(d.Reason(), "cost") {
		t.Errorf("got match %v rule %d (%s), want a failed filter, over the cost limit", d.Match, d.Rule, d.Reason())
	}
}

// TestRender: without a transform the envelope goes as it is; a transform
// gives its JSON; a transform that fails, or gives more than the limit,
// is a TransformError.
func TestRender(t *testing.T) {
	rec := eventRecord(t, "github", "push", "1", `{"repository":{"full_name":"acme/api"},"pusher":{"name":"ada"}}`)
	tests := []struct {
		name      string
		transform string
		limit     int
		want      string
		err       string
	}{
		{"envelope", "", 0, string(rec.Value), ""},
		{"slack", `{"text": "push to " + data.repository.full_name + " by " + data.pusher.name}`, 0, `{"text":"push to acme/api by ada"}`, ""},
		{"fails", `{"text": data.sender.login}`, 0, "", "transform: "},
		{"over the limit", `{"text": data.pusher.name}`, 5, "", "over the 5-byte limit"},
		{"stored transform that does not compile", `{"text": `, 0, "", "the stored transform does not compile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := subscriptions.Compile(subscriptions.Subscription{Transform: tt.transform}).Render(subscriptions.NewEvent(rec), tt.limit)
			var te *subscriptions.TransformError
			switch {
			case tt.err == "" && (err != nil || string(body) != tt.want):
				t.Errorf("got %s, %v; want %s", body, err, tt.want)
			case tt.err != "" && (!errors.As(err, &te) || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("got %s, %v; want a TransformError with %q", body, err, tt.err)
			}
		})
	}
}

// TestHeader: an attempt carries the static headers, Content-Type,
// User-Agent and a Standard Webhooks signature with every key in force
// that verifies over the body.
func TestHeader(t *testing.T) {
	now := time.Now()
	s := subscriptions.Subscription{ID: "sub_h", Secret: signature.NewSecret(), PreviousSecret: signature.NewSecret(),
		PreviousSecretUntil: now.Add(time.Hour), Headers: map[string]string{"Authorization": "Bearer t0ken", "X-Team": "payments"}}
	body := []byte(`{"text":"hi"}`)
	h, err := subscriptions.Compile(s).Header("github:1", body, now, "hookstream/test")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"Authorization": "Bearer t0ken", "X-Team": "payments", "Content-Type": "application/json",
		"User-Agent": "hookstream/test", "Webhook-Id": "github:1"} {
		if got := h.Get(name); got != want {
			t.Errorf("%s: got %q, want %q", name, got, want)
		}
	}
	for _, secret := range []string{s.Secret, s.PreviousSecret} {
		key, _ := signature.DecodeSecret(secret)
		if _, err := signature.VerifyRequest(h, [][]byte{key}, body, now, time.Minute); err != nil {
			t.Errorf("signature with %s…: %v", secret[:10], err)
		}
	}
	if _, err := subscriptions.Compile(subscriptions.Subscription{Secret: "nope"}).Header("x", body, now, ""); !errors.Is(err, subscriptions.ErrNoSigningKey) {
		t.Errorf("without a key: got %v, want ErrNoSigningKey", err)
	}
}

// BenchmarkJudge measures what a subscription's filter and transform
// cost per event, beside the globs alone: Match and Render of one event
// of 1 KiB of JSON, its envelope parsed once, as the dispatcher judges
// each record it reads.
func BenchmarkJudge(b *testing.B) {
	const (
		filter    = `source == "bench" && data.amount > 100 && data.customer.email.endsWith("@example.com")`
		transform = `{"text": "payment of " + string(data.amount) + " by " + data.customer.email, "id": id}`
	)
	rec := eventRecord(b, "bench", "payment", "1", fmt.Sprintf(`{"amount":2500,"currency":"eur","customer":{"id":"cus_1","email":"ada@example.com"},"pad":%q}`,
		strings.Repeat("x", 900)))
	for _, c := range []struct {
		name string
		sub  subscriptions.Subscription
	}{
		{"none", subscriptions.Subscription{Sources: []string{"bench"}}},
		{"filter", subscriptions.Subscription{Sources: []string{"bench"}, Filter: filter}},
		{"transform", subscriptions.Subscription{Sources: []string{"bench"}, Transform: transform}},
		{"filter-transform", subscriptions.Subscription{Sources: []string{"bench"}, Filter: filter, Transform: transform}},
	} {
		b.Run(c.name, func(b *testing.B) {
			compiled := subscriptions.Compile(c.sub)
			b.ReportAllocs()
			for b.Loop() {
				e := subscriptions.NewEvent(rec)
				if d := compiled.Match(e); !d.Match {
					b.Fatal(d.Reason())
				}
				if _, err := compiled.Render(e, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
