package admin

import (
	"net/http"
	"net/netip"
	"net/url"
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

// Origin is the origin a client sent r to (Addressed), as a browser's
// Origin header names it: scheme://host[:port], lowercase, without the
// scheme's default port.
func (s *Server) Origin(r *http.Request) string { return origin(s.Addressed(r)) }

// OriginOf is the origin of a URL (an Origin or Referer value) as Origin
// writes it, "" when it has none (an opaque origin, "null").
func OriginOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ""
	}
	return origin(u.Scheme, u.Host)
}

// origin is scheme://host[:port], lowercase, without the scheme's default
// port.
func origin(scheme, host string) string {
	host = strings.ToLower(host)
	switch {
	case scheme == "http" && strings.HasSuffix(host, ":80"):
		host = strings.TrimSuffix(host, ":80")
	case scheme == "https" && strings.HasSuffix(host, ":443"):
		host = strings.TrimSuffix(host, ":443")
	}
	return scheme + "://" + host
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
