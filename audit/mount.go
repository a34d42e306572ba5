package audit

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/admin"
)

// Mount makes the service the keeper of srv's records (admin.Server.Audit)
// and serves GET /api/audit to admins and operators.
func (s *Service) Mount(srv *admin.Server) {
	srv.Audit(s.Record)
	srv.API().GET("/audit", s.list, admin.Operators...)
}

// list answers GET /api/audit?cursor=&since=&actor=&action=&target=&limit=
// with a Page.
func (s *Service) list(c *echo.Context) error {
	q := Query{Cursor: c.QueryParam("cursor"), Actor: c.QueryParam("actor"), Action: c.QueryParam("action"),
		Target: c.QueryParam("target"), Limit: 100}
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			return echo.NewHTTPError(http.StatusBadRequest, fmt.Sprintf("limit: want a number from 1 to %d", MaxLimit))
		}
		q.Limit = n
	}
	if v := c.QueryParam("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return echo.NewHTTPError(http.StatusBadRequest, "since: want an RFC 3339 time")
		}
		q.Since = t
	}
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	page, err := s.List(ctx, q)
	if err != nil {
		return admin.Error(err)
	}
	return c.JSON(http.StatusOK, page)
}
