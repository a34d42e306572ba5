package admin_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/attempts"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
)

// guardedAPI serves the subscription API on a loopback listener, with the
// bearer token tok (empty: none), and no dispatcher.
func guardedAPI(t *testing.T, tok string) *httptest.Server {
	t.Helper()
	env := kafkatest.New(t, 1, 1<<20)
	cl := env.Client(t)
	log := kafkatest.Logger(t)
	reg := prometheus.NewRegistry()
	s := admin.New(admin.Config{Token: tok}, reg, log)
	subscriptions.New(subscriptions.NewRegistry(env.ClusterOf(cl), log), attempts.NewTally(env.ClusterOf(cl), log), "").Mount(s)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv
}

// send makes one request as a browser or curl would, and returns the
// status and the "error" of the JSON answer.
func send(t *testing.T, srv *httptest.Server, method, path string, header http.Header, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if h := header.Get("Host"); h != "" {
		req.Host = h
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var answer struct {
		Error string `json:"error"`
	}
	if resp.StatusCode >= 400 {
		if err := json.Unmarshal(raw, &answer); err != nil {
			t.Fatalf("%s %s: error answer %q is not JSON: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, answer.Error
}

// subscriptionCount lists the subscriptions with a plain local request.
func subscriptionCount(t *testing.T, srv *httptest.Server, header http.Header) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/subscriptions", nil)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var subs []subscriptions.Subscription
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("list subscriptions: got %d, want 200", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&subs); err != nil {
		t.Fatal(err)
	}
	return len(subs)
}

// postCase is one POST of create and the answer it must get.
type postCase struct {
	name   string
	header http.Header
	status int
	err    string
}

// postAll sends create once per case and checks each answer.
func postAll(t *testing.T, srv *httptest.Server, cases []postCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			status, msg := send(t, srv, http.MethodPost, "/api/subscriptions", tt.header, create)
			if status != tt.status || msg != tt.err {
				t.Errorf("got %d %q, want %d %q", status, msg, tt.status, tt.err)
			}
		})
	}
}

// create is what a hostile page posts: a subscription replaying every
// event to an outside URL.
const create = `{"url":"https://evil.example/collect","from":"earliest"}`

// TestNoWebPageDrivesTheAPI: without a token, the API refuses what a
// browser on another site or origin can send (a simple text/plain POST, a
// DNS rebinding Host, an Origin not its own, another port of localhost
// included, a cross-site or same-site Sec-Fetch-Site), creates nothing,
// and still serves a local JSON client and a page of its own origin.
func TestNoWebPageDrivesTheAPI(t *testing.T) {
	srv := guardedAPI(t, "")
	jsonType := http.Header{"Content-Type": {"application/json"}}
	with := func(k, v string) http.Header {
		h := jsonType.Clone()
		h.Set(k, v)
		return h
	}
	postAll(t, srv, []postCase{
		{"text/plain form of a page", http.Header{"Content-Type": {"text/plain"}}, 415, "request body must be application/json"},
		{"form post", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, 415, "request body must be application/json"},
		{"no content type", nil, 415, "request body must be application/json"},
		{"DNS rebinding host", with("Host", "evil.example"), 403, `host "evil.example" is not loopback; set HOOKSTREAM_ADMIN_TOKEN to serve other names`},
		{"rebinding host with port", with("Host", "evil.example:8081"), 403, `host "evil.example:8081" is not loopback; set HOOKSTREAM_ADMIN_TOKEN to serve other names`},
		{"cross-site origin", with("Origin", "https://evil.example"), 403, "cross-site request refused"},
		{"opaque origin", with("Origin", "null"), 403, "cross-site request refused"},
		{"origin posing as loopback", with("Origin", "http://127.0.0.1.evil.example"), 403, "cross-site request refused"},
		{"page on another loopback origin", with("Origin", "http://localhost:3000"), 403, "cross-site request refused"},
		{"fetch metadata cross-site", with("Sec-Fetch-Site", "cross-site"), 403, "cross-site request refused"},
		{"fetch metadata same-site", with("Sec-Fetch-Site", "same-site"), 403, "cross-site request refused"},
	})
	t.Run("rebinding host cannot read", func(t *testing.T) {
		if status, _ := send(t, srv, http.MethodGet, "/api/subscriptions", http.Header{"Host": {"evil.example"}}, ""); status != 403 {
			t.Errorf("got %d, want 403", status)
		}
	})
	if n := subscriptionCount(t, srv, nil); n != 0 {
		t.Fatalf("subscriptions after refused requests: got %d, want 0", n)
	}

	local := []struct {
		name   string
		header http.Header
	}{
		{"curl", jsonType},
		{"localhost with port", with("Host", "localhost:8081")},
		{"IPv6 loopback", with("Host", "[::1]:8081")},
		{"other 127/8 address", with("Host", "127.0.0.2")},
		{"page of its own origin", with("Origin", srv.URL)},
		{"same-origin fetch", with("Sec-Fetch-Site", "same-origin")},
	}
	for i, tt := range local {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"url":"https://subscriber.example/hook","description":"` + tt.name + `"}`
			if status, msg := send(t, srv, http.MethodPost, "/api/subscriptions", tt.header, body); status != 201 {
				t.Fatalf("got %d %q, want 201", status, msg)
			}
			if n := subscriptionCount(t, srv, nil); n != i+1 {
				t.Errorf("subscriptions: got %d, want %d", n, i+1)
			}
		})
	}
}

// TestTokenGuardsTheAPI: with a token the bearer is required and is the
// guard (a browser cannot attach it to a cross-site request without a
// preflight the API never approves), so other host names are served; the
// body must still be JSON.
func TestTokenGuardsTheAPI(t *testing.T) {
	srv := guardedAPI(t, token)
	bearer := http.Header{"Authorization": {"Bearer " + token}, "Content-Type": {"application/json"}}
	postAll(t, srv, []postCase{
		{"no token from loopback", http.Header{"Content-Type": {"application/json"}}, 401, "missing or invalid bearer token"},
		{"text/plain with the token", http.Header{"Authorization": {"Bearer " + token}, "Content-Type": {"text/plain"}}, 415, "request body must be application/json"},
		{"token on a non-loopback name", http.Header{"Authorization": {"Bearer " + token}, "Content-Type": {"application/json"}, "Host": {"hookstream-admin.internal:8081"}}, 201, ""},
	})
	if n := subscriptionCount(t, srv, bearer); n != 1 {
		t.Errorf("subscriptions: got %d, want only the one sent with the token", n)
	}
}
