// Package console is the operators' web console, served under /ui on the
// admin listener from templates and assets embedded in the binary (no
// CDN, no external request, no script on its pages but the files of
// static/). It owns the browser's side of access: sign-in with the admin
// token, the session cookie, CSRF tokens, the same-origin check and the
// security headers. It refuses to own any behaviour of its own: every
// page reads, and every button calls, the same functions as the /api
// handlers (subscriptions.Registry, attempts, stats, groups, deadletter),
// so a console action is also an API call and a CLI command, and their
// errors read the same.
//
// Access. With HOOKSTREAM_ADMIN_TOKEN, /ui/login takes the token and sets
// a session cookie (HttpOnly, SameSite=Strict, Secure over TLS, 12 h)
// whose value is MAC'd under a key derived from the token: no session
// table, and changing the token ends every session. With a token or
// without, before any handler runs or a session is looked at or issued, a
// request of any method that a page of another site or origin sent is
// refused 403 by the guard /api uses without a token
// (admin.Server.RefuseCrossSite): a cross-site or same-site
// Sec-Fetch-Site, top-level navigations included, or an Origin other than
// the console's own; without a token a Host that is not loopback too. So
// no page can read the console, hold a live tail or start a scan; a local
// client sending neither header (curl) is served. Every POST is also
// refused 403 unless it comes from the console's own origin (Origin, else
// Sec-Fetch-Site, else Referer) and carries the session's CSRF token (form
// field "csrf" or header X-CSRF-Token).
//
// Bound. A console request reads a bounded number of records, with one
// exception: the overview and the subscription pages read none
// themselves (they show the stats and attempts tallies, kept in memory,
// offsets, and the instances as GET /api/instances asks them, at most
// 64) and wait at most a second (Config.TallyWait) for the tallies to
// read what was written since they last read, which on the first request
// after start, or after a minute without one, is every record the
// ingest, events, DLQ and attempts topics received meanwhile (from their
// start at first: about three records per event, 19 s for 1,000,000
// events on two loaded cores). A page the tallies have not caught up
// with by then shows the counts read so far and says how much of the
// topics' records they cover, while the tallies read on (5.6 ms per
// overview once caught up; BENCHMARKS.md). A
// subscription's attempts read at most attempts.MaxScan (100,000) records
// per partition of the attempts topic (1,200,000 over the default 12),
// and show at most 100 of them; its
// Test reads at most 100,000 records of one events partition to find the
// event named. The groups and replay pages read offsets and at most one
// fetch per partition (groups.Lag, groups.PlanReplay); the dead-letter
// pages read each DLQ partition from 1,000 offsets before its end to the
// end, show at most 100 letters per DLQ and redrive at most 500 (read
// from where its preview's window began to the DLQ's end; when that end
// lies more than deadletter.MaxPastWithin (1,000) offsets past the
// window's, the redrive reads nothing and answers 409). An
// events search page reads at most events.MaxRead (10,000) offsets; a
// live tail streams at most 1,000 events for at most 10 minutes, 8 tails
// at once per instance. A form is at most 256 KiB.
//
// Adding a page. One file per page family (subscriptions.go with
// templates/subscriptions*.html): a mountX method called by Mount
// registers its routes on the /ui group, behind guard: GET routes through
// u.page, POST routes through u.action, which refuses any request without
// the session's CSRF token or from another origin before the handler
// runs.
// A handler takes a *Request and ends with r.Render(status, "page.html",
// title, nav, data) or, after an action, r.Redirect(path, message). Each
// file of templates/ not starting with "_" is a page: it defines
// "content" (the layout.html around it has the navigation, the flash
// message and the footer); files starting with "_" hold the shared
// partials ("time", "csrf", "empty"). Forms that POST include
// {{template "csrf" .}}; page data is under .Data. Errors returned by a
// handler render as the error page with their echo.HTTPError status.
package console

