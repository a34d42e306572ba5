package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/access"
	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/attempts"
	"github.com/hookstream/hookstream/audit"
	"github.com/hookstream/hookstream/console"
	"github.com/hookstream/hookstream/deadletter"
	"github.com/hookstream/hookstream/events"
	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/instances"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/stats"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

const token = "console-t0ken"

// harness is a real admin listener with the console mounted, on a test
// broker.
type harness struct {
	srv      *httptest.Server
	admin    *admin.Server
	env      *kafkatest.Env
	cl       *kgo.Client
	registry *subscriptions.Registry
	stats    *stats.Tally
	// tokens are the access tokens the console and the API judge, and
	// trail the audit trail both write.
	tokens *access.Service
	trail  *audit.Service
	ui     *console.Console
}

type options struct {
	token string
	tls   bool
	env   *kafkatest.Env
	// trustedProxies are the admin listener's HOOKSTREAM_TRUSTED_PROXIES.
	trustedProxies []netip.Prefix
	// tallyWait is the console's TallyWait; tallies, when set, holds the
	// tallies from reading until it is closed.
	tallyWait time.Duration
	tallies   chan struct{}
}

// serve mounts the console on an admin server with token (empty: none).
func serve(t testing.TB, o options) *harness {
	t.Helper()
	env := o.env
	if env == nil {
		env = kafkatest.New(t, 2, 1<<20)
	}
	cl := env.Client(t)
	log := kafkatest.Logger(t)
	c := env.ClusterOf(cl)
	h := &harness{env: env, cl: cl, registry: subscriptions.NewRegistry(c, log)}
	tally := attempts.NewTally(c, log)
	counts := stats.NewTally(c, log)
	reg := prometheus.NewRegistry()
	s := admin.New(admin.Config{Token: o.token, TrustedProxies: o.trustedProxies}, reg, log)
	h.tokens, h.trail = access.New(access.Config{}, c, log, reg), audit.New(c, log, reg)
	h.tokens.Mount(s)
	h.trail.Mount(s)
	subs := subscriptions.New(h.registry, tally, "")
	subs.Mount(s)
	ui, err := console.New(console.Config{Subscriptions: subs, Attempts: tally, Stats: counts, Cluster: c, DeadLetters: deadletter.New(c),
		Events: events.New(c, h.registry, events.NewStoryQuery(nil, h.registry, c, "", log)), Groups: groups.New(c, h.registry), Instances: instances.New(c), Log: log,
		TallyWait: o.tallyWait, Audit: h.trail})
	if err != nil {
		t.Fatal(err)
	}
	ui.Mount(s)
	h.admin, h.stats, h.ui = s, counts, ui
	ctx, cancel := context.WithCancel(context.Background())
	runs := []func(context.Context) error{tally.Run, counts.Run, ui.Run, h.tokens.Run}
	done := make(chan struct{}, len(runs))
	for _, run := range runs {
		go func() {
			if o.tallies != nil {
				select {
				case <-o.tallies:
				case <-ctx.Done():
				}
			}
			if err := run(ctx); err != nil {
				t.Errorf("run: %v", err)
			}
			done <- struct{}{}
		}()
	}
	t.Cleanup(func() {
		cancel()
		for range runs {
			<-done
		}
	})
	if o.tls {
		h.srv = httptest.NewTLSServer(s)
	} else {
		h.srv = httptest.NewServer(s)
	}
	t.Cleanup(h.srv.Close)
	return h
}

// browser is a client with a cookie jar that does not follow redirects,
// sending what a browser sends from the console's own pages.
type browser struct {
	t    *testing.T
	h    *harness
	http *http.Client
	// header is added to every request; Origin is the server's own by
	// default.
	header http.Header
}

func (h *harness) browser(t *testing.T) *browser {
	jar, _ := cookiejar.New(nil)
	c := *h.srv.Client()
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &browser{t: t, h: h, http: &c, header: http.Header{"Origin": {h.srv.URL}}}
}

type answer struct {
	status int
	header http.Header
	body   string
}

func (b *browser) do(method, path string, form url.Values) answer {
	b.t.Helper()
	return b.doWith(nil, method, path, form)
}

// doWith is do sending cookie too (nil: the jar's alone).
func (b *browser) doWith(cookie *http.Cookie, method, path string, form url.Values) answer {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.h.srv.URL+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range b.header {
		req.Header[k] = v
	}
	if cookie != nil {
		req.AddCookie(cookie)
	}
	resp, err := b.http.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: string(raw)}
}

func (b *browser) get(path string) answer { return b.do(http.MethodGet, path, nil) }

func (b *browser) post(path string, form url.Values) answer { return b.do(http.MethodPost, path, form) }

