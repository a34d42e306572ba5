package admin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v5"
)

// Role is what the holder of a token may do (DESIGN, Access). Each /api
// route names the roles that may call it where it is mounted (API), and
// one authorizer, authorize, checks them.
type Role string

// The roles.
const (
	// Admin may do everything, tokens included. HOOKSTREAM_ADMIN_TOKEN is
	// always an admin, and so is a local client when there is no token.
	Admin Role = "admin"
	// Operator may read everything, payloads included, and run the
	// pipeline (replay, redrive, resend, enable, disable, test); never
	// tokens, subscription secrets or header values.
	Operator Role = "operator"
	// Viewer may read everything but secrets, header values and bodies,
	// and change nothing.
	Viewer Role = "viewer"
	// Team may manage its own team's subscriptions only.
	Team Role = "team"
)

// Roles lists every role.
var Roles = []Role{Admin, Operator, Viewer, Team}

// The sets of roles routes declare.
var (
	// Admins: tokens, secrets, and every change of a subscription but
	// enabling and disabling it.
	Admins = []Role{Admin}
	// Operators: reads of payloads, answer bodies and delivery errors,
	// and the pipeline's controls.
	Operators = []Role{Admin, Operator}
	// Readers: reads without secrets, header values or bodies.
	Readers = []Role{Admin, Operator, Viewer}

	// The same with team tokens, for the routes whose handlers confine a
	// team token to its team's subscriptions.
	AdminsAndTeams    = []Role{Admin, Team}
	OperatorsAndTeams = []Role{Admin, Operator, Team}
	ReadersAndTeams   = []Role{Admin, Operator, Viewer, Team}
)

// validName is the form of token names and team names.
var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ValidName reports whether name may be a token's or a team's name: 1 to
// 63 of a-z, 0-9 and '-', starting with a letter or digit.
func ValidName(name string) bool { return validName.MatchString(name) }

// Identity is who made a request: the token it carried.
type Identity struct {
	// TokenID is the token's id; "bootstrap" for HOOKSTREAM_ADMIN_TOKEN,
	// "local" for a local client when there is no token.
	TokenID string `json:"token_id"`
	Name    string `json:"name"`
	Role    Role   `json:"role"`
	Team    string `json:"team,omitempty"`
}

// In reports whether id's role is one of roles.
func (id Identity) In(roles []Role) bool { return slices.Contains(roles, id.Role) }

// The identities that are no access token: the bootstrap admin token,
// and the loopback client of a listener without one.
var (
	bootstrap = Identity{TokenID: "bootstrap", Name: "HOOKSTREAM_ADMIN_TOKEN", Role: Admin}
	Local     = Identity{TokenID: "local", Name: "loopback", Role: Admin}
)

// Authenticator returns the identity of a presented access token, false
// for one that is unknown, revoked or expired alike (package access).
type Authenticator func(token string) (Identity, bool)

// Authenticate makes a the judge of every token but
// HOOKSTREAM_ADMIN_TOKEN. Call it before Run.
func (s *Server) Authenticate(a Authenticator) { s.authenticator = a }

// Record is what the audit trail keeps of one request: a change made
// through the API, or a refusal. It never holds a secret, a header value,
// a token or a body: Fields names what a change set, not to what.
// RemoteAddr is the client's: the connection's address, or behind a
// trusted proxy the one its X-Forwarded-For names (httpserver.ClientIP).
type Record struct {
	At         time.Time `json:"at"`
	Actor      Identity  `json:"actor"`
	Action     string    `json:"action"`
	Target     string    `json:"target,omitempty"`
	RequestID  string    `json:"request_id"`
	RemoteAddr string    `json:"remote_addr"`
	Status     int       `json:"status"`
	Fields     []string  `json:"fields,omitempty"`
}

// ActionRefused is the action of a refused request: 401 (no valid
// token) or 403 (a cross-site request, a role without the right).
const ActionRefused = "auth.refused"

