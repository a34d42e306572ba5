package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
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
)

// access signs browsers in and checks every request. A session is a
// cookie holding a random id, an expiry and their MAC under a key derived
// from the admin token, so no session table is needed and every session
// dies when the token changes; signed-out ids are remembered until they
// expire (at most maxRevoked). Without a token the key is random per
// process, sessions are issued to any visitor the guard lets through (a
// loopback Host, no page of another site), and they die with the
// process.
type access struct {
	token []byte // empty: no token, loopback only
	key   []byte
	// srv is the listener: the origin a client sent a request to
	// (behind a trusted proxy, what it forwards) and the guard.
	srv *admin.Server

	mu      sync.Mutex
	revoked map[string]time.Time // session id -> expiry
	now     func() time.Time
}

func newAccess(srv *admin.Server) *access {
	token := srv.Config().Token
	a := &access{token: []byte(token), srv: srv, revoked: make(map[string]time.Time), now: time.Now}
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

// session returns the request's session. Without a token a visitor
// without one is issued a session cookie (the guard has refused any other
// than a local client or a page of the console); with a token, ok false
// means signed out.
func (a *access) session(c *echo.Context) (s session, ok bool) {
	if ck, err := c.Request().Cookie(sessionCookie); err == nil {
		if s, ok := a.parse(ck.Value); ok {
			return s, true
		}
	}
	if len(a.token) > 0 {
		return session{}, false
	}
	s, v := a.newSession()
	a.setCookie(c, v, s.expires)
	return s, true
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

// guard refuses, before any handler runs and before a session is looked
// at or issued, a request a web page of another site or origin sent:
// admin.Server.RefuseCrossSite, the guard of /api without a token (a
// cross-site or same-site Sec-Fetch-Site, an Origin not the console's
// own, and without a token a Host that is not loopback). It holds for
// every method, with a token or without: a cross-site request carries no
// SameSite=Strict cookie, but a page of the same site (another port, a
// sibling host name) does. Top-level navigations from another site are
// refused too: such a page cannot read the console, but it would still
// start a live tail or a subscription's attempts scan, and one rule for
// every request leaves no list of harmless pages to keep right (a link
// from elsewhere is opened from the address bar or a bookmark).
func (u *Console) guard(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		if err := u.srv.RefuseCrossSite(c.Request()); err != nil {
			return u.fail(c, nil, err)
		}
		return next(c)
	}
}

// sameOrigin refuses a state-changing request no page of the console
// sent. Beyond the guard (which has refused a foreign Origin and a
// cross-site or same-site Sec-Fetch-Site) it refuses a Sec-Fetch-Site
// other than same-origin (none: typed in), and, when neither Origin nor
// Sec-Fetch-Site is sent, a Referer of another origin or none (another
// port of the same host is another origin; behind a trusted proxy, the
// scheme and host it forwards).
func (a *access) sameOrigin(r *http.Request) error {
	site := r.Header.Get("Sec-Fetch-Site")
	if site != "" && site != "same-origin" {
		return errCrossOrigin
	}
	if site == "" && r.Header.Get("Origin") == "" && admin.OriginOf(r.Header.Get("Referer")) != a.srv.Origin(r) {
		return errCrossOrigin
	}
	return nil
}

// secure reports whether the browser sent r over HTTPS: its cookies are
// then Secure.
func (a *access) secure(r *http.Request) bool {
	scheme, _ := a.srv.Addressed(r)
	return scheme == "https"
}

// errSignedOut sends a signed-out browser to the sign-in page.
var errSignedOut = errors.New("signed out")
