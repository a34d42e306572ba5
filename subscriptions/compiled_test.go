package subscriptions_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/expr"
	"github.com/hookstream/hookstream/internal/kafkatest"
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

// TestPreview: what would be sent, exactly as the dispatcher builds it:
// the transform's body, every header (static values hidden once redacted), the event's
// trace context; a batch of one for a batching subscription; no body
// when the event is not received, and the transform's error when it
// fails.
func TestPreview(t *testing.T) {
	now := time.Now()
	rec := eventRecord(t, "github", "push", "1", `{"pusher":{"name":"ada"}}`)
	rec.Partition, rec.Offset = 2, 40
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: topics.HeaderTraceparent, Value: []byte(traceparent)})
	s := subscriptions.Subscription{ID: "sub_p", Secret: signature.NewSecret(), Transform: `{"text": "by " + data.pusher.name}`,
		Headers: map[string]string{"X-Token": "s3cret"}}

	p := subscriptions.Compile(s).Preview(subscriptions.NewEvent(rec), now, "hookstream/1.0")
	if !p.Match || string(p.Body) != `{"text":"by ada"}` || p.Error != "" {
		t.Fatalf("got %+v, want a match with the transform's body", p)
	}
	want := map[string]string{"content-type": "application/json", "user-agent": "hookstream/1.0", "webhook-id": "github:1",
		"webhook-timestamp": fmt.Sprint(now.Unix()), "traceparent": traceparent, "x-token": "s3cret"}
	for name, v := range want {
		if p.Headers[name] != v {
			t.Errorf("header %s: got %q, want %q", name, p.Headers[name], v)
		}
	}
	key, _ := signature.DecodeSecret(s.Secret)
	if err := signature.Verify([][]byte{key}, p.Headers["webhook-id"], p.Headers["webhook-timestamp"], p.Headers["webhook-signature"], p.Body, now, time.Minute); err != nil {
		t.Errorf("signature: %v", err)
	}
	if len(p.Headers) != len(want)+1 {
		t.Errorf("headers: got %v, want %v and webhook-signature", p.Headers, want)
	}
	if r := subscriptions.Compile(s).Redact(p); r.Headers["x-token"] != "…" || p.Headers["x-token"] != "s3cret" || r.Headers["webhook-id"] != "github:1" {
		t.Errorf("redacted: got %v, want the value of X-Token hidden, in a copy", r.Headers)
	}

	s.BatchMax = 10
	p = subscriptions.Compile(s).Preview(subscriptions.NewEvent(rec), now, "")
	if string(p.Body) != `{"events":[{"text":"by ada"}]}` || p.Headers["webhook-id"] != subscriptions.BatchID(s.ID, rec, rec) {
		t.Errorf("batching: got body %s id %s, want a batch of one", p.Body, p.Headers["webhook-id"])
	}

	s.Sources = []string{"stripe"}
	if p = subscriptions.Compile(s).Preview(subscriptions.NewEvent(rec), now, ""); p.Match || p.Body != nil || p.Headers != nil || p.Reason == "" {
		t.Errorf("not received: got %+v, want no match, a reason, no body", p)
	}

	topic := subscriptions.Subscription{ID: "sub_t", Topic: "orders"}
	p = subscriptions.Compile(topic).Preview(subscriptions.NewEvent(rec), now, "")
	wantTopic := map[string]string{topics.HeaderSource: "github", topics.HeaderEventID: "1", topics.HeaderEventType: "push", topics.HeaderTraceparent: traceparent}
	if !p.Match || string(p.Body) != string(rec.Value) || p.Error != "" || !maps.Equal(p.Headers, wantTopic) {
		t.Errorf("topic subscription: got %+v, want the envelope and the record's headers %v", p, wantTopic)
	}

	s.Sources, s.Transform = nil, `{"text": data.sender.login}`
	if p = subscriptions.Compile(s).Preview(subscriptions.NewEvent(rec), now, ""); !p.Match || p.Body != nil || !strings.Contains(p.Error, "transform: ") ||
		!strings.Contains(p.Reason, "dead-lettered") {
		t.Errorf("failing transform: got %+v, want a match, the error, no body", p)
	}
}

