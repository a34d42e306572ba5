package admin_test

import (
	"crypto/tls"
	"log/slog"
	"net/http"
	"net/netip"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookstream/hookstream/admin"
)

// TestAddressed: the scheme and host a client addressed are the
// connection's, or those a proxy of TrustedProxies forwards; a peer
// outside those networks, or a forwarded value that is no scheme or no
// host, changes nothing.
func TestAddressed(t *testing.T) {
	s := admin.New(admin.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}},
		prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	cases := []struct {
		name, remote, proto, host string
		tls                       bool
		scheme, want              string
	}{
		{"no proxy", "192.0.2.1:5000", "", "", false, "http", "admin.internal:8081"},
		{"TLS, no proxy", "192.0.2.1:5000", "", "", true, "https", "admin.internal:8081"},
		{"untrusted peer", "192.0.2.1:5000", "https", "hookstream.example.com", false, "http", "admin.internal:8081"},
		{"untrusted peer over TLS", "192.0.2.1:5000", "http", "hookstream.example.com", true, "https", "admin.internal:8081"},
		{"trusted proxy", "10.1.2.3:5000", "https", "hookstream.example.com", false, "https", "hookstream.example.com"},
		{"trusted proxy, a list", "10.1.2.3:5000", "HTTPS , http", "hookstream.example.com:8443, internal", false, "https", "hookstream.example.com:8443"},
		{"trusted proxy, IPv6", "[fd00::1]:5000", "https", "", false, "https", "admin.internal:8081"},
		{"trusted proxy, IPv4-mapped", "[::ffff:10.0.0.1]:5000", "https", "", false, "https", "admin.internal:8081"},
		{"trusted proxy, no scheme", "10.1.2.3:5000", "javascript", "evil.example/x", false, "http", "admin.internal:8081"},
		{"trusted proxy, a host with credentials", "10.1.2.3:5000", "", "user@evil.example", false, "http", "admin.internal:8081"},
		{"malformed peer", "10.1.2.3", "https", "", false, "http", "admin.internal:8081"},
	}
	for _, tc := range cases {
		r, _ := http.NewRequest(http.MethodPost, "http://admin.internal:8081/ui/logout", nil)
		r.RemoteAddr = tc.remote
		if tc.tls {
			r.TLS = &tls.ConnectionState{}
		}
		if tc.proto != "" {
			r.Header.Set("X-Forwarded-Proto", tc.proto)
		}
		if tc.host != "" {
			r.Header.Set("X-Forwarded-Host", tc.host)
		}
		scheme, host := s.Addressed(r)
		if scheme != tc.scheme || host != tc.want {
			t.Errorf("%s: got %s://%s, want %s://%s", tc.name, scheme, host, tc.scheme, tc.want)
		}
	}
}