// Recorder keeps records (package audit). It is called on the request's
// goroutine, after the handler, and must bound its own cost.
type Recorder func(ctx context.Context, r Record)

// Audit makes rec the keeper of the records of changes and refusals.
// Call it before Run.
func (s *Server) Audit(rec Recorder) { s.recorder = rec }

// API is the guarded /api group: every route mounted on it names the
// roles that may call it, or is not mounted.
type API struct {
	s *Server
	g *echo.Group
}

// Route is one route of the API.
type Route struct {
	Method, Path string
	// May are the roles that may call it.
	May []Role
	// Action is what the audit trail records each call as; "" for a
	// route that changes nothing.
	Action string
}

// GET mounts a GET route that the roles in may can call.
func (a *API) GET(path string, h echo.HandlerFunc, may ...Role) *Route {
	return a.add(http.MethodGet, path, h, may)
}

// POST mounts a POST route that the roles in may can call.
func (a *API) POST(path string, h echo.HandlerFunc, may ...Role) *Route {
	return a.add(http.MethodPost, path, h, may)
}

// PATCH mounts a PATCH route that the roles in may can call.
func (a *API) PATCH(path string, h echo.HandlerFunc, may ...Role) *Route {
	return a.add(http.MethodPatch, path, h, may)
}

// DELETE mounts a DELETE route that the roles in may can call.
func (a *API) DELETE(path string, h echo.HandlerFunc, may ...Role) *Route {
	return a.add(http.MethodDelete, path, h, may)
}

// Changes names the action the audit trail records each call of r as
// ("subscription.create"), with its outcome: r changes something.
func (r *Route) Changes(action string) *Route {
	r.Action = action
	return r
}

// add mounts a route, unless it names no role: a route whose roles were
// forgotten is logged and left out, so that it answers 404, never to
// everyone (the route table test of cmd/hookstream fails).
func (a *API) add(method, path string, h echo.HandlerFunc, may []Role) *Route {
	r := &Route{Method: method, Path: APIPrefix + path, May: may}
	if len(may) == 0 {
		a.s.log.Error("route names no role that may call it; not mounted", "method", method, "path", r.Path)
		return r
	}
	a.g.Add(method, path, h, a.s.authorize(r))
	a.s.routes = append(a.s.routes, r)
	return r
}

// Routes are the routes mounted on the API, in the order they were.
func (s *Server) Routes() []*Route { return s.routes }

// Keys of what the guard and the handlers leave in a request's context.
const (
	identityKey = "admin.identity"
	targetKey   = "admin.target"
	actionKey   = "admin.action"
	fieldsKey   = "admin.fields"
	requestKey  = "admin.request"
)

// Caller is the identity of the request c, as the guard found it.
func Caller(c *echo.Context) Identity {
	id, _ := c.Get(identityKey).(Identity)
	return id
}

// SetTarget names what the request c changes, for the audit trail: by
// default the route's :id or the rest of its path.
func SetTarget(c *echo.Context, target string) { c.Set(targetKey, target) }

// SetAction names the action the audit trail records c as, in place of
// its route's: a change the body decides (enabling, say).
func SetAction(c *echo.Context, action string) { c.Set(actionKey, action) }

// Fields are the names of the top-level fields of the request's JSON
// body, as DecodeJSON read them.
func Fields(c *echo.Context) []string {
	f, _ := c.Get(fieldsKey).([]string)
	return f
}

// errUnauthorized answers every request without a valid token alike: no
// token, a malformed header, an unknown, revoked or expired token.
var errUnauthorized = echo.NewHTTPError(http.StatusUnauthorized, "missing or invalid bearer token")

// maxToken bounds a presented token: longer ones are refused unread.
const maxToken = 256

