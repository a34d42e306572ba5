package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/admin"
)

// SessionTTL is how long a console session lasts.
const SessionTTL = 12 * time.Hour

// Cookie names; both are scoped to /ui.
const (
	sessionCookie = "hookstream_session"
	flashCookie   = "hookstream_flash"
)

// csrfField is the form field, and csrfHeader the header a script sends
// instead, that carries a session's CSRF token.
const (
	csrfField  = "csrf"
	csrfHeader = "X-CSRF-Token"
)

// maxRevoked bounds the signed-out sessions remembered until they expire.
const maxRevoked = 4096

// Refusals.
var (
	errCrossOrigin = echo.NewHTTPError(http.StatusForbidden, "cross-origin request refused")
	errCSRF        = echo.NewHTTPError(http.StatusForbidden, "missing or invalid CSRF token: reload the page and try again")
	errNotLoopback = echo.NewHTTPError(http.StatusForbidden, "this host name is not loopback; set HOOKSTREAM_ADMIN_TOKEN to serve the console on other names")
)

// access signs browsers in and checks every request. A session is a
// cookie holding a random id, an expiry and their MAC under a key derived
// from the admin token, so no session table is needed and every session
// dies when the token changes; signed-out ids are remembered until they
// expire (at most maxRevoked). Without a token the key is random per
// process, sessions are issued to any loopback-Host visitor, and they die
// with the process.
type access struct {
	token []byte // empty: no token, loopback only
	key   []byte
	// addressed is the scheme and host a client sent a request to
	// (admin.Server.Addressed: behind a trusted proxy, what it forwards).
	addressed func(*http.Request) (scheme, host string)

	mu      sync.Mutex
	revoked map[string]time.Time // session id -> expiry
	now     func() time.Time
}

func newAccess(token string, addressed func(*http.Request) (scheme, host string)) *access {
	a := &access{token: []byte(token), addressed: addressed, revoked: make(map[string]time.Time), now: time.Now}
	if token == "" {
		a.key = make([]byte, 32)
		_, _ = rand.Read(a.key) // crypto/rand never fails on Linux
	} else {
		m := hmac.New(sha256.New, []byte(token))
		m.Write([]byte("hookstream console session v1"))
		a.key = m.Sum(nil)
	}
	return a
}

// session is a signed-in browser.
type session struct {
	id      string
	expires time.Time
}

func (a *access) mac(parts ...string) string {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(strings.Join(parts, ".")))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// newSession returns a session and its cookie value.
func (a *access) newSession() (session, string) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	s := session{id: base64.RawURLEncoding.EncodeToString(b[:]), expires: a.now().Add(SessionTTL).Truncate(time.Second)}
	exp := strconv.FormatInt(s.expires.Unix(), 10)
	return s, "v1." + s.id + "." + exp + "." + a.mac("v1", s.id, exp)
}

// parse returns the session of a cookie value, ok false unless its MAC
// holds, it has not expired and was not signed out.
func (a *access) parse(v string) (session, bool) {
	parts := strings.Split(v, ".")
	if len(parts) != 4 || parts[0] != "v1" || len(v) > 256 {
		return session{}, false
	}
	if !hmac.Equal([]byte(parts[3]), []byte(a.mac("v1", parts[1], parts[2]))) {
		return session{}, false
	}
	exp, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return session{}, false
	}
	s := session{id: parts[1], expires: time.Unix(exp, 0)}
	if !a.now().Before(s.expires) {
		return session{}, false
	}
	a.mu.Lock()
	_, gone := a.revoked[s.id]
	a.mu.Unlock()
	return s, !gone
}

// csrf is the CSRF token of s.
func (a *access) csrf(s session) string { return a.mac("csrf", s.id) }

// revoke remembers s as signed out until it expires; at the bound the
// remembered session that expires first is forgotten.
func (a *access) revoke(s session) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	for id, exp := range a.revoked {
		if !now.Before(exp) {
			delete(a.revoked, id)
		}
	}
	if len(a.revoked) >= maxRevoked {
		first, firstExp := "", time.Time{}
		for id, exp := range a.revoked {
			if first == "" || exp.Before(firstExp) {
				first, firstExp = id, exp
			}
		}
		delete(a.revoked, first)
	}
	a.revoked[s.id] = s.expires
}

// checkToken compares a submitted token with the admin token in constant
// time, their lengths included (it compares their SHA-256 digests).
func (a *access) checkToken(got string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256(a.token)
	return len(a.token) > 0 && subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// session returns the request's session. Without a token a loopback-Host
// visitor without one is issued a session cookie; with a token, ok false
// means signed out.
func (a *access) session(c *echo.Context) (s session, ok bool, err error) {
	r := c.Request()
	if len(a.token) == 0 && !admin.LoopbackHost(r.Host) {
		return session{}, false, errNotLoopback
	}
	if ck, err := r.Cookie(sessionCookie); err == nil {
		if s, ok := a.parse(ck.Value); ok {
			return s, true, nil
		}
	}
	if len(a.token) > 0 {
		return session{}, false, nil
	}
	s, v := a.newSession()
	a.setCookie(c, v, s.expires)
	return s, true, nil
}

// setCookie sets the session cookie (value empty: deletes it).
func (a *access) setCookie(c *echo.Context, value string, expires time.Time) {
	ck := &http.Cookie{
		Name: sessionCookie, Value: value, Path: admin.UIPrefix,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: a.secure(c.Request()),
	}
	if value == "" {
		ck.MaxAge = -1
	} else {
		ck.Expires = expires
		ck.MaxAge = int(time.Until(expires).Seconds())
	}
	c.SetCookie(ck)
}

// checkPost refuses a state-changing request from another origin or
// without the session's CSRF token.
func (a *access) checkPost(c *echo.Context, s session) error {
	if err := a.sameOrigin(c.Request()); err != nil {
		return err
	}
	got := c.Request().Header.Get(csrfHeader)
	if got == "" {
		got = c.FormValue(csrfField)
	}
	if !hmac.Equal([]byte(got), []byte(a.csrf(s))) {
		return errCSRF
	}
	return nil
}

// sameOrigin refuses a request a browser sent from another origin: an
// Origin other than the scheme://host:port the request was sent to
// (another port of the same host is another origin; behind a trusted
// proxy, the scheme and host it forwards), a Sec-Fetch-Site other than
// same-origin, and, when neither header is sent, a Referer of another
// origin or none.
func (a *access) sameOrigin(r *http.Request) error {
	own := origin(a.addressed(r))
	origin := r.Header.Get("Origin")
	site := r.Header.Get("Sec-Fetch-Site")
	if origin != "" && normalOrigin(origin) != own {
		return errCrossOrigin
	}
	if site != "" && site != "same-origin" {
		return errCrossOrigin
	}
	if origin == "" && site == "" {
		if ref := r.Header.Get("Referer"); ref == "" || normalOrigin(ref) != own {
			return errCrossOrigin
		}
	}
	return nil
}

// secure reports whether the browser sent r over HTTPS: its cookies are
// then Secure.
func (a *access) secure(r *http.Request) bool {
	scheme, _ := a.addressed(r)
	return scheme == "https"
}

// normalOrigin is the origin of a URL (an Origin or Referer value), ""
// when it has none.
func normalOrigin(raw string) string {
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

// errSignedOut sends a signed-out browser to the sign-in page.
var errSignedOut = errors.New("signed out")
