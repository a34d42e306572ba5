// Package admin is the operators' listener: /healthz, /readyz with the
// detail of every component's readiness, /metrics, and /api, guarded by a
// bearer token or, without one, served to local clients only (Host,
// Origin, content type). Every /api route names the roles that may call
// it where it is mounted, and one authorizer checks them (access.go); the
// tokens themselves are package access's (Authenticate), and the records
// of changes and refusals package audit's (Audit). It is a mount point:
// each component mounts its own routes, on the guarded /api group (API),
// under /ui for the web console, which signs browsers in itself (UI), or,
// for callers that authenticate themselves such as another instance
// forwarding a story query, under /peer (Peer); admin maps every route's
// errors to {"error": "..."} and holds the plumbing they share (Timeout,
// Error). It owns the HTTP surface only, and imports none of the components:
// components report their state through the checks they register and the
// routes they mount.
package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hookstream/hookstream/internal/httpserver"
)

// Check reports one component's readiness with a detail for operators.
type Check func(ctx context.Context) (ready bool, detail any)

// Config configures the admin listener.
type Config struct {
	// Addr is the listener. Default 127.0.0.1:8081.
	Addr string
	// AdvertisedAddr is where other instances reach this listener, for
	// the routes they call (the processor's forwarded story queries).
	// Default empty: Addr, a listener on every interface reached at the
	// address the broker sees.
	AdvertisedAddr string
	// Token guards /api/* as a bearer token; the routes other instances
	// call derive their key from it. Empty: no token.
	Token string
	// Roles are the roles this process runs, shown by /readyz.
	Roles []string
	// TrustedProxies are the networks of the proxies in front of the
	// listener (HOOKSTREAM_TRUSTED_PROXIES) whose X-Forwarded-For names the
	// client (httpserver.ClientIP: the audit trail's remote address), and whose
	// X-Forwarded-Proto and X-Forwarded-Host name what the client
	// addressed (Addressed). Default none: the connection's own.
	TrustedProxies []netip.Prefix
}

// Server is the admin listener.
type Server struct {
	cfg  Config
	log  *slog.Logger
	echo *echo.Echo
	api  *API
	ui   *echo.Group
	peer *echo.Group

	// Set while mounting, before Run (access.go).
	authenticator Authenticator
	recorder      Recorder
	routes        []*Route

	mu     sync.Mutex
	checks map[string]Check
}

// New builds the server; gatherer serves /metrics. It does no I/O.
func New(cfg Config, gatherer prometheus.Gatherer, log *slog.Logger) *Server {
	s := &Server{cfg: cfg, log: log.With("component", "admin"), checks: make(map[string]Check)}
	e := echo.NewWithConfig(echo.Config{Logger: s.log, HTTPErrorHandler: s.renderError, JSONSerializer: plainJSON{},
		IPExtractor: httpserver.ClientIP(cfg.TrustedProxies)})
	e.Use(middleware.Recover())
	e.GET("/healthz", func(c *echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	e.GET("/readyz", s.readyz)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{})))
	s.api = &API{s: s, g: e.Group(APIPrefix, s.guard)}
	// Profiles, behind the guard like the rest of /api; admins only: a
	// heap profile holds what the process holds.
	s.api.GET("/debug/pprof/", echo.WrapHandler(http.HandlerFunc(pprof.Index)), Admins...)
	// pprof.Index finds a named profile (heap, allocs, goroutine, ...) only
	// under /debug/pprof/, not under /api: each is served by name.
	s.api.GET("/debug/pprof/:name", func(c *echo.Context) error {
		pprof.Handler(c.Param("name")).ServeHTTP(c.Response(), c.Request())
		return nil
	}, Admins...)
	s.api.GET("/debug/pprof/cmdline", echo.WrapHandler(http.HandlerFunc(pprof.Cmdline)), Admins...)
	s.api.GET("/debug/pprof/profile", echo.WrapHandler(http.HandlerFunc(pprof.Profile)), Admins...)
	s.api.GET("/debug/pprof/symbol", echo.WrapHandler(http.HandlerFunc(pprof.Symbol)), Admins...)
	s.api.GET("/debug/pprof/trace", echo.WrapHandler(http.HandlerFunc(pprof.Trace)), Admins...)
	s.peer = e.Group(PeerPrefix)
	s.ui = e.Group(UIPrefix)
	s.echo = e
	return s
}

