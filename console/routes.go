package console

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/admin"
)

// Route is one console route: the roles that may call it, as each /api
// route names its own (admin.Route), and the action the audit trail
// records each call as ("" for a route that changes nothing).
type Route struct {
	Method, Path string
	May          []admin.Role
	Action       string
}

// Changes names the action the audit trail records each call of r as,
// with its outcome: r changes something.
func (r *Route) Changes(action string) *Route {
	r.Action = action
	return r
}

// Routes are the console's routes that a session may call, in the order
// they were mounted; the sign-in page and the static files are served to
// anyone the guard lets through.
func (u *Console) Routes() []*Route { return u.routes }

// get mounts a page that the roles in may can see.
func (u *Console) get(g *echo.Group, path string, fn func(*Request) error, may ...admin.Role) *Route {
	return u.add(g, http.MethodGet, path, fn, may)
}

// post mounts a form's action that the roles in may can take: refused
// 403 unless it comes from this origin with the session's CSRF token.
func (u *Console) post(g *echo.Group, path string, fn func(*Request) error, may ...admin.Role) *Route {
	return u.add(g, http.MethodPost, path, fn, may)
}

// add mounts a route, unless it names no role: a route whose roles were
// forgotten is logged and left out, so that it answers 404, never to
// everyone.
func (u *Console) add(g *echo.Group, method, path string, fn func(*Request) error, may []admin.Role) *Route {
	r := &Route{Method: method, Path: path, May: may}
	if len(may) == 0 {
		u.log.Error("console route names no role that may call it; not mounted", "method", method, "path", admin.UIPrefix+path)
		return r
	}
	g.Add(method, path, u.serve(r, fn))
	u.routes = append(u.routes, r)
	return r
}

// may reports whether who may call the route method path (as mounted,
// "/subscriptions/:id"): the pages show a link or a button only where
// the route behind it would serve it.
func (u *Console) may(who admin.Identity, method, path string) bool {
	i := slices.IndexFunc(u.routes, func(r *Route) bool { return r.Method == method && r.Path == path })
	return i >= 0 && who.In(u.routes[i].May)
}

// serve runs fn for a signed-in browser whose role route names, and
// records a call of a route that changes something; a signed-out browser
// is sent to sign in, a role route does not name is refused 403 and the
// refusal recorded.
func (u *Console) serve(route *Route, fn func(*Request) error) echo.HandlerFunc {
	refusal := fmt.Sprintf("%s %s needs role %s: sign in with a token of that role", route.Method, admin.UIPrefix+route.Path,
		strings.Join(roleNames(route.May), " or "))
	return func(c *echo.Context) error {
		r, err := u.request(c)
		if err != nil {
			return u.fail(c, r, err)
		}
		if route.Method == http.MethodPost {
			if err := readForm(c); err != nil {
				return u.fail(c, r, err)
			}
			if err := u.access.checkPost(c, u.sessionOf(c)); err != nil {
				u.refused(c, r.Who, err)
				return u.fail(c, r, err)
			}
		}
		if !r.Who.In(route.May) {
			err := echo.NewHTTPError(http.StatusForbidden, refusal)
			u.refused(c, r.Who, err)
			return u.fail(c, r, err)
		}
		err = u.fail(c, r, fn(r))
		if route.Action != "" {
			u.record(c, r.Who, cmp.Or(r.action, route.Action), cmp.Or(r.target, c.Param("id"), c.Param("*"), c.Request().URL.Path),
				answered(c, err), formFields(c))
		}
		return err
	}
}

func roleNames(roles []admin.Role) []string {
	out := make([]string, len(roles))
	for i, r := range roles {
		out[i] = string(r)
	}
	return out
}

// SetAction names the action the audit trail records the request as, in
// place of its route's: a change the form decides.
func (r *Request) SetAction(action string) { r.action = action }

// SetTarget names what the request changes, for the audit trail: by
// default the route's :id or the rest of its path.
func (r *Request) SetTarget(target string) { r.target = target }

// refused records a refusal of the request c by who.
func (u *Console) refused(c *echo.Context, who admin.Identity, err error) {
	status, _ := errorStatus(err)
	u.record(c, who, admin.ActionRefused, c.Request().Method+" "+c.Request().URL.Path, status, nil)
}

// record hands the record of the request c to the audit trail
// (Config.Audit, as the API's): who did action to target, answered status, setting the
// fields named (never their values).
func (u *Console) record(c *echo.Context, who admin.Identity, action, target string, status int, fields []string) {
	if u.cfg.Audit == nil {
		return
	}
	u.cfg.Audit.Record(context.WithoutCancel(c.Request().Context()), admin.Record{
		At: time.Now().UTC(), Actor: who, Action: action, Target: target,
		RequestID: admin.RequestID(c), RemoteAddr: c.RealIP(), Status: status, Fields: fields,
	})
}

// answered is the status the request c was answered with, err the error
// fail was given back (nil: rendered).
func answered(c *echo.Context, err error) int {
	if err != nil {
		status, _ := errorStatus(err)
		return status
	}
	if r, _ := echo.UnwrapResponse(c.Response()); r != nil && r.Status != 0 {
		return r.Status
	}
	return http.StatusOK
}

// formFields are the names of the fields a form set, for the audit
// trail: the headers' rows name no header, the CSRF token, the version
// and the confirmation are no field.
func formFields(c *echo.Context) []string {
	var out []string
	for name, vs := range c.Request().PostForm {
		switch {
		case name == csrfField || name == "version" || name == "confirm" || !slices.ContainsFunc(vs, func(v string) bool { return v != "" }):
			continue
		case strings.HasPrefix(name, headerValueField), name == removeHeaderField, name == newHeaderNameField, name == newHeaderValueField:
			name = "headers"
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
