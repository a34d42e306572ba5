package webhook_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hookstream/hookstream/signature"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/webhook"
)

// TestClientRequireHTTPS: the delivery client refuses an http target
// before dialing it.
func TestClientRequireHTTPS(t *testing.T) {
	c := webhook.New(webhook.Config{RequireHTTPS: true, AllowPrivate: true, Timeout: 5 * time.Second})
	h, err := subscriptions.Compile(subscriptions.Subscription{Secret: signature.NewSecret()}).Header("e1", []byte(`{}`), time.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	res := c.Deliver(context.Background(), webhook.Delivery{URL: "http://192.0.2.1/hook", Header: h, Body: []byte(`{}`)})
	if res.Err == nil || !strings.Contains(res.Err.Error(), "must be https") || res.Status != 0 {
		t.Errorf("Deliver to http: got %+v, want refused as not https", res)
	}
}

// TestVerifyEndpoint: a verification request is signed like a delivery
// and passes only when the endpoint answers 2xx echoing the challenge.
func TestVerifyEndpoint(t *testing.T) {
	secret := signature.NewSecret()
	key, err := signature.DecodeSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	echo := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if _, err := signature.VerifyRequest(r.Header, [][]byte{key}, body, time.Now(), time.Minute); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var req webhook.VerificationRequest
		if err := json.Unmarshal(body, &req); err != nil || req.Type != webhook.VerificationType || req.Challenge == "" {
			http.Error(w, "not a verification", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"challenge": req.Challenge})
	}
	tests := []struct {
		name    string
		handler http.HandlerFunc
		secret  string
		want    string // "" for success
	}{
		{"echoes", echo, secret, ""},
		{"plain echo", func(w http.ResponseWriter, r *http.Request) {
			var req webhook.VerificationRequest
			_ = json.NewDecoder(r.Body).Decode(&req)
			_, _ = io.WriteString(w, req.Challenge)
		}, secret, ""},
		{"answers without the challenge", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }, secret, "did not echo the challenge"},
		{"wrong challenge", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, `{"challenge":"nope"}`) }, secret, "did not echo the challenge"},
		{"refuses the signature", echo, signature.NewSecret(), "status 401"},
		{"server error", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) }, secret, "status 500"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.handler)
			defer srv.Close()
			k, err := signature.DecodeSecret(tt.secret)
			if err != nil {
				t.Fatal(err)
			}
			c := webhook.New(webhook.Config{AllowPrivate: true, Timeout: 5 * time.Second})
			err = c.Verify(context.Background(), srv.URL, [][]byte{k})
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Verify: %v, want success", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Verify: got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
