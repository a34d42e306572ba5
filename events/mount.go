package events

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/statestore"
)

// Mount serves the service on srv: its story query's routes
// (StoryQuery.Mount), GET /api/events and
// POST /api/events/{source}:{event-id}/resend.
func (s *Service) Mount(srv *admin.Server) {
	if s.stories != nil {
		s.stories.Mount(srv)
	}
	// A search shows no bodies, and every source's events: not a team's.
	srv.API().GET("/events", s.search, admin.Readers...)
	// A team resends only to its subscriptions (Resend).
	srv.API().POST("/events/*", s.resend, admin.OperatorsAndTeams...).Changes("event.resend")
}

// resendSuffix ends the path of a resend.
const resendSuffix = "/resend"

// resend answers POST /api/events/{source}:{event-id}/resend, body
// {"subscription": "...", "force": false}, with what Resend did: 202, the
// delivery is due now.
func (s *Service) resend(c *echo.Context) error {
	key, ok := strings.CutSuffix(strings.TrimPrefix(c.Request().URL.Path, strings.TrimSuffix(c.Path(), "*")), resendSuffix)
	if !ok || key == "" {
		return echo.NewHTTPError(http.StatusNotFound, "want POST /api/events/<source>:<event-id>/resend")
	}
	admin.SetTarget(c, key)
	var req ResendRequest
	if err := admin.DecodeJSONStrict(c, &req, 4<<10); err != nil {
		return err
	}
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	out, err := s.Resend(ctx, key, req, admin.Caller(c))
	if err != nil {
		return resendError(err)
	}
	return c.JSON(http.StatusAccepted, out)
}

// search answers GET /api/events?source=&type=&since=&until=&cursor=&limit=
// with a page of at most limit (MaxLimit) events found within MaxRead
// offsets, and the cursor to read on.
func (s *Service) search(c *echo.Context) error {
	q := Query{Source: c.QueryParam("source"), Type: c.QueryParam("type"), Cursor: c.QueryParam("cursor"), Limit: MaxLimit, MaxRead: MaxRead}
	now := time.Now()
	for name, at := range map[string]*time.Time{"since": &q.Since, "until": &q.Until} {
		if v := c.QueryParam(name); v != "" {
			t, err := ParseTime(v, now)
			if err != nil {
				return echo.NewHTTPError(http.StatusBadRequest, name+": "+err.Error())
			}
			*at = t
		}
	}
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			return echo.NewHTTPError(http.StatusBadRequest, fmt.Sprintf("limit: want a number from 1 to %d", MaxLimit))
		}
		q.Limit = n
	}
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	page, err := s.Search(ctx, q)
	if err != nil {
		return admin.Error(err)
	}
	return c.JSON(http.StatusOK, page)
}

// resendError answers a resend's error with its status (admin.Error), a
// ledger partition restoring 503.
func resendError(err error) error {
	if errors.Is(err, statestore.ErrRestoring) {
		return echo.NewHTTPError(http.StatusServiceUnavailable, "the ledger partition of the event is restoring; try again shortly")
	}
	return admin.Error(err)
}
