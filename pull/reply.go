package pull

import (
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/hookstream/hookstream/subscriptions"
)

// reply writes answer a, its cursor signed with sub's current token,
// within WriteTimeout: each event's bytes go back to sh once written, so
// a consumer that reads slowly holds what it has not read yet. It
// returns the status the request is counted with: 499 when the consumer
// did not take the whole answer.
func (s *Server) reply(c *echo.Context, a *answer, sh *share, sub subscriptions.Subscription, now time.Time) int {
	head, tail := []byte(`{"events":[`), a.tail(sub, now)
	size := len(head) + len(tail)
	for i, body := range a.bodies {
		size += len(body) + min(i, 1)
	}
	w := c.Response()
	w.Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	w.Header().Set(echo.HeaderContentLength, strconv.Itoa(size))
	rc := http.NewResponseController(w)
	if err := rc.SetWriteDeadline(s.now().Add(s.cfg.WriteTimeout)); err == nil {
		// Lifted once the answer is written, for the connection's next
		// request.
		defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	}
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(head); err != nil {
		return 499
	}
	left := a.bytes
	for i, body := range a.bodies {
		if i > 0 {
			if _, err := io.WriteString(w, ","); err != nil {
				return 499
			}
		}
		if _, err := w.Write(body); err != nil {
			return 499
		}
		a.bodies[i] = nil
		left -= int64(len(body))
		sh.keep(left)
	}
	if _, err := w.Write(tail); err != nil {
		return 499
	}
	return http.StatusOK
}