import (
	"context"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/attempts"
	"github.com/hookstream/hookstream/deadletter"
	"github.com/hookstream/hookstream/events"
	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/instances"
	"github.com/hookstream/hookstream/stats"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// Config is what the console reads and calls: the components the /api
// handlers use.
type Config struct {
	// Registry reads and writes subscriptions.
	Registry *subscriptions.Registry
	// Attempts follows the delivery attempts: the subscriptions' totals.
	Attempts *attempts.Tally
	// Stats follows the ingest, events and DLQ topics: the event counts.
	Stats *stats.Tally
	// TallyWait is how long a page waits for the tallies to read what was
	// written since they last read before it shows the counts read so far
	// (0: defaultTallyWait).
	TallyWait time.Duration
	// Receiver, when this process runs the ingest role, is its
	// receiver's answers per source since it started: the requests it
	// rejected, and the duplicates it answered itself.
	Receiver func() map[string]stats.Answers
	// Cluster answers offset and lag queries, and its topics are read.
	Cluster topics.Cluster
	// DeadLetters lists and redrives dead letters.
	DeadLetters *deadletter.Service
	// Events searches the events topic, resends events and finds an
	// event's story wherever its processor runs.
	Events *events.Service
	// Groups shows the groups' lag, and plans and carries out replays.
	Groups *groups.Service
	// Instances lists the deployment's instances.
	Instances *instances.Service
	// UserAgent is the deliveries' User-Agent, which a subscription's
	// Test shows.
	UserAgent string
	Log       *slog.Logger
}

// Console serves the web console.
type Console struct {
	cfg    Config
	log    *slog.Logger
	pages  map[string]*template.Template
	access *access
	srv    *admin.Server

	receiver *sampler
	tails    atomic.Int32 // live tails streaming (events_tail.go)
	// stopped is closed when Run returns: live tails end then, not
	// holding the listener's shutdown.
	stopped chan struct{}
}

// New builds the console; it does no I/O.
func New(cfg Config) (*Console, error) {
	pages, err := parseTemplates()
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Console{cfg: cfg, log: log.With("component", "console"), pages: pages, receiver: newSampler(cfg.Receiver),
		stopped: make(chan struct{})}, nil
}

// Mount serves the console under /ui on srv, signing browsers in with
// srv's token.
func (u *Console) Mount(srv *admin.Server) {
	u.srv = srv
	u.access = newAccess(srv)
	g := srv.UI()
	g.Use(headers, u.guard)
	static, _ := fs.Sub(staticFS, "static")
	g.StaticFS("/static", static)
	g.GET("", func(c *echo.Context) error { return c.Redirect(http.StatusMovedPermanently, admin.UIPrefix+"/") })
	g.GET("/login", u.loginPage)
	g.POST("/login", u.login)
	g.POST("/logout", u.action(u.logout))
	g.GET("/", u.page(u.overview))
	u.mountSubscriptions(g)
	u.mountGroups(g)
	u.mountDLQ(g)
	u.mountEvents(g)
	g.RouteNotFound("/*", u.page(func(r *Request) error {
		return echo.NewHTTPError(http.StatusNotFound, "no such page")
	}))
}

// Run samples what the console charts per minute until ctx ends.
func (u *Console) Run(ctx context.Context) error {
	defer close(u.stopped)
	u.receiver.run(ctx)
	return nil
}

type loginData struct {
	Next  string
	Error string
}

// safeNext is where to go after signing in: a console path, never another
// site.
func safeNext(next string) string {
	if !strings.HasPrefix(next, admin.UIPrefix+"/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return admin.UIPrefix + "/"
	}
	return next
}

func (u *Console) loginPage(c *echo.Context) error {
	r := &Request{Context: c, u: u}
	if len(u.access.token) == 0 {
		return c.Redirect(http.StatusSeeOther, admin.UIPrefix+"/")
	}
	if _, ok := u.access.session(c); ok {
		return c.Redirect(http.StatusSeeOther, safeNext(c.QueryParam("next")))
	}
	return r.Render(http.StatusOK, "login.html", "Sign in", "-", loginData{Next: safeNext(c.QueryParam("next"))})
}

// login checks the admin token and starts a session. It carries no CSRF
// token (there is no session yet) but is refused from another origin.
func (u *Console) login(c *echo.Context) error {
	r := &Request{Context: c, u: u}
	if len(u.access.token) == 0 {
		return c.Redirect(http.StatusSeeOther, admin.UIPrefix+"/")
	}
	if err := u.access.sameOrigin(c.Request()); err != nil {
		return u.fail(c, r, err)
	}
	if err := readForm(c); err != nil {
		return u.fail(c, r, err)
	}
	next := safeNext(c.FormValue("next"))
	if !u.access.checkToken(c.FormValue("token")) {
		u.log.Warn("console sign-in refused: wrong admin token", "remote", c.RealIP())
		return r.Render(http.StatusUnauthorized, "login.html", "Sign in", "-", loginData{Next: next, Error: "That is not the admin token."})
	}
	s, v := u.access.newSession()
	u.access.setCookie(c, v, s.expires)
	return c.Redirect(http.StatusSeeOther, next)
}

func (u *Console) logout(r *Request) error {
	u.access.revoke(u.sessionOf(r.Context))
	u.access.setCookie(r.Context, "", time.Time{})
	if len(u.access.token) == 0 {
		return r.Redirect(admin.UIPrefix+"/", "")
	}
	return r.Context.Redirect(http.StatusSeeOther, admin.UIPrefix+"/login")
}
