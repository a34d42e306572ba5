package access_test

import (
	"bytes"
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
	"github.com/hookstream/hookstream/internal/apitest"
	"github.com/hookstream/hookstream/internal/kafkatest"
)

// bootstrapToken is HOOKSTREAM_ADMIN_TOKEN in these tests.
const bootstrapToken = "bootstrap-secret-of-the-tests"

// instance is one admin listener with the token service mounted, on the
// test's broker, its service running.
type instance struct {
	*httptest.Server
	reg *prometheus.Registry
}

func startInstance(t *testing.T, env *kafkatest.Env, cfg access.Config) instance {
	t.Helper()
	log := kafkatest.Logger(t)
	reg := prometheus.NewRegistry()
	srv := admin.New(admin.Config{Token: bootstrapToken}, reg, log)
	svc := access.New(cfg, env.ClusterOf(env.Client(t)), log, reg)
	svc.Mount(srv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("access: Run: %v", err)
		}
	})
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return instance{Server: hs, reg: reg}
}

// call sends method path with body (JSON when not empty) and the bearer
// token tok (none when empty), and returns the status and the answer.
func (in instance) call(t *testing.T, tok, method, path, body string) (int, []byte) {
	t.Helper()
	return apitest.Call(t, in.URL, apitest.Bearer(tok), method, path, body)
}

// created is the answer to POST /api/tokens.
type created struct {
	access.Token
	Secret string `json:"token"`
}

// add creates a token with the bootstrap token and returns it.
func (in instance) add(t *testing.T, body string) created {
	t.Helper()
	status, raw := in.call(t, bootstrapToken, http.MethodPost, "/api/tokens", body)
	if status != http.StatusCreated {
		t.Fatalf("POST /api/tokens %s: got %d %s, want 201", body, status, raw)
	}
	var c created
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestTokensAuthenticateByRole(t *testing.T) {
	env := kafkatest.New(t, 1, 1<<20)
	in := startInstance(t, env, access.Config{MaxTokens: 100})

	adm := in.add(t, `{"name":"ops-lead","role":"admin"}`)
	if !strings.HasPrefix(adm.Secret, "hst_") || len(adm.Secret) != len("hst_")+43 {
		t.Fatalf("token %q: want hst_ and 32 bytes in base64url", adm.Secret)
	}
	viewer := in.add(t, `{"name":"dashboards","role":"viewer"}`)

	// The new admin token lists tokens; the list never shows a token
	// or its digest.
	status, raw := in.call(t, adm.Secret, http.MethodGet, "/api/tokens", "")
	if status != http.StatusOK {
		t.Fatalf("GET /api/tokens as the new admin: got %d %s, want 200", status, raw)
	}
	var list []access.Token
	if err := json.Unmarshal(raw, &list); err != nil || len(list) != 2 {
		t.Fatalf("list: got %s (%v), want 2 tokens", raw, err)
	}
	for _, secret := range []string{adm.Secret, viewer.Secret, strings.TrimPrefix(adm.Secret, "hst_")} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("the list shows a token: %s", raw)
		}
	}
	if bytes.Contains(raw, []byte("digest")) {
		t.Errorf("the list shows digests: %s", raw)
	}
	var used *time.Time
	for _, tok := range list {
		if tok.ID == adm.ID {
			used = tok.LastUsedAt
		}
	}
	if used == nil {
		t.Errorf("list: the admin token that listed has no last use: %s", raw)
	}

	// A viewer is known but may not manage tokens.
	status, raw = in.call(t, viewer.Secret, http.MethodGet, "/api/tokens", "")
	if want := `{"error":"GET /api/tokens needs role admin"}`; status != http.StatusForbidden || strings.TrimSpace(string(raw)) != want {
		t.Errorf("GET /api/tokens as a viewer: got %d %s, want 403 %s", status, raw, want)
	}

	// Unknown tokens and malformed headers are refused alike, without
	// detail.
	want := `{"error":"missing or invalid bearer token"}`
	for _, header := range []string{"", "Bearer", "Bearer ", "Basic " + adm.Secret, "bearer " + adm.Secret, "Bearer " + adm.Secret + "x",
		"Bearer hst_" + strings.Repeat("A", 43), "Bearer " + strings.Repeat("x", 10_000), "Bearer " + adm.Secret + " " + adm.Secret} {
		status, raw := apitest.Call(t, in.URL, header, http.MethodGet, "/api/tokens", "")
		if status != http.StatusUnauthorized || strings.TrimSpace(string(raw)) != want {
			t.Errorf("Authorization %.40q: got %d %s, want 401 %s", header, status, raw, want)
		}
	}

	// Only digests reach the topic.
	for _, r := range env.Records(t, env.Names.Access) {
		for _, secret := range []string{adm.Secret, viewer.Secret, strings.TrimPrefix(adm.Secret, "hst_")} {
			if bytes.Contains(r.Value, []byte(secret)) {
				t.Errorf("access record %s holds a token in clear: %s", r.Key, r.Value)
			}
		}
	}
}

