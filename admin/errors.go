package admin

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v5"
)

// The errors of a service that its callers branch on carry the status the
// admin API and the console answer them with, so that neither maps a
// service's errors itself. A service defines each such sentinel with
// NotFound, Refused or Invalid (subscriptions.ErrNotFound,
// groups.ErrNoGroup); an error of one wraps it (fmt.Errorf("%w: ...",
// ErrInvalid)) or, with a message of its own, is made by Of. Status and
// Error read the status back.

// sentinel is an error callers branch on, with the status it answers.
type sentinel struct {
	msg    string
	status int
}

func (e *sentinel) Error() string { return e.msg }

// NotFound is a sentinel error answered 404: what a request names does
// not exist.
func NotFound(msg string) error { return &sentinel{msg, http.StatusNotFound} }

// Refused is a sentinel error answered 409: a request not carried out as
// things stand.
func Refused(msg string) error { return &sentinel{msg, http.StatusConflict} }

// Invalid is a sentinel error answered 400: a request that cannot be
// right.
func Invalid(msg string) error { return &sentinel{msg, http.StatusBadRequest} }

// of is an error of a sentinel with a message of its own.
type of struct {
	error
	kind error
}

func (e of) Is(target error) bool { return target == e.kind }
func (e of) As(target any) bool   { return errors.As(e.kind, target) }
func (e of) Unwrap() error        { return e.error }

// Of is err, with its own message, as an error of kind, a sentinel made
// by NotFound, Refused or Invalid: errors.Is(Of(kind, err), kind), and
// its status is kind's.
func Of(kind, err error) error { return of{err, kind} }

// Status is the status of the sentinel err is an error of, one made by
// NotFound, Refused or Invalid; 0 for any other error.
func Status(err error) int {
	if s, ok := errors.AsType[*sentinel](err); ok {
		return s.status
	}
	return 0
}

// Error maps the errors every route may meet to statuses: an error of a
// sentinel to the sentinel's (Status), its lines joined by "; ", and
// Kafka not answering in time to 503. Others are returned as they are.
func Error(err error) error {
	if status := Status(err); status != 0 {
		return echo.NewHTTPError(status, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return echo.NewHTTPError(http.StatusServiceUnavailable, "kafka did not answer in time")
	}
	return err
}
