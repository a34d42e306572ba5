package admin_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookstream/hookstream/admin"
)

// TestErrorStatus: an error of a sentinel, wrapped or made by Of, answers
// the sentinel's status with its own message, its lines joined; Kafka not
// answering in time answers 503; any other error has no status and is
// returned as it is.
func TestErrorStatus(t *testing.T) {
	errGone := admin.NotFound("gone")
	errBusy := admin.Refused("busy")
	errBad := admin.Invalid("bad")
	other := errors.New("other")
	for _, tc := range []struct {
		name   string
		err    error
		is     error
		status int
		msg    string
	}{
		{"sentinel", errGone, errGone, http.StatusNotFound, "gone"},
		{"wrapped", fmt.Errorf("%w: a\nb", errBad), errBad, http.StatusBadRequest, "bad: a; b"},
		{"of", admin.Of(errBusy, errors.New("the group has members")), errBusy, http.StatusConflict, "the group has members"},
		{"of, wrapped", fmt.Errorf("replay: %w", admin.Of(errBusy, errors.New("members"))), errBusy, http.StatusConflict, "replay: members"},
		{"deadline", fmt.Errorf("list: %w", context.DeadlineExceeded), context.DeadlineExceeded, 0, "kafka did not answer in time"},
		{"other", other, other, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !errors.Is(tc.err, tc.is) {
				t.Errorf("errors.Is(%v, %v): got false, want true", tc.err, tc.is)
			}
			if got := admin.Status(tc.err); got != tc.status {
				t.Errorf("Status: got %d, want %d", got, tc.status)
			}
			got := admin.Error(tc.err)
			he, ok := errors.AsType[*echo.HTTPError](got)
			switch {
			case tc.msg == "" && got != tc.err:
				t.Errorf("Error: got %v, want the error as it is", got)
			case tc.msg != "" && (!ok || he.Message != tc.msg):
				t.Errorf("Error: got %v, want %q", got, tc.msg)
			}
		})
	}
	if errors.Is(admin.Of(errGone, other), errBusy) || errors.Is(errGone, errBusy) {
		t.Error("an error of one sentinel passes for another")
	}
}

// TestAnswersAreNotHTMLEscaped: the JSON the admin API answers, errors
// included, reads as written: a CEL syntax error's '<EOF>' is not
// \u003cEOF\u003e.
func TestAnswersAreNotHTMLEscaped(t *testing.T) {
	const msg = "invalid filter: line 1, column 11: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER} & more"
	srv := admin.New(admin.Config{}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	srv.API().GET("/refused", func(*echo.Context) error { return admin.Error(admin.Of(admin.Invalid("invalid"), errors.New(msg))) }, admin.Readers...)
	srv.API().GET("/answer", func(c *echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"filter": `data.a < 1 && data.b > 2`})
	}, admin.Readers...)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	for path, want := range map[string]string{
		"/api/refused": `{"error":"` + msg + `"}` + "\n",
		"/api/answer":  `{"filter":"data.a < 1 && data.b > 2"}` + "\n",
	} {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if string(body) != want {
			t.Errorf("GET %s: got %s, want %s", path, body, want)
		}
	}
}