// TestTestEvent: a test takes an event by key or a whole envelope, and
// refuses anything else before parsing it.
func TestTestEvent(t *testing.T) {
	ctx := context.Background()
	envelope := eventRecord(t, "github", "push", "1", `{}`).Value
	e, err := subscriptions.TestEvent(ctx, nil, nil, topics.Names{}, "", envelope)
	if err != nil || string(e.Record().Key) != "github:1" {
		t.Fatalf("envelope: got %v, want the event github:1", err)
	}
	for name, tc := range map[string]struct {
		key      string
		envelope string
	}{
		"neither":        {"", ""},
		"both":           {"github:1", string(envelope)},
		"not a key":      {"github", ""},
		"not JSON":       {"", "{"},
		"not envelope":   {"", `{"a":1}`},
		"too deep":       {"", `{"id":"a:b","data":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}`},
		"over the bound": {"", `{"id":"a:b","pad":"` + strings.Repeat("x", subscriptions.MaxTestEnvelope) + `"}`},
	} {
		if _, err := subscriptions.TestEvent(ctx, nil, nil, topics.Names{}, tc.key, []byte(tc.envelope)); !errors.Is(err, subscriptions.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
}

// TestFindEvent: the latest record of an event is found on the events
// topic, past many records of others; an unknown event is not found.
func TestFindEvent(t *testing.T) {
	env := kafkatest.New(t, 1, 1<<20)
	cl := env.Client(t)
	opts := []kgo.Opt{kgo.SeedBrokers(env.Seeds...)}
	ctx := context.Background()
	produce := func(recs ...*kgo.Record) {
		for _, r := range recs {
			r.Topic = string(env.Names.Events)
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(eventRecord(t, "github", "push", "1", `{"n":1}`))
	var others []*kgo.Record
	for i := range 3000 {
		others = append(others, eventRecord(t, "shop", "order", fmt.Sprint(i), `{}`))
	}
	produce(others...)
	produce(eventRecord(t, "github", "push", "1", `{"n":2}`))
	produce(others[:500]...)

	r, err := subscriptions.FindEvent(ctx, cl, opts, env.Names, "github:1")
	if err != nil {
		t.Fatal(err)
	}
	if env, err := topics.ParseEnvelope(r.Value); err != nil || string(env.Data) != `{"n":2}` {
		t.Errorf("found %s, want the latest record of github:1", r.Value)
	}
	if _, err := subscriptions.FindEvent(ctx, cl, opts, env.Names, "github:404"); !errors.Is(err, subscriptions.ErrEventNotFound) {
		t.Errorf("unknown event: got %v, want ErrEventNotFound", err)
	}
}

// TestAPITest: POST /api/subscriptions/{id}/test answers what the
// subscription would send for an event named or given, and delivers
// nothing.
func TestAPITest(t *testing.T) {
	env := kafkatest.New(t, 1, 1<<20)
	r := subscriptions.NewRegistry(env.Client(t), []kgo.Opt{kgo.SeedBrokers(env.Seeds...)}, env.Names, kafkatest.Logger(t))
	srv := apiServer(t, env, r)
	s := subscriptions.Subscription{URL: "https://example.com/hook", Filter: `data.action == "opened"`, Transform: `{"n": data.number}`,
		Headers: map[string]string{"X-Token": "s3cret"}}
	if err := r.Create(context.Background(), &s, "latest"); err != nil {
		t.Fatal(err)
	}
	rec := eventRecord(t, "github", "pull_request", "9", `{"action":"opened","number":9}`)
	rec.Topic = string(env.Names.Events)
	if err := env.Client(t).ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var p subscriptions.Preview
	if code, msg := call(t, srv, http.MethodPost, "/api/subscriptions/"+s.ID+"/test", map[string]any{"event": "github:9"}, &p); code != http.StatusOK {
		t.Fatalf("test by key: %d %s", code, msg)
	}
	if !p.Match || string(p.Body) != `{"n":9}` || p.Headers["webhook-id"] != "github:9" || p.Headers["x-token"] != "…" {
		t.Errorf("test by key: got %+v", p)
	}
	pulled := subscriptions.Subscription{Pull: true, Transform: `{"n": data.number}`}
	if err := r.Create(context.Background(), &pulled, "latest"); err != nil {
		t.Fatal(err)
	}
	var pp subscriptions.Preview
	if code, msg := call(t, srv, http.MethodPost, "/api/subscriptions/"+pulled.ID+"/test", map[string]any{"event": "github:9"}, &pp); code != http.StatusOK ||
		!pp.Match || string(pp.Body) != `{"n":9}` || pp.Headers != nil {
		t.Errorf("test of a pull subscription: %d %s %+v, want the item a pull answer serves, no headers", code, msg, pp)
	}
	closed := eventRecord(t, "github", "pull_request", "10", `{"action":"closed","number":10}`)
	if code, msg := call(t, srv, http.MethodPost, "/api/subscriptions/"+s.ID+"/test", map[string]any{"envelope": json.RawMessage(closed.Value)}, &p); code != http.StatusOK {
		t.Fatalf("test by envelope: %d %s", code, msg)
	}
	if p.Match || !strings.Contains(p.Reason, "the filter is false") {
		t.Errorf("test by envelope: got %+v, want no match by the filter", p)
	}
	for _, tc := range []struct {
		path string
		body any
		code int
	}{
		{"/api/subscriptions/" + s.ID + "/test", map[string]any{"event": "github:404"}, http.StatusNotFound},
		{"/api/subscriptions/sub_nope/test", map[string]any{"event": "github:9"}, http.StatusNotFound},
		{"/api/subscriptions/" + s.ID + "/test", map[string]any{}, http.StatusBadRequest},
		{"/api/subscriptions/" + s.ID + "/test", map[string]any{"envelope": map[string]any{"id": "nope"}}, http.StatusBadRequest},
		{"/api/subscriptions/" + s.ID + "/test", map[string]any{"event": "github:9", "deliver": true}, http.StatusBadRequest},
	} {
		if code, msg := call(t, srv, http.MethodPost, tc.path, tc.body, nil); code != tc.code {
			t.Errorf("POST %s %v: got %d %s, want %d", tc.path, tc.body, code, msg, tc.code)
		}
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
