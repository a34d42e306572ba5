package subscriptions_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/attempts"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
)

// apiServer serves the subscriptions API on env with registry r.
func apiServer(t *testing.T, env *kafkatest.Env, r *subscriptions.Registry) *httptest.Server {
	t.Helper()
	c := env.ClusterOf(env.Client(t))
	tally := attempts.NewTally(c, kafkatest.Logger(t))
	run(t, "attempts tally", tally.Run)
	s := admin.New(admin.Config{}, prometheus.NewRegistry(), kafkatest.Logger(t))
	subscriptions.New(r, tally, "").Mount(s)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv
}

// call sends body as JSON and decodes the answer into out; it returns the
// status and the error message of a failed call.
func call(t *testing.T, srv *httptest.Server, method, path string, body, out any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, srv.URL+path, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(raw, &e)
		return resp.StatusCode, e.Error
	}
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: answer %q is not JSON: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, ""
}

// TestAPISubscriptionControls: the admin API takes a subscription's
// filter, transform, headers, schedule and timeout on POST and PATCH;
// shows header values only in the answer to the POST that set them, as
// it shows the secret; a PATCH of headers replaces them all; and a
// refused change stores nothing.
func TestAPISubscriptionControls(t *testing.T) {
	env := kafkatest.New(t, 1, 1<<20)
	r := secureRegistry(t, env, subscriptions.Security{Keys: mustKeys(t, newKey(t), nil)})
	srv := apiServer(t, env, r)
	ctx := context.Background()

	var created subscriptions.Subscription
	status, msg := call(t, srv, "POST", "/api/subscriptions", map[string]any{
		"url":       "https://ci.example.com/hook",
		"filter":    `source == "github" && data.action == "opened"`,
		"transform": `{"text": "opened " + data.pull_request.title}`,
		"headers":   map[string]string{"authorization": "Bearer tok", "X-Team": "ci"},
		"schedule":  []string{"1s", "1m"},
		"timeout":   "5s",
	}, &created)
	if status != http.StatusCreated {
		t.Fatalf("create: got %d %q, want 201", status, msg)
	}
	want := map[string]string{"Authorization": "Bearer tok", "X-Team": "ci"}
	if !reflect.DeepEqual(created.Headers, want) || created.Filter == "" || created.Transform == "" ||
		!reflect.DeepEqual(created.Schedule, []subscriptions.Duration{dur("1s"), dur("1m")}) || created.Timeout != dur("5s") {
		t.Fatalf("created: got %+v, want every control as set, header names canonical", created)
	}

	var got subscriptions.Subscription
	if status, msg := call(t, srv, "GET", "/api/subscriptions/"+created.ID, nil, &got); status != http.StatusOK {
		t.Fatalf("get: %d %q", status, msg)
	}
	if hidden := map[string]string{"Authorization": "…", "X-Team": "…"}; !reflect.DeepEqual(got.Headers, hidden) || got.Secret != "whsec_…" {
		t.Errorf("get: headers %v, secret %q; want values hidden like the secret", got.Headers, got.Secret)
	}
	var list []subscriptions.Subscription
	if call(t, srv, "GET", "/api/subscriptions", nil, &list); len(list) != 1 || list[0].Headers["Authorization"] != "…" {
		t.Errorf("list: got %+v, want the one subscription, header values hidden", list)
	}

	refused := []struct {
		name string
		body map[string]any
		want string
	}{
		{"filter that does not parse", map[string]any{"filter": `data.action == `}, "invalid subscription: invalid filter: line 1, column "},
		{"filter that is not a bool", map[string]any{"filter": `data.action`}, "invalid subscription: invalid filter: line 1, column 1: a filter must be a bool"},
		{"transform with an unknown variable", map[string]any{"transform": `{"text": payload.title}`}, "invalid subscription: invalid transform: line 1, column 10: "},
		{"reserved header", map[string]any{"headers": map[string]string{"Webhook-Id": "x"}}, "invalid subscription: headers: Webhook-Id is set by hookstream"},
		{"zero delay", map[string]any{"schedule": []string{"1s", "0s"}}, "invalid subscription: schedule: delay 2 (0s) is not above 0s and at most 24h"},
		{"long timeout", map[string]any{"timeout": "2m"}, "invalid subscription: timeout: 2m is not between 0s (HOOKSTREAM_DELIVERY_TIMEOUT) and 60s"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			status, msg := call(t, srv, "PATCH", "/api/subscriptions/"+created.ID, tt.body, nil)
			if status != http.StatusBadRequest || !strings.HasPrefix(msg, tt.want) {
				t.Errorf("patch: got %d %q, want 400 %q...", status, msg, tt.want)
			}
			body := map[string]any{"url": "https://other.example.com/hook"}
			for k, v := range tt.body {
				body[k] = v
			}
			status, msg = call(t, srv, "POST", "/api/subscriptions", body, nil)
			if status != http.StatusBadRequest || !strings.HasPrefix(msg, tt.want) {
				t.Errorf("post: got %d %q, want 400 %q...", status, msg, tt.want)
			}
		})
	}
	subs, err := r.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(subs) != 1 || subs[created.ID].UpdatedAt != created.UpdatedAt {
		t.Errorf("after refused changes: got %d subscriptions, updated at %v; want the one, unchanged since %v",
			len(subs), subs[created.ID].UpdatedAt, created.UpdatedAt)
	}

	var patched subscriptions.Subscription
	status, msg = call(t, srv, "PATCH", "/api/subscriptions/"+created.ID, map[string]any{
		"filter": "", "headers": map[string]string{"x-other": "1"}, "schedule": []string{}, "timeout": "0s",
	}, &patched)
	if status != http.StatusOK {
		t.Fatalf("patch: got %d %q", status, msg)
	}
	stored, err := r.Get(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Filter != "" || stored.Transform != created.Transform || !reflect.DeepEqual(stored.Headers, map[string]string{"X-Other": "1"}) ||
		len(stored.Schedule) != 0 || stored.Timeout != 0 {
		t.Errorf("after patch: got %+v, want the filter cleared, the transform kept, the headers replaced, schedule and timeout back to the globals", stored)
	}
	if patched.Headers["X-Other"] != "…" {
		t.Errorf("patch answer: headers %v, want values hidden", patched.Headers)
	}
}

