package console

import (
	"bytes"
	"crypto/hmac"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/admin"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// securityHeaders are set on every console response. No inline script or
// style runs: a page's script, if it needs one, is a file of static/.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'",
	"X-Frame-Options":        "DENY",
	"X-Content-Type-Options": "nosniff",
	"Referrer-Policy":        "same-origin",
	"Cache-Control":          "no-store",
}

// parseTemplates builds one template set per page: every file of
// templates/ whose name does not start with "_" is a page, parsed with
// layout.html and the partials (files starting with "_").
func parseTemplates() (map[string]*template.Template, error) {
	files, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	base := template.New("layout.html").Funcs(funcs)
	shared := []string{"templates/layout.html"}
	for _, f := range files {
		if strings.HasPrefix(path.Base(f), "_") {
			shared = append(shared, f)
		}
	}
	if base, err = base.ParseFS(templateFS, shared...); err != nil {
		return nil, err
	}
	pages := make(map[string]*template.Template)
	for _, f := range files {
		name := path.Base(f)
		if name == "layout.html" || strings.HasPrefix(name, "_") {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(templateFS, f)
		if err != nil {
			return nil, err
		}
		pages[name] = t
	}
	return pages, nil
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"when":      when,
	"ago":       ago,
	"iso":       func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"sparkline": sparkline,
	"pretty":    pretty,
	"join":      strings.Join,
	"deref":     func(t *time.Time) time.Time { return derefTime(t) },
	"path":      url.PathEscape,
}

// when is a time as the console shows it: UTC, its zone named.
func when(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format("2006-01-02 15:04:05 MST")
}

func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// ago is how long before now t was, roughly.
func ago(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := time.Since(t)
	switch {
	case d < 0:
		return "in " + (-d).Round(time.Second).String()
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// pretty is JSON indented for reading; anything else as it is.
func pretty(v any) string {
	var raw []byte
	switch v := v.(type) {
	case []byte:
		raw = v
	case string:
		raw = []byte(v)
	case json.RawMessage:
		raw = v
	default:
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Sprint(v)
		}
		return string(b)
	}
	var buf bytes.Buffer
	if json.Indent(&buf, raw, "", "  ") == nil {
		return buf.String()
	}
	return string(raw)
}

// sparkline draws counts (oldest first) as an SVG polyline with the last
// value marked. It is built from numbers only, so it is safe HTML.
func sparkline(label string, counts []int64) template.HTML {
	const w, h = 120, 24
	var top int64 = 1
	for _, n := range counts {
		top = max(top, n)
	}
	var pts strings.Builder
	step := float64(w)
	if len(counts) > 1 {
		step = float64(w) / float64(len(counts)-1)
	}
	var x, y float64
	for i, n := range counts {
		x, y = float64(i)*step, float64(h-2)-float64(n)*float64(h-4)/float64(top)
		fmt.Fprintf(&pts, "%.1f,%.1f ", x, y)
	}
	desc := make([]string, len(counts))
	for i, n := range counts {
		desc[i] = fmt.Sprint(n)
	}
	// Numbers and an escaped label only: safe to mark as HTML.
	return template.HTML(fmt.Sprintf(
		`<svg class="spark" viewBox="-2 0 %d %d" width="%d" height="%d" role="img" aria-label="%s per minute, oldest first: %s">`+
			`<polyline fill="none" stroke="currentColor" stroke-width="1.5" points="%s"/><circle cx="%.1f" cy="%.1f" r="2" fill="currentColor"/></svg>`,
		w+4, h, w+4, h, template.HTMLEscapeString(label), strings.Join(desc, ", "), strings.TrimSpace(pts.String()), x, y))
}

// Request is one console request: its echo context, who made it (its
// session's token), and the session's CSRF token every form of the page
// carries.
type Request struct {
	*echo.Context
	u    *Console
	Who  admin.Identity
	CSRF string
	// action and target name the change for the audit trail, in place of
	// the route's (SetAction, SetTarget).
	action, target string
}

// view is what the layout renders: the page's data under .Data.
type view struct {
	Title    string
	Nav      string
	CSRF     string
	SignOut  bool // a token is set: the layout offers to sign out
	Who      admin.Identity
	Flash    string
	Data     any
	Rendered time.Time
	u        *Console
}

// Can reports whether the viewer may call the console route "METHOD
// /path" (as mounted: "POST /subscriptions/:id/delete"): a page shows a
// link or a button only where the route behind it serves its role.
func (v view) Can(route string) bool {
	method, path, _ := strings.Cut(route, " ")
	return v.u.may(v.Who, method, path)
}

// Render writes page name (a file of templates/) with data, the page's
// title and its section of the navigation (Overview, Events,
// Subscriptions, Dead letters, Groups).
func (r *Request) Render(status int, name, title, nav string, data any) error {
	t := r.u.pages[name]
	if t == nil {
		return fmt.Errorf("console: no template %s", name)
	}
	v := view{Title: title, Nav: nav, CSRF: r.CSRF, SignOut: len(r.u.access.token) > 0, Who: r.Who, Flash: r.flash(), Data: data,
		Rendered: time.Now(), u: r.u}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", v); err != nil {
		return fmt.Errorf("console: render %s: %w", name, err)
	}
	return r.HTMLBlob(status, buf.Bytes())
}

// Redirect answers a form with 303 See Other to a console path, and a
// message the next page shows once (it must not hold a secret).
func (r *Request) Redirect(to, flash string) error {
	if flash != "" {
		v := base64.RawURLEncoding.EncodeToString([]byte(flash))
		r.SetCookie(&http.Cookie{
			Name: flashCookie, Value: v + "." + r.u.access.mac("flash", v), Path: admin.UIPrefix,
			MaxAge: 60, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.u.access.secure(r.Request()),
		})
	}
	return r.Context.Redirect(http.StatusSeeOther, to)
}

// flash takes the message a redirect left. Its cookie is MAC'd: a page on
// another port of the same host can set cookies for this one, not make
// the console show its text.
func (r *Request) flash() string {
	ck, err := r.Cookie(flashCookie)
	if err != nil || r.u.access == nil {
		return ""
	}
	r.SetCookie(&http.Cookie{Name: flashCookie, Path: admin.UIPrefix, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	v, mac, ok := strings.Cut(ck.Value, ".")
	if !ok || !hmac.Equal([]byte(mac), []byte(r.u.access.mac("flash", v))) {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(b) > 512 {
		return ""
	}
	return string(b)
}

// maxForm bounds a form's body.
const maxForm = 256 << 10

// readForm reads the request's form, at most maxForm bytes of it.
func readForm(c *echo.Context) error {
	req := c.Request()
	req.Body = http.MaxBytesReader(c.Response(), req.Body, maxForm)
	if err := req.ParseForm(); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return echo.NewHTTPError(http.StatusRequestEntityTooLarge, fmt.Sprintf("the form is larger than %d KiB", maxForm>>10))
		}
		return echo.NewHTTPError(http.StatusBadRequest, "the form cannot be read: "+err.Error())
	}
	return nil
}

// request checks the session of c.
func (u *Console) request(c *echo.Context) (*Request, error) {
	s, ok := u.access.session(c)
	if !ok {
		return nil, errSignedOut
	}
	c.Set("session", s)
	return &Request{Context: c, u: u, Who: s.who, CSRF: u.access.csrf(s)}, nil
}

func (u *Console) sessionOf(c *echo.Context) session {
	s, _ := c.Get("session").(session)
	return s
}

// fail renders err as an error page; a signed-out browser is sent to sign
// in, then back.
func (u *Console) fail(c *echo.Context, r *Request, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, errSignedOut) {
		next := c.Request().URL.RequestURI()
		if c.Request().Method != http.MethodGet {
			next = admin.UIPrefix + "/"
		}
		return c.Redirect(http.StatusSeeOther, admin.UIPrefix+"/login?next="+url.QueryEscape(next))
	}
	status, msg := errorStatus(err)
	if status == http.StatusInternalServerError {
		u.log.Error("console request failed", "path", c.Request().URL.Path, "err", err)
	}
	if r == nil {
		r = &Request{Context: c, u: u}
	}
	return r.Render(status, "error.html", http.StatusText(status), "", errorPage{Status: status, Message: msg})
}

// errorStatus is the status and message an error is answered with: an
// echo.HTTPError's, or the API's for a service's error (admin.Error).
func errorStatus(err error) (int, string) {
	var he *echo.HTTPError
	if errors.As(err, &he) || errors.As(admin.Error(err), &he) {
		return he.Code, he.Message
	}
	return http.StatusInternalServerError, "internal error"
}

type errorPage struct {
	Status  int
	Message string
}

// headers sets the security headers on every console response.
func headers(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		h := c.Response().Header()
		for k, v := range securityHeaders {
			h.Set(k, v)
		}
		return next(c)
	}
}
