package deadletter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/access"
	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/deadletter"
	"github.com/hookstream/hookstream/internal/apitest"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// TestLettersAsEachRoleSees: through the admin API, a team token reads
// and redrives only the delivery letters of its team's subscriptions, and
// no processor letter; a viewer reads every letter without its body, its
// headers or its error, which quote payloads, provider headers and
// answers; an operator reads them whole.
func TestLettersAsEachRoleSees(t *testing.T) {
	fx := newFixture(t, 1)
	names := fx.env.Names
	log := kafkatest.Logger(t)
	c := fx.cluster(names)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	tokens := access.New(access.Config{}, c, log, prometheus.NewRegistry())
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tokens.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("tokens: %v", err)
		}
	})
	token := func(role admin.Role, team string) string {
		t.Helper()
		_, secret, err := tokens.Create(ctx, access.Token{Name: string(role) + "-reader", Role: role, Team: team}, 0)
		if err != nil {
			t.Fatal(err)
		}
		return secret
	}
	registry := subscriptions.NewRegistry(c, log)
	sub := func(team string) subscriptions.Subscription {
		t.Helper()
		s := subscriptions.Subscription{URL: "https://example.com/" + team, Team: team}
		if err := registry.Create(ctx, &s, "latest"); err != nil {
			t.Fatal(err)
		}
		return s
	}
	payments, shipping := sub("payments"), sub("shipping")

	const (
		paymentsBody = "envelope-of-payments"
		shippingBody = "envelope-of-shipping"
		answer       = "answer-body-of-the-subscriber"
		rawBody      = "raw-webhook-body"
		provider     = "provider-header-value"
	)
	now := time.Now()
	delivery := func(s subscriptions.Subscription, body string) *kgo.Record {
		l := &topics.DeadLetter{Key: []byte(topics.RetryKey(s.ID, "shop:"+s.Team)), Value: []byte(body), Stage: topics.StageDeliver,
			Error: `500 Internal Server Error: "` + answer + `"`, FailedAt: now, Subscription: s.ID, Attempts: 3, LastStatus: 500}
		r := l.Record(names.DeliveryDLQ)
		r.Partition = 0
		return r
	}
	processorLetter := (&topics.DeadLetter{Key: []byte("shop:raw"), Value: []byte(rawBody), Stage: topics.StageDecode,
		Error: "invalid JSON payload: " + rawBody, FailedAt: now,
		Headers: []kgo.RecordHeader{{Key: topics.HeaderProviderPrefix + "x-signature", Value: []byte(provider)}}}).Record(names.DLQ)
	processorLetter.Partition = 0
	fx.produce(t, delivery(payments, paymentsBody), delivery(shipping, shippingBody), processorLetter)

	srv := admin.New(admin.Config{Token: "bootstrap-token-of-the-dlq-tests"}, prometheus.NewRegistry(), log)
	srv.Authenticate(tokens.Authenticate)
	dlq := deadletter.New(c)
	dlq.Teams(registry)
	dlq.Mount(srv)
	api := httptest.NewServer(srv)
	t.Cleanup(api.Close)
	team, viewer, operator := token(admin.Team, "payments"), token(admin.Viewer, ""), token(admin.Operator, "")
	call := func(tok, method, path, body string) (int, string) {
		t.Helper()
		var status int
		var raw []byte
		kafkatest.WaitFor(t, 30*time.Second, func() error { // the token reaches the listener
			status, raw = apitest.Call(t, api.URL, apitest.Bearer(tok), method, path, body)
			if status == http.StatusUnauthorized {
				return fmt.Errorf("%s %s: 401 %s", method, path, raw)
			}
			return nil
		})
		return status, string(raw)
	}

	status, raw := call(team, http.MethodGet, "/api/dlq?kind=delivery", "")
	var letters []deadletter.Letter
	if status != http.StatusOK || json.Unmarshal([]byte(raw), &letters) != nil || len(letters) != 1 || letters[0].Subscription != payments.ID || string(letters[0].Value) != paymentsBody {
		t.Errorf("the team's delivery letters: got %d %s, want the letter of %s with its body", status, raw, payments.ID)
	}
	if strings.Contains(raw, shipping.ID) || strings.Contains(raw, shippingBody) {
		t.Errorf("the team's delivery letters: got %s, want nothing of another team's subscription", raw)
	}
	for _, path := range []string{"/api/dlq", "/api/dlq?kind=processor"} {
		if status, raw := call(team, http.MethodGet, path, ""); status != http.StatusForbidden || strings.Contains(raw, rawBody) {
			t.Errorf("GET %s as a team: got %d %s, want 403", path, status, raw)
		}
	}
	if status, raw := call(team, http.MethodPost, "/api/dlq/redrive", `{"kind":"processor","all":true}`); status != http.StatusForbidden {
		t.Errorf("the team's redrive of the processor DLQ: got %d %s, want 403", status, raw)
	}
	if status, raw := call(team, http.MethodPost, "/api/dlq/redrive", `{"kind":"delivery","all":true}`); status != http.StatusOK || !strings.Contains(raw, `"redriven":1`) {
		t.Errorf("the team's redrive: got %d %s, want its one letter redriven", status, raw)
	}
	var copies []string
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		copies = copies[:0]
		for _, r := range fx.env.Records(t, names.DeliveryRetry) {
			copies = append(copies, string(r.Key))
		}
		if len(copies) == 0 {
			return fmt.Errorf("no copy on %s yet", names.DeliveryRetry)
		}
		return nil
	})
	if want := string(topics.RetryKey(payments.ID, "shop:payments")); len(copies) != 1 || copies[0] != want {
		t.Errorf("copies redriven by the team: got %q, want only %q", copies, want)
	}

	for _, kind := range []string{"delivery", "processor"} {
		status, raw := call(viewer, http.MethodGet, "/api/dlq?kind="+kind, "")
		var letters []deadletter.Letter
		if status != http.StatusOK || json.Unmarshal([]byte(raw), &letters) != nil || len(letters) == 0 {
			t.Errorf("the viewer's %s letters: got %d %s, want them listed", kind, status, raw)
		}
		for _, l := range letters {
			if l.Value != nil || l.Headers != nil || l.Error != "" {
				t.Errorf("the viewer's %s letter %s: got body %q, headers %q, error %q; want none", kind, l.Key, l.Value, l.Headers, l.Error)
			}
		}
		for _, s := range []string{paymentsBody, shippingBody, answer, rawBody, provider, team, viewer} {
			if strings.Contains(raw, s) {
				t.Errorf("the viewer's %s letters hold %q: %s", kind, s, raw)
			}
		}
		if status, raw := call(operator, http.MethodGet, "/api/dlq?kind="+kind, ""); status != http.StatusOK || !strings.Contains(raw, `"error":"`) {
			t.Errorf("the operator's %s letters: got %d %s, want them whole", kind, status, raw)
		}
	}
	if status, raw := call(viewer, http.MethodPost, "/api/dlq/redrive", `{"kind":"delivery","all":true}`); status != http.StatusForbidden {
		t.Errorf("the viewer's redrive: got %d %s, want 403", status, raw)
	}
}
