package pull

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/subscriptions"
)

// Path is the route of the endpoint, in Echo's syntax.
const Path = "/subscriptions/:id/events"

// problem is a refused request: its status and message.
type problem struct {
	status int
	msg    string
}

func (p *problem) Error() string { return p.msg }

func refuse(status int, format string, args ...any) *problem {
	return &problem{status: status, msg: fmt.Sprintf(format, args...)}
}

// Events answers GET /subscriptions/{id}/events.
func (s *Server) Events(c *echo.Context) error {
	code, err := s.events(c)
	s.metrics.requests.WithLabelValues(strconv.Itoa(code)).Inc()
	return err
}

func (s *Server) events(c *echo.Context) (int, error) {
	var p *problem
	code, err := s.serve(c)
	switch {
	case err == nil:
		return code, nil
	case errors.As(err, &p):
	case errors.Is(err, context.Canceled) && c.Request().Context().Err() != nil:
		return 499, nil // the consumer left
	case errors.Is(err, errBudget):
		s.metrics.refused.Inc()
		p = &problem{status: http.StatusServiceUnavailable, msg: "too many pull answers being read or written: try again"}
		c.Response().Header().Set("Retry-After", "1")
	default:
		s.log.Error("pull request failed", "subscription", c.Param("id"), "err", err)
		p = &problem{status: http.StatusServiceUnavailable, msg: "temporarily unavailable"}
		c.Response().Header().Set("Retry-After", "1")
	}
	if p.status == http.StatusUnauthorized {
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="hookstream pull"`)
	}
	if p.status == http.StatusTooManyRequests {
		c.Response().Header().Set("Retry-After", "1")
	}
	return p.status, c.JSON(p.status, map[string]string{"error": p.msg})
}

// serve answers a request, or returns why not.
func (s *Server) serve(c *echo.Context) (int, error) {
	ctx := c.Request().Context()
	id := c.Param("id")
	sc, err := s.subscription(ctx, id)
	if errors.Is(err, subscriptions.ErrNotFound) {
		return 0, refuse(http.StatusNotFound, "unknown subscription %.100q", id)
	}
	if err != nil {
		return 0, err
	}
	sub := sc.sub
	if kind := sub.Kind(); kind != subscriptions.KindPull {
		return 0, refuse(http.StatusConflict, "subscription %s is a %s subscription: it is delivered, not pulled", id, kind)
	}
	now := s.now()
	if !authorized(c.Request(), sub, now) || len(cursorKeys(sub, now)) == 0 {
		return 0, refuse(http.StatusUnauthorized, "invalid pull token")
	}
	if !sub.Enabled {
		reason := cmp.Or(sub.DisabledReason, "disabled by an operator")
		return 0, refuse(http.StatusForbidden, "subscription %s is disabled (%s): enable it to pull", id, reason)
	}
	req, err := parseRequest(c)
	if err != nil {
		return 0, err
	}
	var cur *cursor
	seen := 0 // partitions the cursor names
	if req.given {
		got, err := decodeCursor(req.cursor, id, cursorKeys(sub, now))
		if err != nil {
			return 0, refuse(http.StatusBadRequest, "%v", err)
		}
		cur, seen = &got, len(got.to)
	}
	n, err := s.fetch.partitions(ctx, seen)
	if err != nil {
		return 0, err
	}
	if seen > n {
		return 0, refuse(http.StatusBadRequest, "%v: %d partitions, the events topic has %d", errMalformed, seen, n)
	}
	release, ok := s.admit(id)
	if !ok {
		return 0, refuse(http.StatusTooManyRequests, "too many pull requests at once (%d per subscription, %d in all): try again", s.cfg.MaxRequestsPerSubscription, s.cfg.MaxRequests)
	}
	defer release()
	sh := &share{b: s.budget}
	defer sh.release()

	committed, err := s.committed(ctx, sub, n)
	if err != nil {
		return 0, err
	}
	pos, replayed := committed, false
	if cur != nil {
		// Minted before partitions were added to the events topic: the
		// others are where the subscription stands.
		cur.widen(committed)
		if cur.rewind == rewindID(sub) {
			pos = cur.to
			if err := s.acknowledge(ctx, sc, sh, committed, *cur); err != nil {
				return 0, err
			}
		} else {
			// Minted before the subscription's last replay: committing
			// it would undo the replay. It acknowledges nothing; the
			// answer starts where the replay put the subscription.
			replayed = true
		}
	}
	a, err := s.read(ctx, sc, sh, pos, req)
	if err != nil {
		return 0, err
	}
	a.replayed = replayed
	s.metrics.events(id).Add(float64(len(a.bodies)))
	return s.reply(c, a, sh, sub, now), nil
}
