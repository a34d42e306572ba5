package events

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/topics"
)

// API serves the events topic on the admin listener's /api: the search.
type API struct {
	// Kafka lists offsets; Opts build the readers.
	Kafka *kgo.Client
	Opts  []kgo.Opt
	Names topics.Names
}

// Mount serves GET /api/events on srv.
func (a API) Mount(srv *admin.Server) {
	srv.API().GET("/events", a.search)
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
	page, err := Search(ctx, a.Kafka, a.Opts, a.Names, q)
	if err != nil {
		return apiError(err)
	}
	return c.JSON(http.StatusOK, page)
}

// apiError answers the errors of this package with their status.
func apiError(err error) error {
	if errors.Is(err, ErrInvalid) {
		return echo.NewHTTPError(http.StatusBadRequest, err.Error())
	}
	return admin.Error(err)
}
