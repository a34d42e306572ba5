package ingest_test

import (
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/hookstream/hookstream/ingest"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/topics"
)

// TestDeepJSONRefused: a body nested deeper than topics.MaxJSONDepth is
// refused with 400 before any parser recurses into it, whatever its
// content type and on a schema-validating source too; a body nested
// exactly that deep is accepted.
func TestDeepJSONRefused(t *testing.T) {
	env := kafkatest.New(t, 3, 1<<20)
	rc := newReceiver(t, env, ingest.Config{MaxBody: 1 << 20})
	deep := func(n int) string { return strings.Repeat(`[`, n) + strings.Repeat(`]`, n) }
	jsonType := http.Header{"Content-Type": {"application/json"}}
	const refused = "invalid JSON payload: nested deeper than 1000 levels"
	for _, tc := range []struct {
		name   string
		header http.Header
		body   string
	}{
		{"one level too deep", jsonType, deep(topics.MaxJSONDepth + 1)},
		{"a mebibyte of brackets", jsonType, strings.Repeat("[", 1<<20)},
		{"not declared JSON", http.Header{"Content-Type": {"text/plain"}}, deep(topics.MaxJSONDepth + 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := rc.post(t, "open", tc.header, tc.body)
			if resp.status != http.StatusBadRequest || resp.body["error"] != refused || resp.body["request_id"] == "" {
				t.Errorf("got %d %v, want 400 %q with a request id", resp.status, resp.body, refused)
			}
		})
	}
	if resp := rc.post(t, "open", jsonType, deep(topics.MaxJSONDepth)); resp.status != http.StatusAccepted {
		t.Errorf("nested exactly %d deep: got %d %v, want 202", topics.MaxJSONDepth, resp.status, resp.body)
	}
	if n := len(env.Records(t, env.Names.Ingest)); n != 1 {
		t.Errorf("records: got %d, want 1", n)
	}

	vr := newValidatingReceiver(t)
	if a := vr.postValidated(t, "strict", jsonType, `{"type":"order.created","x":`+deep(topics.MaxJSONDepth)+`}`); a.status != http.StatusBadRequest || a.Error != refused {
		t.Errorf("schema source: got %d %+v, want 400 %q", a.status, a, refused)
	}
}

// TestRequestIDValidated: a client's X-Request-ID is used only when it is
// at most 128 characters of [A-Za-z0-9._:-]; any other is replaced by a
// new id, in the answer, its header and the record alike.
func TestRequestIDValidated(t *testing.T) {
	env := kafkatest.New(t, 3, 64<<10)
	rc := newReceiver(t, env, ingest.Config{})
	valid := regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)
	longest := strings.Repeat("a", 128)
	for i, tc := range []struct {
		name, id string
		kept     bool
	}{
		{"plain", "req-1.A_b:2", true},
		{"128 characters", longest, true},
		{"129 characters", longest + "b", false},
		{"64 KiB", strings.Repeat("x", 64<<10), false},
		{"space", "a b", false},
		{"markup", "<script>", false},
		{"non-ASCII", "é", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"n":` + string(rune('0'+i)) + `}`
			resp := rc.post(t, "open", http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {tc.id}}, body)
			if resp.status != http.StatusAccepted {
				t.Fatalf("got %d %v, want 202", resp.status, resp.body)
			}
			got := resp.body["request_id"]
			if tc.kept && got != tc.id {
				t.Errorf("request id: got %q, want the client's %q", got, tc.id)
			}
			if !tc.kept && (got == tc.id || !valid.MatchString(got)) {
				t.Errorf("request id: got %.60q, want a new id of [A-Za-z0-9._:-]{1,128}", got)
			}
			if h := resp.header.Get("X-Request-Id"); h != got {
				t.Errorf("X-Request-Id: got %.60q, want the body's %q", h, got)
			}
			for _, r := range env.Records(t, env.Names.Ingest) {
				if string(r.Value) == body {
					if h := kafkatest.Headers(r)[topics.HeaderRequestID]; h != got {
						t.Errorf("record %s: got %.60q, want %q", topics.HeaderRequestID, h, got)
					}
				}
			}
		})
	}
}

// TestTrustedProxies: failed verifications are limited per client address;
// X-Forwarded-For names the client only when the connection comes from a
// trusted proxy (off by default: a client cannot choose its bucket).
func TestTrustedProxies(t *testing.T) {
	// flood fails verification as the client forwarded as addr until it
	// is limited, and returns the answer to one more failure forwarded as
	// other.
	flood := func(t *testing.T, rc *receiver, addr, other string) int {
		t.Helper()
		post := func(xff string) int {
			return rc.post(t, "billing", http.Header{"X-Forwarded-For": {xff}, "X-Github-Delivery": {"forged"}}, `{}`).status
		}
		for i := 0; post(addr) != http.StatusTooManyRequests; i++ {
			if i == 100 {
				t.Fatalf("%s: no 429 after 100 failed verifications", addr)
			}
		}
		return post(other)
	}
	t.Run("off by default", func(t *testing.T) {
		rc := newReceiver(t, kafkatest.New(t, 3, 64<<10), ingest.Config{})
		if got := flood(t, rc, "203.0.113.1", "203.0.113.2"); got != http.StatusTooManyRequests {
			t.Errorf("a forwarded address from an untrusted peer: got %d, want 429 (the connection's bucket)", got)
		}
	})
	t.Run("trusted proxy", func(t *testing.T) {
		rc := newReceiver(t, kafkatest.New(t, 3, 64<<10), ingest.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
		if got := flood(t, rc, "203.0.113.1", "203.0.113.2"); got != http.StatusUnauthorized {
			t.Errorf("another client behind the proxy: got %d, want 401 (its own bucket)", got)
		}
		if got := flood(t, rc, "198.51.100.7, 203.0.113.3", "198.51.100.8, 203.0.113.3"); got != http.StatusTooManyRequests {
			t.Errorf("an address prepended by the client: got %d, want 429 (the nearest untrusted address counts)", got)
		}
	})
}