// AddCheck registers a readiness check under name.
func (s *Server) AddCheck(name string, check Check) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks[name] = check
}

// APIPrefix is the path of the API.
const APIPrefix = "/api"

// API is the guarded /api group where components mount routes, each
// naming the roles that may call it.
func (s *Server) API() *API { return s.api }

// PeerPrefix is the path of the Peer group.
const PeerPrefix = "/peer"

// Peer is the /peer group, outside the guard, where components mount the
// routes other instances call: each route authenticates its caller itself.
func (s *Server) Peer() *echo.Group { return s.peer }

// UIPrefix is the path of the UI group.
const UIPrefix = "/ui"

// UI is the /ui group, outside the /api guard, where the web console
// mounts its pages: it refuses what a page of another site sends with
// RefuseCrossSite, as /api does without a token, and keeps browsers out
// with its own sign-in, session and CSRF checks (package console).
func (s *Server) UI() *echo.Group { return s.ui }

// Config is the listener's configuration, for the routes that depend on
// it (the advertised address, the key derived from the token).
func (s *Server) Config() Config { return s.cfg }

// Timeout is the context of one /api request: the request's, bounded.
func Timeout(c *echo.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Request().Context(), 30*time.Second)
}

// DecodeJSON reads the request's JSON body, at most limit bytes, into v;
// a body that is not such JSON is answered 400.
func DecodeJSON(c *echo.Context, v any, limit int64) error {
	return decodeJSON(c, v, limit, false)
}

// DecodeJSONStrict is DecodeJSON refusing fields v does not have.
func DecodeJSONStrict(c *echo.Context, v any, limit int64) error {
	return decodeJSON(c, v, limit, true)
}

// decodeJSON decodes the body into v and leaves the names of its
// top-level fields for the audit trail (Fields).
func decodeJSON(c *echo.Context, v any, limit int64, strict bool) error {
	raw, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, limit))
	if err != nil {
		return echo.NewHTTPError(http.StatusBadRequest, "invalid JSON: "+err.Error())
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return echo.NewHTTPError(http.StatusBadRequest, "invalid JSON: "+err.Error())
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) == nil {
		c.Set(fieldsKey, slices.Sorted(maps.Keys(fields)))
	}
	return nil
}

// ServeHTTP serves the admin API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.echo.ServeHTTP(w, r) }

// Run serves on cfg.Addr until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	sc := echo.StartConfig{
		Address:         s.cfg.Addr,
		HideBanner:      true,
		HidePort:        true,
		GracefulTimeout: 5 * time.Second,
		BeforeServeFunc: func(srv *http.Server) error {
			srv.ReadHeaderTimeout = 10 * time.Second
			httpserver.DropUnusedConns(srv)
			return nil
		},
		ListenerAddrFunc: func(a net.Addr) { s.log.Info("admin listening", "addr", a.String()) },
	}
	if err := sc.Start(ctx, s); err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	return nil
}

// Readiness is what /readyz answers: the process is ready when every
// check is.
type Readiness struct {
	Ready  bool                   `json:"ready"`
	Roles  []string               `json:"roles"`
	Checks map[string]CheckResult `json:"checks"`
}

// CheckResult is one check's answer.
type CheckResult struct {
	Ready  bool `json:"ready"`
	Detail any  `json:"detail,omitempty"`
}

func (s *Server) readyz(c *echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 3*time.Second)
	defer cancel()
	out := s.Readiness(ctx)
	status := http.StatusOK
	if !out.Ready {
		status = http.StatusServiceUnavailable
	}
	return c.JSON(status, out)
}

// Readiness runs every registered check, as /readyz does.
func (s *Server) Readiness(ctx context.Context) Readiness {
	s.mu.Lock()
	names := make([]string, 0, len(s.checks))
	for name := range s.checks {
		names = append(names, name)
	}
	checks := make([]Check, len(names))
	sort.Strings(names)
	for i, name := range names {
		checks[i] = s.checks[name]
	}
	s.mu.Unlock()

	out := Readiness{Ready: true, Roles: s.cfg.Roles, Checks: make(map[string]CheckResult, len(names))}
	for i, name := range names {
		ready, detail := checks[i](ctx)
		out.Checks[name] = CheckResult{Ready: ready, Detail: detail}
		out.Ready = out.Ready && ready
	}
	return out
}