// signIn signs in with the token and returns the CSRF token of the
// overview's forms.
func (b *browser) signIn() string {
	b.t.Helper()
	a := b.post("/ui/login", url.Values{"token": {token}, "next": {"/ui/"}})
	if a.status != http.StatusSeeOther {
		b.t.Fatalf("sign in: got %d %s, want 303", a.status, a.body)
	}
	return b.csrf("/ui/")
}

var csrfMeta = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`)

// csrf returns the CSRF token the page at path carries.
func (b *browser) csrf(path string) string {
	b.t.Helper()
	a := b.get(path)
	m := csrfMeta.FindStringSubmatch(a.body)
	if a.status != http.StatusOK || m == nil {
		b.t.Fatalf("GET %s: got %d without a CSRF field: %s", path, a.status, a.body)
	}
	return m[1]
}

func TestSignedOutRedirectsToSignIn(t *testing.T) {
	h := serve(t, options{token: token})
	b := h.browser(t)
	for _, path := range []string{"/ui/", "/ui/subscriptions"} {
		a := b.get(path)
		if a.status != http.StatusSeeOther || a.header.Get("Location") != "/ui/login?next="+url.QueryEscape(path) {
			t.Errorf("GET %s signed out: got %d to %q, want 303 to the sign-in page", path, a.status, a.header.Get("Location"))
		}
	}
	a := b.get("/ui/login")
	for _, want := range []string{`<label for="token">Access token</label>`, `type="password"`, `>Sign in</button>`} {
		if !strings.Contains(a.body, want) {
			t.Errorf("sign-in page: missing %s", want)
		}
	}
	if a := b.get("/ui"); a.status != http.StatusMovedPermanently || a.header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui: got %d to %q, want 301 to /ui/", a.status, a.header.Get("Location"))
	}
}

func TestWrongTokenRefused(t *testing.T) {
	h := serve(t, options{token: token})
	b := h.browser(t)
	for _, tok := range []string{"", "wrong", token + "x", token[:len(token)-1]} {
		a := b.post("/ui/login", url.Values{"token": {tok}})
		if a.status != http.StatusUnauthorized || a.header.Get("Set-Cookie") != "" {
			t.Errorf("sign in with %q: got %d, cookie %q; want 401 and no cookie", tok, a.status, a.header.Get("Set-Cookie"))
		}
		if !strings.Contains(a.body, "That token is not accepted: it is unknown, revoked or expired.") {
			t.Errorf("sign in with %q: the page does not say why", tok)
		}
	}
	if a := b.get("/ui/"); a.status != http.StatusSeeOther {
		t.Errorf("GET /ui/ after refused sign-ins: got %d, want 303", a.status)
	}
}

// TestSessionCookie: signing in sets an HttpOnly, SameSite=Strict cookie
// for /ui lasting 12 hours, Secure over TLS; the session opens the pages.
func TestSessionCookie(t *testing.T) {
	for _, tls := range []bool{false, true} {
		h := serve(t, options{token: token, tls: tls})
		b := h.browser(t)
		a := b.post("/ui/login", url.Values{"token": {token}, "next": {"/ui/subscriptions"}})
		if a.status != http.StatusSeeOther || a.header.Get("Location") != "/ui/subscriptions" {
			t.Fatalf("tls %v: sign in: got %d to %q, want 303 to the page asked for", tls, a.status, a.header.Get("Location"))
		}
		resp := &http.Response{Header: a.header}
		cookies := resp.Cookies()
		if len(cookies) != 1 {
			t.Fatalf("tls %v: got %d cookies, want 1", tls, len(cookies))
		}
		c := cookies[0]
		if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/ui" || c.Secure != tls {
			t.Errorf("tls %v: cookie %s: got HttpOnly %v SameSite %v Path %q Secure %v", tls, c.Name, c.HttpOnly, c.SameSite, c.Path, c.Secure)
		}
		if c.MaxAge < int((12*time.Hour-time.Minute).Seconds()) || c.MaxAge > int((12*time.Hour).Seconds()) {
			t.Errorf("tls %v: cookie Max-Age %d, want 12 hours", tls, c.MaxAge)
		}
		if a := b.get("/ui/"); a.status != http.StatusOK || !strings.Contains(a.body, "<h1>Overview</h1>") {
			t.Errorf("tls %v: overview signed in: got %d", tls, a.status)
		}
	}
}

// TestSessionsEndWithTheToken: a session of one token opens nothing on a
// server with another, and a signed-out session opens nothing.
func TestSessionsEndWithTheToken(t *testing.T) {
	h := serve(t, options{token: token})
	b := h.browser(t)
	csrf := b.signIn()
	other := serve(t, options{token: "another-token", env: h.env})
	u, _ := url.Parse(h.srv.URL)
	cookies := b.http.Jar.Cookies(&url.URL{Scheme: "http", Host: u.Host, Path: "/ui/"})
	req, _ := http.NewRequest(http.MethodGet, other.srv.URL+"/ui/", nil)
	for _, c := range cookies {
		req.AddCookie(c)
	}
	resp, err := other.browser(t).http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("a session of another token: got %d, want 303 to sign in", resp.StatusCode)
	}

	if a := b.post("/ui/logout", url.Values{"csrf": {csrf}}); a.status != http.StatusSeeOther {
		t.Fatalf("sign out: got %d", a.status)
	}
	req, _ = http.NewRequest(http.MethodGet, h.srv.URL+"/ui/", nil)
	for _, c := range cookies {
		req.AddCookie(c)
	}
	resp, err = h.browser(t).http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("a signed-out session replayed: got %d, want 303 to sign in", resp.StatusCode)
	}
}

// TestPostsNeedCSRFAndOwnOrigin: every POST is refused 403 without the
// session's CSRF token, from another origin (another port of the same
// host included), cross-site by Sec-Fetch-Site, or with neither Origin
// nor Sec-Fetch-Site nor a same-origin Referer.
func TestPostsNeedCSRFAndOwnOrigin(t *testing.T) {
	h := serve(t, options{token: token})
	b := h.browser(t)
	csrf := b.signIn()
	u, _ := url.Parse(h.srv.URL)
	otherPort := "http://" + u.Hostname() + ":1"
	cases := []struct {
		name   string
		header http.Header
		form   url.Values
	}{
		{"no CSRF token", http.Header{"Origin": {h.srv.URL}}, url.Values{}},
		{"wrong CSRF token", http.Header{"Origin": {h.srv.URL}}, url.Values{"csrf": {csrf + "x"}}},
		{"Origin of another port", http.Header{"Origin": {otherPort}}, url.Values{"csrf": {csrf}}},
		{"Origin of another host", http.Header{"Origin": {"http://evil.example"}}, url.Values{"csrf": {csrf}}},
		{"Origin null", http.Header{"Origin": {"null"}}, url.Values{"csrf": {csrf}}},
		{"cross-site Sec-Fetch-Site", http.Header{"Origin": {h.srv.URL}, "Sec-Fetch-Site": {"cross-site"}}, url.Values{"csrf": {csrf}}},
		{"same-site Sec-Fetch-Site", http.Header{"Sec-Fetch-Site": {"same-site"}}, url.Values{"csrf": {csrf}}},
		{"no Origin, no Sec-Fetch-Site, no Referer", http.Header{}, url.Values{"csrf": {csrf}}},
		{"Referer of another port", http.Header{"Referer": {otherPort + "/ui/"}}, url.Values{"csrf": {csrf}}},
	}
	for _, tc := range cases {
		b.header = tc.header
		if a := b.post("/ui/logout", tc.form); a.status != http.StatusForbidden {
			t.Errorf("%s: got %d, want 403", tc.name, a.status)
		}
	}
	// Still signed in: none of them signed out.
	b.header = http.Header{"Referer": {h.srv.URL + "/ui/"}}
	if a := b.get("/ui/"); a.status != http.StatusOK {
		t.Fatalf("after refused posts: got %d, want 200", a.status)
	}
	// A same-origin Referer without Origin, and Sec-Fetch-Site alone, pass.
	if a := b.post("/ui/logout", url.Values{"csrf": {csrf}}); a.status != http.StatusSeeOther {
		t.Errorf("same-origin Referer with the CSRF token: got %d, want 303", a.status)
	}
	csrf = b.signInAgain()
	b.header = http.Header{"Sec-Fetch-Site": {"same-origin"}}
	if a := b.post("/ui/logout", url.Values{"csrf": {csrf}}); a.status != http.StatusSeeOther {
		t.Errorf("Sec-Fetch-Site same-origin with the CSRF token: got %d, want 303", a.status)
	}
	// Signing in is refused from another origin too.
	b.header = http.Header{"Origin": {otherPort}}
	if a := b.post("/ui/login", url.Values{"token": {token}}); a.status != http.StatusForbidden {
		t.Errorf("sign in from another origin: got %d, want 403", a.status)
	}
}

func (b *browser) signInAgain() string {
	b.header = http.Header{"Origin": {b.h.srv.URL}}
	return b.signIn()
}

// TestLoopbackOnlyWithoutToken: without a token the console serves
// loopback Host names only, and POSTs still need the CSRF token.
func TestLoopbackOnlyWithoutToken(t *testing.T) {
	h := serve(t, options{})
	b := h.browser(t)
	for _, host := range []string{"hookstream.example", "attacker.example:8081", "10.0.0.1"} {
		req, _ := http.NewRequest(http.MethodGet, h.srv.URL+"/ui/", nil)
		req.Host = host
		resp, err := b.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("Host %s: got %d, want 403", host, resp.StatusCode)
		}
	}
	csrf := b.csrf("/ui/") // a loopback visitor is given a session
	if a := b.get("/ui/login"); a.status != http.StatusSeeOther {
		t.Errorf("sign-in page without a token: got %d, want 303 to the overview", a.status)
	}
	if a := b.post("/ui/logout", url.Values{}); a.status != http.StatusForbidden {
		t.Errorf("POST without the CSRF token: got %d, want 403", a.status)
	}
	b.header = http.Header{"Origin": {"http://localhost:1"}}
	if a := b.post("/ui/logout", url.Values{"csrf": {csrf}}); a.status != http.StatusForbidden {
		t.Errorf("POST from another loopback origin: got %d, want 403", a.status)
	}
	b.header = http.Header{"Origin": {h.srv.URL}}
	if a := b.post("/ui/logout", url.Values{"csrf": {csrf}}); a.status != http.StatusSeeOther {
		t.Errorf("POST with the CSRF token: got %d, want 303", a.status)
	}
}

// TestSecurityHeaders: every console answer, errors and assets included,
// forbids framing, inline script and sniffing.
func TestSecurityHeaders(t *testing.T) {
	h := serve(t, options{token: token})
	b := h.browser(t)
	for _, path := range []string{"/ui/login", "/ui/", "/ui/static/console.css", "/ui/no-such-page"} {
		a := b.get(path)
		csp := a.header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
		if a.header.Get("X-Frame-Options") != "DENY" || a.header.Get("X-Content-Type-Options") != "nosniff" || a.header.Get("Referrer-Policy") == "" {
			t.Errorf("%s: headers %v", path, a.header)
		}
	}
	b.signIn()
	if a := b.get("/ui/no-such-page"); a.status != http.StatusNotFound || !strings.Contains(a.body, "no such page") {
		t.Errorf("unknown page: got %d %s", a.status, a.body)
	}
	if a := b.get("/ui/static/console.css"); a.status != http.StatusOK || !strings.HasPrefix(a.header.Get("Content-Type"), "text/css") {
		t.Errorf("stylesheet: got %d %s", a.status, a.header.Get("Content-Type"))
	}
}

// TestAttackerTextRendersAsText: names and payloads come from whoever can
// write the topics; a <script> in them is shown as text, never run.
func TestAttackerTextRendersAsText(t *testing.T) {
	h := serve(t, options{token: token})
	const evil = `"><script>alert(1)</script>`
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.cl.ProduceSync(ctx, &kgo.Record{Topic: string(h.env.Names.Ingest), Key: []byte("x:1"),
		Headers: []kgo.RecordHeader{{Key: topics.HeaderSource, Value: []byte(evil)}}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	b := h.browser(t)
	b.signIn()
	a := b.get("/ui/")
	if strings.Contains(a.body, evil) || strings.Contains(a.body, "<script>") || strings.Count(a.body, "&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;") < 3 {
		t.Errorf("overview: the source name is not escaped:\n%s", a.body)
	}
}

// TestLargeFormRefused: a form over 256 KiB is refused, whatever it holds.
func TestLargeFormRefused(t *testing.T) {
	h := serve(t, options{token: token})
	b := h.browser(t)
	csrf := b.signIn()
	big := strings.Repeat("x", 300<<10)
	if a := b.post("/ui/subscriptions/new", url.Values{"csrf": {csrf}, "url": {"https://example.com/" + big}}); a.status != http.StatusRequestEntityTooLarge {
		t.Errorf("large form: got %d, want 413", a.status)
	}
	b.header.Set("X-CSRF-Token", csrf)
	if a := b.post("/ui/subscriptions/new", url.Values{"description": {big}}); a.status != http.StatusRequestEntityTooLarge {
		t.Errorf("large form with the CSRF token in a header: got %d, want 413", a.status)
	}
	if a := b.post("/ui/login", url.Values{"token": {big}}); a.status != http.StatusRequestEntityTooLarge {
		t.Errorf("large sign-in form: got %d, want 413", a.status)
	}
}

// TestForgedFlashNotShown: a page on another port of the same host can set
// cookies for this one; a message it sets is not shown.
func TestForgedFlashNotShown(t *testing.T) {
	h := serve(t, options{token: token})
	b := h.browser(t)
	b.signIn()
	u, _ := url.Parse(h.srv.URL + "/ui/")
	forged := "WW91ciB0b2tlbiBleHBpcmVkOiBzaWduIGluIGF0IGV2aWwuZXhhbXBsZQ" // "Your token expired: sign in at evil.example"
	for _, v := range []string{forged, forged + ".bm90YW1hYw"} {
		b.http.Jar.SetCookies(u, []*http.Cookie{{Name: "hookstream_flash", Value: v, Path: "/ui"}})
		if a := b.get("/ui/"); strings.Contains(a.body, "evil.example") {
			t.Errorf("flash %q: shown", v)
		}
	}
}
