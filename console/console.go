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
	// Subscriptions reads and writes subscriptions, lists their
	// attempts and tests them.
	Subscriptions *subscriptions.Service
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
