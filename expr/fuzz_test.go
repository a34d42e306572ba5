package expr

import (
	"errors"
	"strings"
	"testing"
)

// FuzzCompile: compiling any source never panics, and every refusal is an
// *Error within the source (line from 1 to its number of lines, column from
// 1); whatever compiles evaluates on an event without panicking.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		`source == "github" && data.action == "opened"`,
		`has(data.amount) && data.amount > 1000`,
		`{"text": "push to " + data.repository.full_name + " by " + data.pusher.name}`,
		`data.commits.exists(c, c.modified.exists(f, f.endsWith(".md")))`,
		`data.a.exists(x, data.b.exists(y, x == y))`,
		`received_at > timestamp("2020-01-01T00:00:00Z") && replay == 0`,
		`headers["x-github-event"] == "push" && form.text.matches("^p")`,
		"source ==\n\t\"é\" &&& 1",
		`[1, 2u, 2.0, b"x", null, {1: true}][0]`,
		`"\u2028\xff" + string(type(data))`,
		"((((((((((((((((((((((((((((((((((true))))))))))))))))))))))))))))))))))",
		`data.commits.map(c, c.message).filter(m, m.size() > 3)`,
	} {
		f.Add(s)
	}
	in := NewInput(testEnvelope())
	f.Fuzz(func(t *testing.T, src string) {
		lines := strings.Count(src, "\n") + 1
		check := func(what string, err error) {
			if err == nil {
				return
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%s(%q): %T %v, not an *Error", what, src, err, err)
			}
			if e.Line < 1 || e.Line > lines || e.Column < 1 {
				t.Fatalf("%s(%q): error %v outside the source (%d lines)", what, src, e, lines)
			}
		}
		filter, err := CompileFilter(src)
		check("CompileFilter", err)
		if err == nil {
			_, _ = filter.Match(in)
		}
		tr, err := CompileTransform(src)
		check("CompileTransform", err)
		if err == nil {
			_, _ = tr.Apply(in)
		}
	})
}