func dur(s string) subscriptions.Duration {
	var d subscriptions.Duration
	if err := d.UnmarshalText([]byte(s)); err != nil {
		panic(err)
	}
	return d
}

// TestAPIPullSubscription: POST {"pull": true} creates a pull
// subscription and answers its token once, named pull_token (a
// webhook's secret is its secret); GET shows its kind and hides the
// token; rotating its secret rotates the token, the old one named
// previous_pull_token; its kind cannot be patched.
func TestAPIPullSubscription(t *testing.T) {
	env := kafkatest.New(t, 1, 1<<20)
	r := subscriptions.NewRegistry(env.ClusterOf(env.Client(t)), kafkatest.Logger(t))
	srv := apiServer(t, env, r)
	type shown struct {
		ID                     string `json:"id"`
		Kind                   string `json:"kind"`
		Pull                   bool   `json:"pull"`
		URL                    string `json:"url"`
		Secret                 string `json:"secret"`
		PreviousSecret         string `json:"previous_secret"`
		PullToken              string `json:"pull_token"`
		PreviousPullToken      string `json:"previous_pull_token"`
		PreviousPullTokenUntil string `json:"previous_pull_token_until"`
	}
	var created shown
	if status, msg := call(t, srv, "POST", "/api/subscriptions", map[string]any{"pull": true}, &created); status != http.StatusCreated {
		t.Fatalf("create: got %d %q, want 201", status, msg)
	}
	if !created.Pull || created.URL != "" || !strings.HasPrefix(created.PullToken, "whsec_") || created.Secret != "" {
		t.Fatalf("created: %+v, want a pull subscription with its pull_token and no secret", created)
	}
	var got shown
	if status, msg := call(t, srv, "GET", "/api/subscriptions/"+created.ID, nil, &got); status != http.StatusOK || got.Kind != "pull" || got.PullToken != "whsec_…" || got.Secret != "" {
		t.Errorf("get: %d %q %+v, want kind pull and the pull_token hidden", status, msg, got)
	}
	var rotated shown
	if status, msg := call(t, srv, "POST", "/api/subscriptions/"+created.ID+"/rotate-secret", nil, &rotated); status != http.StatusOK ||
		rotated.PullToken == created.PullToken || rotated.PreviousPullToken != created.PullToken || rotated.PreviousPullTokenUntil == "" ||
		rotated.Secret != "" || rotated.PreviousSecret != "" {
		t.Errorf("rotate-secret: %d %q, got %+v; want a new pull_token, the old one kept as previous_pull_token", status, msg, rotated)
	}
	if stored, err := r.Get(context.Background(), created.ID); err != nil || stored.Secret != rotated.PullToken {
		t.Errorf("stored: %v, secret %q; want the rotated token %q", err, stored.Secret, rotated.PullToken)
	}
	var webhook shown
	if status, msg := call(t, srv, "POST", "/api/subscriptions", map[string]any{"url": "https://example.com/hook"}, &webhook); status != http.StatusCreated ||
		!strings.HasPrefix(webhook.Secret, "whsec_") || webhook.PullToken != "" {
		t.Errorf("webhook create: %d %q %+v, want its secret named secret", status, msg, webhook)
	}
	if status, _ := call(t, srv, "PATCH", "/api/subscriptions/"+created.ID, map[string]any{"pull": false}, nil); status != http.StatusBadRequest {
		t.Errorf("patch of pull: got %d, want 400", status)
	}
	if status, _ := call(t, srv, "POST", "/api/subscriptions", map[string]any{}, nil); status != http.StatusBadRequest {
		t.Errorf("create with neither url nor pull: got %d, want 400", status)
	}
}

