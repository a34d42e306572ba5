package events

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/admin"
)

// Story queries between instances. An instance whose processor does not
// own an event's partition asks the owner, at the admin address the owner
// advertises in its group client id. Any Kafka client allowed to join the
// processor group can advertise any address, so the asking instance never
// sends its caller's credential: it signs the query with a key derived
// from HOOKSTREAM_ADMIN_TOKEN; the owner answers only a signed, recent
// query and signs its answer, bound to the query; the asking instance
// shows only an answer whose signature it verified, and follows no
// redirect. Without a token the instances share no secret: none forwards,
// and none answers a forwarded query.
//
// The query names the caller's role and team in its signed URI
// (peerQuery), and the owner tells the story as that caller may read it:
// a captured query replayed with a wider role or another team no longer
// matches its signature.

const (
	// peerEventsPrefix is the route of forwarded story queries, outside
	// /api: the caller is an instance, authenticated by its signature.
	peerEventsPrefix = admin.PeerPrefix + peerEventsRoute
	// peerEventsRoute is that route in the admin listener's Peer group.
	peerEventsRoute = "/events/"
	// headerPeerTime is a forwarded query's signing time, in Unix seconds.
	headerPeerTime = "X-Hookstream-Peer-Time"
	// headerPeerSignature is the base64 HMAC-SHA256 of a forwarded query,
	// or of the answer to one.
	headerPeerSignature = "X-Hookstream-Peer-Signature"
	// headerServedBy names the instance that answered a forwarded query.
	headerServedBy = "X-Hookstream-Served-By"
	// peerTolerance is how far a query's signing time may be from the
	// answering instance's clock.
	peerTolerance = time.Minute
	// maxPeerAnswer bounds the answer read from another instance.
	maxPeerAnswer = 1 << 20
	// peerKeyLabel derives the signing key from the admin token, so the
	// token itself never signs anything an instance sends.
	peerKeyLabel = "hookstream story query signing v1"
)

// peerQuery is the URI of the story query for key forwarded on behalf of
// who: its role and team, never its credential.
func peerQuery(key string, who admin.Identity) string {
	return peerEventsPrefix + url.PathEscape(key) + "?" + url.Values{"role": {string(who.Role)}, "team": {who.Team}}.Encode()
}

// peerCaller is the caller a forwarded story query names (peerQuery).
func peerCaller(q url.Values) (admin.Identity, error) {
	who := admin.Identity{TokenID: "peer", Name: "forwarded story query", Role: admin.Role(q.Get("role")), Team: q.Get("team")}
	if !who.In(admin.Roles) || (who.Role == admin.Team) != (who.Team != "") {
		return admin.Identity{}, echo.NewHTTPError(http.StatusBadRequest, "forwarded story query names no valid role and team: upgrade every instance to the same hookstream version")
	}
	return who, nil
}

// peerKey signs and verifies story queries between instances; nil when
// no admin token is set.
type peerKey []byte

func newPeerKey(token string) peerKey {
	if token == "" {
		return nil
	}
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte(peerKeyLabel))
	return m.Sum(nil)
}

// mac is the HMAC of parts, each ended by a newline; only the last may
// hold one.
func (k peerKey) mac(parts ...string) []byte {
	m := hmac.New(sha256.New, k)
	for _, p := range parts {
		io.WriteString(m, p)
		m.Write([]byte{'\n'})
	}
	return m.Sum(nil)
}

func (k peerKey) sign(parts ...string) string {
	return base64.StdEncoding.EncodeToString(k.mac(parts...))
}

// verify reports whether sig signs parts, in constant time.
func (k peerKey) verify(sig string, parts ...string) bool {
	got, err := base64.StdEncoding.DecodeString(sig)
	return err == nil && hmac.Equal(got, k.mac(parts...))
}

