package admin

import (
	"net/http"
	"net/netip"
	"strings"
)

// Addressed returns the scheme ("http" or "https") and the host[:port] a
// client sent r to: those of the connection (TLS or not, Host), or, when
// r comes from a proxy of Config.TrustedProxies, those its
// X-Forwarded-Proto and X-Forwarded-Host name (the first of a list: the
// client's side of the first proxy). A value that is no scheme or no host
// is ignored, and so are both headers from any other peer.
func (s *Server) Addressed(r *http.Request) (scheme, host string) {
	scheme, host = "http", r.Host
	if r.TLS != nil {
		scheme = "https"
	}
	if !FromProxy(r, s.cfg.TrustedProxies) {
		return scheme, host
	}
	if v := strings.ToLower(firstValue(r.Header.Get("X-Forwarded-Proto"))); v == "http" || v == "https" {
		scheme = v
	}
	if v := firstValue(r.Header.Get("X-Forwarded-Host")); v != "" && !strings.ContainsAny(v, "/\\@?# \t") {
		host = v
	}
	return scheme, host
}

// FromProxy reports whether the connection r came on is from one of
// networks: a proxy whose forwarding headers are believed.
func FromProxy(r *http.Request, networks []netip.Prefix) bool {
	if len(networks) == 0 {
		return false
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	addr := ap.Addr().Unmap()
	for _, n := range networks {
		if n.Contains(addr) {
			return true
		}
	}
	return false
}

// firstValue is the first of a comma-separated header value, trimmed.
func firstValue(v string) string {
	v, _, _ = strings.Cut(v, ",")
	return strings.TrimSpace(v)
}
