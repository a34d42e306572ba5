package console

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
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
// cookie holding a random id, an expiry, the token it was signed in with
// sealed (AES-GCM, the id as additional data), and their MAC, under keys
// derived from the admin token: no session table is needed, every session
// dies when the admin token changes, and the cookie never holds a token in
// clear. Each request unseals the token and judges it again as the API
// judges a bearer token (admin.Server.Identify), so a
// session ends as soon as its token is revoked or expires (about a
// second, 5 s at most) and acts with the token's role as it is now. The
// token is sealed, not named by its id or digest, because the judge of
// access tokens takes a token (access.Service.Authenticate), as the API's
// guard does: one judge, no second lookup to keep in step with it.
// Signed-out ids are remembered until they expire (at most maxRevoked).
// Without a token the key is random per process, sessions are issued to
// any visitor the guard lets through (a loopback Host, no page of another
// site), as the local admin, and they die with the process.
type access struct {
	token []byte // empty: no token, loopback only
	key   []byte
	seal  cipher.AEAD
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
	a.key = make([]byte, 32)
	sealKey := make([]byte, 32)
	if token == "" {
		_, _ = rand.Read(a.key) // crypto/rand never fails on Linux
		_, _ = rand.Read(sealKey)
	} else {
		a.key, sealKey = derive(token, "hookstream console session v1"), derive(token, "hookstream console seal v1")
	}
	block, _ := aes.NewCipher(sealKey) // a 32-byte key: never fails
	a.seal, _ = cipher.NewGCM(block)   // never fails for AES
	return a
}

// derive is a key for purpose derived from the admin token.
func derive(token, purpose string) []byte {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte(purpose))
	return m.Sum(nil)
}

// session is a signed-in browser: its id, expiry and the identity of its
// token, judged for this request.
type session struct {
	id      string
	expires time.Time
	who     admin.Identity
}

func (a *access) mac(parts ...string) string {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(strings.Join(parts, ".")))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// identify judges a presented token as the API's guard judges a bearer
// token (admin.Server.Identify); without an admin token every visitor is
// the local admin.
func (a *access) identify(token string) (admin.Identity, bool) {
	if len(a.token) == 0 {
		return admin.Local, true
	}
	return a.srv.Identify(token)
}

// newSession returns a session of who, signed in with token, and its
// cookie value.
func (a *access) newSession(who admin.Identity, token string) (session, string) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	s := session{id: base64.RawURLEncoding.EncodeToString(b[:]), expires: a.now().Add(SessionTTL).Truncate(time.Second), who: who}
	nonce := make([]byte, a.seal.NonceSize())
	_, _ = rand.Read(nonce)
	sealed := base64.RawURLEncoding.EncodeToString(a.seal.Seal(nonce, nonce, []byte(token), []byte(s.id)))
	exp := strconv.FormatInt(s.expires.Unix(), 10)
	return s, "v2." + s.id + "." + exp + "." + sealed + "." + a.mac("v2", s.id, exp, sealed)
}

// parse returns the session of a cookie value, ok false unless its MAC
// holds, it has not expired, was not signed out, and its token is still
// accepted.
func (a *access) parse(v string) (session, bool) {
	parts := strings.Split(v, ".")
	if len(parts) != 5 || parts[0] != "v2" || len(v) > 1024 {
		return session{}, false
	}
	if !hmac.Equal([]byte(parts[4]), []byte(a.mac("v2", parts[1], parts[2], parts[3]))) {
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
	if gone {
		return session{}, false
	}
	sealed, err := base64.RawURLEncoding.DecodeString(parts[3])
	if err != nil || len(sealed) < a.seal.NonceSize() {
		return session{}, false
	}
	n := a.seal.NonceSize()
	token, err := a.seal.Open(nil, sealed[:n], sealed[n:], []byte(s.id))
	if err != nil {
		return session{}, false
	}
	var ok bool
	s.who, ok = a.identify(string(token))
	return s, ok
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
	s, v := a.newSession(admin.Local, "")
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
		admin.SetRequestID(c)
		if err := u.srv.RefuseCrossSite(c.Request()); err != nil {
			u.refused(c, admin.Identity{}, err)
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