// ask sends the story query uri to the instance at addr and returns its
// answer, verified.
func (k peerKey) ask(ctx context.Context, addr, uri string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+uri, nil)
	if err != nil || req.URL.Host != addr {
		return 0, nil, fmt.Errorf("advertises %q, which is no host:port", addr)
	}
	at := strconv.FormatInt(time.Now().Unix(), 10)
	sig := k.sign("query", req.Method, req.URL.RequestURI(), at)
	req.Header.Set(headerPeerTime, at)
	req.Header.Set(headerPeerSignature, sig)
	noRedirects := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirects.Do(req)
	if err != nil {
		if host, _, _ := net.SplitHostPort(addr); admin.LoopbackHost(host) {
			return 0, nil, fmt.Errorf("did not answer (%w); it advertises a loopback address, which only its own host reaches: set HOOKSTREAM_ADMIN_ADVERTISED_ADDR on every instance", errors.Unwrap(err))
		}
		return 0, nil, fmt.Errorf("did not answer: %w", errors.Unwrap(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPeerAnswer+1))
	switch {
	case err != nil:
		return 0, nil, fmt.Errorf("answer cut: %w", err)
	case len(body) > maxPeerAnswer:
		return 0, nil, fmt.Errorf("answered more than %d bytes", maxPeerAnswer)
	case !k.verify(resp.Header.Get(headerPeerSignature), "answer", sig, strconv.Itoa(resp.StatusCode), string(body)):
		return 0, nil, fmt.Errorf("answered %d without a valid signature: it is no instance sharing this HOOKSTREAM_ADMIN_TOKEN, and its answer is not shown", resp.StatusCode)
	}
	return resp.StatusCode, body, nil
}

// peerOnly serves a forwarded story query: only one signed with this
// deployment's key within the tolerance, and signs the answer, bound to
// the query's signature.
func (a *StoryQuery) peerOnly(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		if a.peer == nil {
			return echo.NewHTTPError(http.StatusForbidden, "this instance has no HOOKSTREAM_ADMIN_TOKEN: it answers no forwarded story query")
		}
		r := c.Request()
		at, sig := r.Header.Get(headerPeerTime), r.Header.Get(headerPeerSignature)
		if !a.peer.verify(sig, "query", r.Method, r.RequestURI, at) {
			return echo.NewHTTPError(http.StatusUnauthorized, "forwarded story query not signed with this deployment's HOOKSTREAM_ADMIN_TOKEN")
		}
		// From here the query is authentic: its answer, a refusal too, is
		// signed, so the asking instance shows it.
		w := &bufferedAnswer{ResponseWriter: c.Response()}
		var err error
		unix, _ := strconv.ParseInt(at, 10, 64) // signed: a number the asking instance wrote
		if skew := time.Since(time.Unix(unix, 0)); skew.Abs() > peerTolerance {
			err = echo.NewHTTPError(http.StatusUnauthorized, fmt.Sprintf("forwarded story query signed %s away from the owner's clock (tolerance %s): are the instances' clocks synchronised?", skew.Round(time.Second), peerTolerance))
		} else {
			c.SetResponse(w)
			err = next(c)
			c.SetResponse(w.ResponseWriter)
		}
		if err != nil {
			// Rendered into the buffer, in place of anything written.
			w.status, w.body = 0, bytes.Buffer{}
			c.SetResponse(w)
			c.Echo().HTTPErrorHandler(c, err)
			c.SetResponse(w.ResponseWriter)
		}
		status := cmp.Or(w.status, http.StatusOK)
		w.Header().Set(headerPeerSignature, a.peer.sign("answer", sig, strconv.Itoa(status), w.body.String()))
		w.ResponseWriter.WriteHeader(status)
		if _, err := w.ResponseWriter.Write(w.body.Bytes()); err != nil {
			a.log.Debug("write forwarded story answer", "err", err)
		}
		return nil
	}
}

// bufferedAnswer holds an answer until it is signed.
type bufferedAnswer struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (b *bufferedAnswer) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}

func (b *bufferedAnswer) Write(p []byte) (int, error) {
	b.status = cmp.Or(b.status, http.StatusOK)
	return b.body.Write(p)
}

// Unwrap lets echo find its response, which stays uncommitted until the
// answer is signed.
func (b *bufferedAnswer) Unwrap() http.ResponseWriter { return b.ResponseWriter }
