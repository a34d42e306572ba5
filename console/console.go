package console

import (
	"cmp"
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
	"github.com/hookstream/hookstream/audit"
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
	// Audit keeps the records of the console's changes, sign-ins and
	// refusals as it keeps the API's, and /ui/audit reads them; nil:
	// none are kept, and /ui/audit says so.
	Audit *audit.Service
	Log   *slog.Logger
}

// Console serves the web console.
type Console struct {
	cfg    Config
	log    *slog.Logger
	pages  map[string]*template.Template
	access *access
	srv    *admin.Server
	routes []*Route

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
	u.post(g, "/logout", u.logout, admin.Roles...)
	u.get(g, "/", u.overview, admin.Readers...)
	u.mountSubscriptions(g)
	u.mountGroups(g)
	u.mountDLQ(g)
	u.mountEvents(g)
	u.mountAudit(g)
	g.RouteNotFound("/*", u.serve(&Route{May: admin.Roles}, func(r *Request) error {
		return echo.NewHTTPError(http.StatusNotFound, "no such page")
	}))
}

// home is where who lands after signing in: the overview, or for a team
// its subscriptions, the only pages it may see.
func (u *Console) home(who admin.Identity) string {
	if u.may(who, http.MethodGet, "/") {
		return admin.UIPrefix + "/"
	}
	return admin.UIPrefix + "/subscriptions"
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
// site; "" when none was asked.
func safeNext(next string) string {
	if !strings.HasPrefix(next, admin.UIPrefix+"/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return ""
	}
	return next
}

func (u *Console) loginPage(c *echo.Context) error {
	r := &Request{Context: c, u: u}
	if len(u.access.token) == 0 {
		return c.Redirect(http.StatusSeeOther, admin.UIPrefix+"/")
	}
	if s, ok := u.access.session(c); ok {
		return c.Redirect(http.StatusSeeOther, cmp.Or(safeNext(c.QueryParam("next")), u.home(s.who)))
	}
	return r.Render(http.StatusOK, "login.html", "Sign in", "-", loginData{Next: safeNext(c.QueryParam("next"))})
}

// login judges the token typed, as the API judges a bearer token, and
// starts a session of its identity; the sign-in is recorded, and a
// refused one too (as a refusal: at most 10 a second are). It carries no
// CSRF token (there is no session yet) but is refused from another
// origin.
func (u *Console) login(c *echo.Context) error {
	r := &Request{Context: c, u: u}
	if len(u.access.token) == 0 {
		return c.Redirect(http.StatusSeeOther, admin.UIPrefix+"/")
	}
	if err := u.access.sameOrigin(c.Request()); err != nil {
		u.refused(c, admin.Identity{}, err)
		return u.fail(c, r, err)
	}
	if err := readForm(c); err != nil {
		return u.fail(c, r, err)
	}
	next := safeNext(c.FormValue("next"))
	token := c.FormValue("token")
	who, ok := u.access.identify(token)
	if !ok {
		u.log.Warn("console sign-in refused: unknown, revoked or expired token", "remote", c.RealIP())
		err := r.Render(http.StatusUnauthorized, "login.html", "Sign in", "-", loginData{Next: next,
			Error: "That token is not accepted: it is unknown, revoked or expired. Ask an admin for a token (hookstream tokens add)."})
		u.record(c, admin.Identity{}, admin.ActionRefused, "POST "+admin.UIPrefix+"/login", http.StatusUnauthorized, nil)
		return err
	}
	s, v := u.access.newSession(who, token)
	u.access.setCookie(c, v, s.expires)
	err := c.Redirect(http.StatusSeeOther, cmp.Or(next, u.home(who)))
	u.record(c, who, "console.signin", "", http.StatusSeeOther, nil)
	return err
}

func (u *Console) logout(r *Request) error {
	u.access.revoke(u.sessionOf(r.Context))
	u.access.setCookie(r.Context, "", time.Time{})
	if len(u.access.token) == 0 {
		return r.Redirect(admin.UIPrefix+"/", "")
	}
	return r.Context.Redirect(http.StatusSeeOther, admin.UIPrefix+"/login")
}
