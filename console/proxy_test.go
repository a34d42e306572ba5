package console_test

import (
	"net/http"
	"net/netip"
	"net/url"
	"testing"
)

// TestBehindTrustedProxy: behind a proxy that terminates TLS, listed in
// HOOKSTREAM_TRUSTED_PROXIES, the console's origin is the one the browser
// sent the request to, as X-Forwarded-Proto and X-Forwarded-Host name it:
// signing in and POSTs work, and the session cookie is Secure. A peer
// not listed is not believed: its X-Forwarded-* headers change nothing.
func TestBehindTrustedProxy(t *testing.T) {
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	h := serve(t, options{token: token, trustedProxies: loopback})
	u, _ := url.Parse(h.srv.URL)
	cases := []struct {
		name   string
		header http.Header
	}{
		{"X-Forwarded-Proto, the Host kept", http.Header{"X-Forwarded-Proto": {"https"}, "Origin": {"https://" + u.Host}}},
		{"X-Forwarded-Proto and X-Forwarded-Host", http.Header{"X-Forwarded-Proto": {"https"}, "X-Forwarded-Host": {"hookstream.example.com"},
			"Origin": {"https://hookstream.example.com"}}},
		{"the default port", http.Header{"X-Forwarded-Proto": {"HTTPS, http"}, "X-Forwarded-Host": {"hookstream.example.com:443"},
			"Origin": {"https://hookstream.example.com"}}},
	}
	for _, tc := range cases {
		b := h.browser(t)
		b.header = tc.header
		a := b.post("/ui/login", url.Values{"token": {token}, "next": {"/ui/"}})
		if a.status != http.StatusSeeOther {
			t.Fatalf("%s: sign in: got %d, want 303:\n%s", tc.name, a.status, a.body)
		}
		if c := (&http.Response{Header: a.header}).Cookies(); len(c) != 1 || !c[0].Secure {
			t.Errorf("%s: the session cookie is not Secure: %v", tc.name, c)
		}
		// The test client sends the Secure cookie over plain HTTP only if
		// told: the proxy's side of the connection is HTTP.
		csrf := b.csrfWith(a.header)
		if a := b.postWith(a.header, "/ui/logout", url.Values{"csrf": {csrf}}); a.status != http.StatusSeeOther {
			t.Errorf("%s: POST: got %d, want 303:\n%s", tc.name, a.status, a.body)
		}
	}
	// From a trusted proxy, an Origin of the connection's own scheme is
	// now another origin.
	b := h.browser(t)
	b.header = http.Header{"X-Forwarded-Proto": {"https"}, "Origin": {h.srv.URL}}
	if a := b.post("/ui/login", url.Values{"token": {token}}); a.status != http.StatusForbidden {
		t.Errorf("trusted proxy, http Origin for an https request: got %d, want 403", a.status)
	}

	untrusted := serve(t, options{token: token, trustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, env: h.env})
	u, _ = url.Parse(untrusted.srv.URL)
	b = untrusted.browser(t)
	for _, header := range []http.Header{
		{"X-Forwarded-Proto": {"https"}, "Origin": {"https://" + u.Host}},
		{"X-Forwarded-Proto": {"https"}, "X-Forwarded-Host": {"hookstream.example.com"}, "Origin": {"https://hookstream.example.com"}},
	} {
		b.header = header
		if a := b.post("/ui/login", url.Values{"token": {token}}); a.status != http.StatusForbidden {
			t.Errorf("untrusted peer with %v: got %d, want 403", header, a.status)
		}
	}
	b.header = http.Header{"X-Forwarded-Proto": {"https"}, "X-Forwarded-Host": {"hookstream.example.com"}, "Origin": {untrusted.srv.URL}}
	a := b.post("/ui/login", url.Values{"token": {token}})
	if a.status != http.StatusSeeOther {
		t.Fatalf("untrusted peer, its own origin: got %d, want 303", a.status)
	}
	if c := (&http.Response{Header: a.header}).Cookies(); len(c) != 1 || c[0].Secure {
		t.Errorf("untrusted peer: the session cookie is Secure over plain HTTP")
	}
}

// sessionCookie is the session cookie a sign-in answer set.
func sessionCookie(t *testing.T, header http.Header) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: header}).Cookies() {
		if c.Name == "hookstream_session" {
			return c
		}
	}
	t.Fatal("no session cookie")
	return nil
}

// csrfWith returns the overview's CSRF token, sending the session cookie
// signIn set (a Secure cookie the jar keeps for https only).
func (b *browser) csrfWith(signIn http.Header) string {
	b.t.Helper()
	a := b.doWith(sessionCookie(b.t, signIn), http.MethodGet, "/ui/", nil)
	m := csrfMeta.FindStringSubmatch(a.body)
	if a.status != http.StatusOK || m == nil {
		b.t.Fatalf("GET /ui/: got %d without a CSRF field", a.status)
	}
	return m[1]
}

func (b *browser) postWith(signIn http.Header, path string, form url.Values) answer {
	return b.doWith(sessionCookie(b.t, signIn), http.MethodPost, path, form)
}
