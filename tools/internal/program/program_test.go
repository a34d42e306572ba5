package program

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestStatus(t *testing.T) {
	for _, c := range []struct {
		err  error
		code int
		msg  string
	}{
		{errors.New("no broker"), 1, "tool: no broker"},
		{fmt.Errorf("round 2: %w", errors.New("down")), 1, "tool: round 2: down"},
		{Usage("--rates: %q is not a positive rate", "x"), 2, `tool: --rates: "x" is not a positive rate`},
		{Exit(2, errors.New("bad (seed 7)")), 2, "tool: bad (seed 7)"},
		{Exit(1, nil), 1, ""},
	} {
		code, msg := status("tool", c.err)
		if code != c.code || msg != c.msg {
			t.Errorf("status(%v) = %d, %q; want %d, %q", c.err, code, msg, c.code, c.msg)
		}
	}
}

func TestReport(t *testing.T) {
	r := struct {
		Rate float64 `json:"rate"`
	}{Rate: 2.5}
	text := func(w io.Writer) error { _, err := fmt.Fprintf(w, "rate %.1f\n", r.Rate); return err }
	var b strings.Builder
	if err := Report(&b, false, r, text); err != nil || b.String() != "rate 2.5\n" {
		t.Errorf("text report = %q, %v", b.String(), err)
	}
	b.Reset()
	if err := Report(&b, true, r, text); err != nil || b.String() != "{\n  \"rate\": 2.5\n}\n" {
		t.Errorf("JSON report = %q, %v", b.String(), err)
	}
}
