package pull

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v5"
)

// Limits of a request.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
	MaxWait      = 30 * time.Second
)

// request is a pull request's parameters.
type request struct {
	limit  int
	wait   time.Duration
	cursor string
	given  bool // a cursor was given
}

func parseRequest(c *echo.Context) (request, error) {
	q := c.Request().URL.Query()
	r := request{limit: DefaultLimit}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return r, refuse(http.StatusBadRequest, "limit: %.32q is not a number from 1 to %d", v, MaxLimit)
		}
		r.limit = min(n, MaxLimit)
	}
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			secs, serr := strconv.Atoi(v)
			d, err = time.Duration(secs)*time.Second, serr
		}
		if err != nil || d < 0 {
			return r, refuse(http.StatusBadRequest, "wait: %.32q is not a duration such as 30s (at most %v)", v, MaxWait)
		}
		r.wait = min(d, MaxWait)
	}
	// An empty cursor is none: a consumer's first request, or a loop
	// whose cursor file is still empty.
	r.cursor = q.Get("cursor")
	r.given = r.cursor != ""
	return r, nil
}
