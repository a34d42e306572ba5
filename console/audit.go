package console

import (
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/audit"
)

// auditDefaultSince is how far back /ui/audit reads when no time or
// cursor is given.
const auditDefaultSince = 24 * time.Hour

// mountAudit serves /ui/audit, the audit trail, to admins and operators
// as GET /api/audit serves it.
func (u *Console) mountAudit(g *echo.Group) {
	u.get(g, "/audit", u.auditTrail, admin.Operators...)
}

// auditData is a page of the trail: its filters as typed, its records
// newest first, and the query of the page after it.
type auditData struct {
	Actor, Action, Target, Since string
	Records                      []admin.Record
	// Next is the query of the page that reads on from this one's
	// cursor; "" when this page found nothing.
	Next string
}

// auditTrail shows one page of the trail as GET /api/audit reads it
// (audit.Service.List: at most audit.MaxLimit records, read from the
// cursor or from since, 24 h ago by default, at most audit.MaxRead
// offsets), newest first, with a link to read on from its cursor.
func (u *Console) auditTrail(r *Request) error {
	if u.cfg.Audit == nil {
		return echo.NewHTTPError(http.StatusNotFound, "this instance keeps no audit trail: it runs without the audit topic")
	}
	d := auditData{Actor: r.QueryParam("actor"), Action: r.QueryParam("action"), Target: r.QueryParam("target"), Since: r.QueryParam("since")}
	q := audit.Query{Actor: d.Actor, Action: d.Action, Target: d.Target, Cursor: r.QueryParam("cursor"), Limit: audit.MaxLimit}
	if d.Since == "" && q.Cursor == "" {
		d.Since = time.Now().Add(-auditDefaultSince).UTC().Truncate(time.Second).Format(time.RFC3339)
	}
	if d.Since != "" {
		t, err := time.Parse(time.RFC3339Nano, d.Since)
		if err != nil {
			return echo.NewHTTPError(http.StatusBadRequest, "since: want an RFC 3339 time such as 2026-01-02T15:04:05Z")
		}
		q.Since = t
	}
	ctx, cancel := admin.Timeout(r.Context)
	defer cancel()
	page, err := u.cfg.Audit.List(ctx, q)
	if err != nil {
		return err
	}
	d.Records = slices.Clone(page.Records)
	slices.Reverse(d.Records)
	if len(page.Records) > 0 {
		v := url.Values{"cursor": {page.Cursor}}
		for k, x := range map[string]string{"actor": d.Actor, "action": d.Action, "target": d.Target} {
			if x != "" {
				v.Set(k, x)
			}
		}
		d.Next = v.Encode()
	}
	return r.Render(http.StatusOK, "audit.html", "Audit trail", "audit", d)
}