// authenticate finds the caller of c by its bearer token: the bootstrap
// token, compared in constant time, or an access token (authenticator).
func (s *Server) authenticate(c *echo.Context) error {
	got, ok := strings.CutPrefix(c.Request().Header.Get(echo.HeaderAuthorization), "Bearer ")
	id, known := Identity{}, false
	if ok {
		id, known = s.Identify(got)
	}
	if !known {
		c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="hookstream"`)
		return errUnauthorized
	}
	c.Set(identityKey, id)
	return nil
}

// Identify returns the identity of a presented token, as the API's guard
// and the console's sign-in judge it: the admin token (compared in
// constant time, its length included: their digests are compared), else
// an access token (Authenticate). Empty, over-long (256 bytes), unknown,
// revoked and expired tokens are refused alike.
func (s *Server) Identify(token string) (Identity, bool) {
	if token == "" || len(token) > maxToken {
		return Identity{}, false
	}
	got, want := sha256.Sum256([]byte(token)), sha256.Sum256([]byte(s.cfg.Token))
	if s.cfg.Token != "" && subtle.ConstantTimeCompare(got[:], want[:]) == 1 {
		return bootstrap, true
	}
	if s.authenticator == nil {
		return Identity{}, false
	}
	return s.authenticator(token)
}

// authorize refuses a caller whose role route does not name (403), and
// records each call of a route that changes something.
func (s *Server) authorize(route *Route) echo.MiddlewareFunc {
	need := make([]string, len(route.May))
	for i, r := range route.May {
		need[i] = string(r)
	}
	refusal := fmt.Sprintf("%s %s needs role %s", route.Method, route.Path, strings.Join(need, " or "))
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			if !Caller(c).In(route.May) {
				err := echo.NewHTTPError(http.StatusForbidden, refusal)
				s.record(c, ActionRefused, route.Method+" "+c.Request().URL.Path, err)
				return err
			}
			if route.Action == "" {
				return next(c)
			}
			err := next(c)
			action, _ := c.Get(actionKey).(string)
			if action == "" {
				action = route.Action
			}
			target, _ := c.Get(targetKey).(string)
			if target == "" {
				target = defaultTarget(c)
			}
			s.record(c, action, target, err)
			return err
		}
	}
}

// defaultTarget is the target of a change by its path: the route's :id
// or the rest of its path (*), else the path.
func defaultTarget(c *echo.Context) string {
	if id := c.Param("id"); id != "" {
		return id
	}
	if rest := c.Param("*"); rest != "" {
		return rest
	}
	return c.Request().URL.Path
}

// record hands the record of c's request, answered err (nil: by its
// response), to the recorder.
func (s *Server) record(c *echo.Context, action, target string, err error) {
	if s.recorder == nil {
		return
	}
	rec := Record{
		At: time.Now().UTC(), Actor: Caller(c), Action: action, Target: target,
		RequestID: RequestID(c), RemoteAddr: c.RealIP(), Status: statusOf(c, err),
	}
	if action != ActionRefused {
		rec.Fields = Fields(c)
	}
	s.recorder(c.Request().Context(), rec)
}

// statusOf is the status a request answered err is answered with.
func statusOf(c *echo.Context, err error) int {
	if err == nil {
		if r, _ := echo.UnwrapResponse(c.Response()); r != nil && r.Status != 0 {
			return r.Status
		}
		return http.StatusOK
	}
	if he, ok := errors.AsType[*echo.HTTPError](Error(err)); ok {
		return he.Code
	}
	if code := echo.StatusCode(err); code != 0 {
		return code
	}
	return http.StatusInternalServerError
}

// SetRequestID gives the request c an id of its own, answered in
// X-Request-ID and recorded with it: a client's is not taken, so the
// audit trail's ids are unique.
func SetRequestID(c *echo.Context) {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	id := hex.EncodeToString(b[:])
	c.Set(requestKey, id)
	c.Response().Header().Set(echo.HeaderXRequestID, id)
}

// RequestID is the id SetRequestID gave the request c.
func RequestID(c *echo.Context) string {
	id, _ := c.Get(requestKey).(string)
	return id
}