func TestTokenFieldsValidated(t *testing.T) {
	env := kafkatest.New(t, 1, 1<<20)
	in := startInstance(t, env, access.Config{MaxTokens: 100})
	for _, body := range []string{
		`{"name":"","role":"admin"}`,
		`{"name":"Ops","role":"admin"}`,
		`{"name":"-ops","role":"admin"}`,
		`{"name":"` + strings.Repeat("a", 64) + `","role":"admin"}`,
		`{"name":"ops","role":"root"}`,
		`{"name":"ops","role":"team"}`,
		`{"name":"ops","role":"team","team":"Payments!"}`,
		`{"name":"ops","role":"viewer","team":"payments"}`,
		`{"name":"ops","role":"viewer","expires":"-1h"}`,
		`{"name":"ops","role":"viewer","expires":"soon"}`,
		`{"name":"ops","role":"viewer","token":"hst_mine"}`,
	} {
		if status, raw := in.call(t, bootstrapToken, http.MethodPost, "/api/tokens", body); status != http.StatusBadRequest {
			t.Errorf("POST /api/tokens %s: got %d %s, want 400", body, status, raw)
		}
	}
	tm := in.add(t, `{"name":"payments-ci","role":"team","team":"payments","expires":"720h"}`)
	if tm.Team != "payments" || tm.ExpiresAt.IsZero() {
		t.Errorf("team token: got %+v, want team payments with an expiry", tm.Token)
	}
}

func TestTokenLimit(t *testing.T) {
	env := kafkatest.New(t, 1, 1<<20)
	in := startInstance(t, env, access.Config{MaxTokens: 2})
	first := in.add(t, `{"name":"one","role":"viewer"}`)
	in.add(t, `{"name":"two","role":"viewer"}`)
	status, raw := in.call(t, bootstrapToken, http.MethodPost, "/api/tokens", `{"name":"three","role":"viewer"}`)
	if status != http.StatusConflict || !strings.Contains(string(raw), "HOOKSTREAM_MAX_TOKENS") {
		t.Fatalf("a third token past a limit of 2: got %d %s, want 409 naming HOOKSTREAM_MAX_TOKENS", status, raw)
	}
	// Revoking one makes room.
	if status, raw := in.call(t, bootstrapToken, http.MethodDelete, "/api/tokens/"+first.ID, ""); status != http.StatusNoContent {
		t.Fatalf("DELETE: got %d %s, want 204", status, raw)
	}
	in.add(t, `{"name":"three","role":"viewer"}`)
	if status, raw := in.call(t, bootstrapToken, http.MethodDelete, "/api/tokens/"+first.ID, ""); status != http.StatusNotFound {
		t.Errorf("DELETE of a revoked token: got %d %s, want 404", status, raw)
	}
}

// TestRevocationHoldsOnEveryInstance: two admin listeners on one broker;
// a token made on one works on the other, and once revoked on the first
// the second refuses it, each within 5 s.
func TestRevocationHoldsOnEveryInstance(t *testing.T) {
	env := kafkatest.New(t, 1, 1<<20)
	a := startInstance(t, env, access.Config{MaxTokens: 100})
	b := startInstance(t, env, access.Config{MaxTokens: 100})
	tok := a.add(t, `{"name":"ops","role":"admin"}`)
	answers := func(in instance, want int) func() error {
		return func() error {
			if status, raw := in.call(t, tok.Secret, http.MethodGet, "/api/tokens", ""); status != want {
				return fmt.Errorf("got %d %s, want %d", status, raw, want)
			}
			return nil
		}
	}
	kafkatest.WaitFor(t, 5*time.Second, answers(b, http.StatusOK))
	if status, raw := a.call(t, bootstrapToken, http.MethodDelete, "/api/tokens/"+tok.ID, ""); status != http.StatusNoContent {
		t.Fatalf("DELETE: got %d %s, want 204", status, raw)
	}
	// The instance that revoked refuses at once.
	if err := answers(a, http.StatusUnauthorized)(); err != nil {
		t.Errorf("the revoking instance, at once: %v", err)
	}
	kafkatest.WaitFor(t, 5*time.Second, answers(b, http.StatusUnauthorized))
}

func TestExpiredTokenRefused(t *testing.T) {
	env := kafkatest.New(t, 1, 1<<20)
	in := startInstance(t, env, access.Config{MaxTokens: 100})
	tok := in.add(t, `{"name":"short","role":"admin","expires":"2s"}`)
	if status, raw := in.call(t, tok.Secret, http.MethodGet, "/api/tokens", ""); status != http.StatusOK {
		t.Fatalf("before expiry: got %d %s, want 200", status, raw)
	}
	kafkatest.WaitFor(t, 5*time.Second, func() error {
		if status, raw := in.call(t, tok.Secret, http.MethodGet, "/api/tokens", ""); status != http.StatusUnauthorized {
			return fmt.Errorf("got %d %s, want 401", status, raw)
		}
		return nil
	})
}

// TestRecordsThatDoNotDecodeAreSkipped: a record any writer of the topic
// put there that is no token stops no reader; it is counted once.
func TestRecordsThatDoNotDecodeAreSkipped(t *testing.T) {
	env := kafkatest.New(t, 1, 1<<20)
	cl := env.Client(t)
	for _, r := range []*kgo.Record{
		{Key: []byte("tok_garbage"), Value: []byte("{not json")},
		{Key: []byte("tok_other"), Value: []byte(`{"id":"tok_mismatch","name":"x","role":"admin","digest":"` + strings.Repeat("0", 64) + `"}`)},
		{Key: []byte("tok_role"), Value: []byte(`{"id":"tok_role","name":"x","role":"root","digest":"` + strings.Repeat("0", 64) + `"}`)},
	} {
		r.Topic = string(env.Names.Access)
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	in := startInstance(t, env, access.Config{MaxTokens: 100})
	tok := in.add(t, `{"name":"after","role":"admin"}`)
	if status, raw := in.call(t, tok.Secret, http.MethodGet, "/api/tokens", ""); status != http.StatusOK {
		t.Fatalf("a token written after records that do not decode: got %d %s, want 200", status, raw)
	}
	skipped := gathered(t, in.reg, "hookstream_registry_records_skipped_total")
	if skipped != 3 {
		t.Errorf("skipped: got %v, want 3", skipped)
	}
}

// gathered is the sum of the counters of family name on reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}
