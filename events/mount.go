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
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// API serves the events topic on the admin listener's /api: the search,
// and resends. Its functions (Search, Resend) are what the handlers and
// the console call.
type API struct {
	// Cluster's events topic is searched, and resends written to its
	// delivery-retry topic.
	Cluster topics.Cluster
	// Registry and Stories serve resends: the subscriptions, and where
	// an event's story says its record is.
	Registry *subscriptions.Registry
	Stories  Stories
}

// Mount serves GET /api/events and
// POST /api/events/{source}:{event-id}/resend on srv.
func (a API) Mount(srv *admin.Server) {
	srv.API().GET("/events", a.search)
	srv.API().POST("/events/*", a.resend)
}

// resendSuffix ends the path of a resend.
const resendSuffix = "/resend"

// resend answers POST /api/events/{source}:{event-id}/resend, body
// {"subscription": "...", "force": false}, with what Resend did: 202, the
// delivery is due now.
func (a API) resend(c *echo.Context) error {
	key, ok := strings.CutSuffix(strings.TrimPrefix(c.Request().URL.Path, strings.TrimSuffix(c.Path(), "*")), resendSuffix)
	if !ok || key == "" {
		return echo.NewHTTPError(http.StatusNotFound, "want POST /api/events/<source>:<event-id>/resend")
	}
	var req ResendRequest
	if err := admin.DecodeJSONStrict(c, &req, 4<<10); err != nil {
		return err
	}
	ctx, cancel := admin.Timeout(c)
	defer cancel()
	out, err := a.Resend(ctx, key, req)
	if err != nil {
		return resendError(err)
	}
	return c.JSON(http.StatusAccepted, out)
}

// ParseTime reads a time as the API and the commands take it: RFC 3339,
// or a positive duration back from now (2h, 30m).
func ParseTime(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return time.Time{}, invalidf("%q is neither an RFC 3339 time nor a positive duration (2h, 30m)", v)
	}
	return now.Add(-d), nil
}

// search answers GET /api/events?source=&type=&since=&until=&cursor=&limit=
// with a page of at most limit (MaxLimit) events found within MaxRead
// offsets, and the cursor to read on.
func (a API) search(c *echo.Context) error {
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
	page, err := Search(ctx, a.Cluster, q)
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