// TestAPITest: POST /api/subscriptions/{id}/test answers what the
// subscription would send for an event named or given, and delivers
// nothing.
func TestAPITest(t *testing.T) {
	env := kafkatest.New(t, 1, 1<<20)
	r := subscriptions.NewRegistry(env.ClusterOf(env.Client(t)), kafkatest.Logger(t))
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

// TestAPIShowsTheFieldsOfItsKind: a pull or topic subscription's JSON,
// created, got or listed, has none of the fields of a delivery to a URL
// (url, headers, ordered, max_in_flight, rate_limit, batch_max,
// batch_wait, schedule, timeout): they do not apply to it; a webhook's
// has them; the stored record keeps its defaults.
func TestAPIShowsTheFieldsOfItsKind(t *testing.T) {
	env := kafkatest.New(t, 1, 1<<20)
	r := subscriptions.NewRegistry(env.ClusterOf(env.Client(t)), kafkatest.Logger(t))
	srv := apiServer(t, env, r)
	delivery := []string{"url", "headers", "ordered", "max_in_flight", "rate_limit", "batch_max", "batch_wait", "schedule", "timeout"}
	for _, tc := range []struct {
		kind        string
		body        map[string]any
		has, hasNot []string
	}{
		{"webhook", map[string]any{"url": "https://example.com/hook", "headers": map[string]string{"X-Team": "ci"}, "schedule": []string{"1s"}, "timeout": "5s",
			"rate_limit": 2, "batch_max": 10, "batch_wait": "1s"}, append([]string{"secret"}, delivery...), []string{"pull_token", "topic"}},
		{"pull", map[string]any{"pull": true}, []string{"pull", "pull_token", "enabled"}, append([]string{"secret", "topic"}, delivery...)},
		{"topic", map[string]any{"topic": env.Names.Prefix + "-payments"}, []string{"topic", "enabled"}, append([]string{"secret", "pull_token"}, delivery...)},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			var created map[string]any
			if status, msg := call(t, srv, "POST", "/api/subscriptions", tc.body, &created); status != http.StatusCreated {
				t.Fatalf("create: got %d %q, want 201", status, msg)
			}
			id, _ := created["id"].(string)
			var got map[string]any
			call(t, srv, "GET", "/api/subscriptions/"+id, nil, &got)
			var list []map[string]any
			call(t, srv, "GET", "/api/subscriptions", nil, &list)
			var listed map[string]any
			for _, s := range list {
				if s["id"] == id {
					listed = s
				}
			}
			for answer, fields := range map[string]map[string]any{"created": created, "got": got, "listed": listed} {
				for _, f := range tc.has {
					if _, ok := fields[f]; !ok {
						t.Errorf("%s: no %q in %v", answer, f, fields)
					}
				}
				for _, f := range tc.hasNot {
					if v, ok := fields[f]; ok {
						t.Errorf("%s: %q: %v, want no such field: it does not apply to a %s subscription", answer, f, v, tc.kind)
					}
				}
			}
			stored, err := r.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if stored.MaxInFlight < 1 || stored.BatchMax < 1 {
				t.Errorf("stored: max_in_flight %d, batch_max %d; want the record as it was, with its defaults", stored.MaxInFlight, stored.BatchMax)
			}
		})
	}
}