// Refusals of the /api guard.
var (
	errCrossSite = echo.NewHTTPError(http.StatusForbidden, "cross-site request refused")
	errNotJSON   = echo.NewHTTPError(http.StatusUnsupportedMediaType, "request body must be application/json")
)

// guard keeps web pages from driving /api and finds the caller. With a
// token, a bearer token is required (authenticate): a browser cannot
// attach it to a cross-site request without a CORS preflight, which this
// API never approves, so any host name may be served. Without one, only
// what a local client sends is served (RefuseCrossSite), as an admin.
// Either way a body must be application/json, which no HTML form or
// preflight-free request can send. A refusal is recorded (Audit); each
// route then checks the caller's role (authorize).
func (s *Server) guard(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		SetRequestID(c)
		r := c.Request()
		var err error
		if s.cfg.Token != "" {
			err = s.authenticate(c)
		} else if err = s.RefuseCrossSite(r); err == nil {
			c.Set(identityKey, Local)
		}
		if err != nil {
			s.record(c, ActionRefused, r.Method+" "+r.URL.Path, err)
			return err
		}
		if err := jsonBody(r); err != nil {
			return err
		}
		return next(c)
	}
}

// RefuseCrossSite refuses a request a web page of another site or origin
// sent: one with a Sec-Fetch-Site of cross-site or same-site (a top-level
// navigation included: it cannot read the answer, but it would still run
// the handler), or an Origin other than the one the request was sent to
// (Origin; another port of the same host, or null, is another origin);
// without a token also one whose Host is not loopback (a DNS-rebound
// name). What a local client sends (curl and the CLI send neither header)
// and what a page of this origin sends pass. It is the whole guard of /api
// without a token, and the console checks every /ui request with it, with
// a token or without, before it looks at a session.
func (s *Server) RefuseCrossSite(r *http.Request) error {
	if s.cfg.Token == "" && !LoopbackHost(r.Host) {
		return echo.NewHTTPError(http.StatusForbidden,
			fmt.Sprintf("host %q is not loopback; set HOOKSTREAM_ADMIN_TOKEN to serve other names", r.Host))
	}
	if o := r.Header.Get(echo.HeaderOrigin); o != "" && OriginOf(o) != s.Origin(r) {
		return errCrossSite
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return errCrossSite
	}
	return nil
}

// jsonBody refuses a body of any type but application/json.
func jsonBody(r *http.Request) error {
	if r.ContentLength == 0 {
		return nil
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get(echo.HeaderContentType)); err != nil || mt != echo.MIMEApplicationJSON {
		return errNotJSON
	}
	return nil
}

// LoopbackHost reports whether hostport (a Host header, port optional)
// names localhost, 127.0.0.0/8 or ::1.
func LoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// plainJSON is Echo's JSON serializer without HTML escaping: answers are
// application/json, never HTML, and read as written ('<EOF>', a filter's
// <, >, &&).
type plainJSON struct{ echo.DefaultJSONSerializer }

func (plainJSON) Serialize(c *echo.Context, target any, indent string) error {
	enc := json.NewEncoder(c.Response())
	enc.SetEscapeHTML(false)
	enc.SetIndent("", indent)
	return enc.Encode(target)
}

// renderError answers errors as {"error": "..."}; unexpected ones are
// logged and answered without detail.
func (s *Server) renderError(c *echo.Context, err error) {
	if r, _ := echo.UnwrapResponse(c.Response()); r != nil && r.Committed {
		return
	}
	status, msg := http.StatusInternalServerError, "internal error"
	var he *echo.HTTPError
	switch {
	case errors.As(err, &he):
		status, msg = he.Code, he.Message
	case echo.StatusCode(err) != 0:
		status = echo.StatusCode(err)
		msg = http.StatusText(status)
	default:
		s.log.Error("admin request failed", "path", c.Request().URL.Path, "err", err)
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	if err := c.JSON(status, map[string]string{"error": msg}); err != nil {
		s.log.Debug("write error response", "err", err)
	}
}
