package expr

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hookstream/hookstream/topics"
)

func TestCompileBounds(t *testing.T) {
	for _, tc := range []struct {
		name, src, msg string
		line, col      int
	}{
		{"source too long", `source == "` + strings.Repeat("a", MaxSourceBytes) + `"`, "bytes long", 0, 0},
		{"nested too deep", strings.Repeat("(", MaxNesting+1) + "true" + strings.Repeat(")", MaxNesting+1), "recursion", 0, 0},
		{"too many nodes", "size([" + strings.Repeat("0,", MaxNodes) + "0]) > 0", "node", 0, 0},
		{"cross product of two data lists", `data.a.exists(x, data.b.exists(y, x == y))`, "estimated cost", 0, 0},
		{"membership across data lists", `data.a.exists(x, x in data.b)`, "estimated cost", 0, 0},
		{"three nested comprehensions", `data.a.all(x, x.b.all(y, y.c.all(z, data.d.exists(w, w == z))))`, "estimated cost", 0, 0},
		{"the nested comprehension located", "source == \"github\" &&\n  data.commits.exists(c, data.commits.exists(d, c.id == d.id))", "estimated cost", 2, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, compile := range []func(string) error{
				func(s string) error { _, err := CompileFilter(s); return err },
				func(s string) error { _, err := CompileTransform(s); return err },
			} {
				err := compile(tc.src)
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("error %v, want an *Error", err)
				}
				if e.Line < 1 || e.Column < 1 || !strings.Contains(e.Msg, tc.msg) {
					t.Errorf("error %v, want one at a line and column saying %q", e, tc.msg)
				}
				if tc.line != 0 && (e.Line != tc.line || e.Column != tc.col) {
					t.Errorf("error %v, want it at line %d, column %d", e, tc.line, tc.col)
				}
			}
		})
	}
}

// TestRealFiltersCompile checks that the bounds leave room for real filters
// and transforms: the documented examples, and GitHub-, Stripe- and
// Slack-shaped ones.
func TestRealFiltersCompile(t *testing.T) {
	for _, src := range []string{
		`source == "github" && data.action == "opened"`,
		`has(data.amount) && data.amount > 1000`,
		`source == "github" && headers["x-github-event"] == "pull_request" && data.action in ["opened", "reopened", "synchronize"] && !data.pull_request.draft && data.pull_request.base.ref == "main"`,
		`data.pull_request.labels.exists(l, l.name == "deploy" || l.name.startsWith("release/"))`,
		`data.commits.exists(c, c.modified.exists(f, f.startsWith("docs/") || f.endsWith(".md")))`,
		`data.commits.exists(c, "README.md" in c.modified || "README.md" in c.added)`,
		`data.commits.all(c, c.author.email.endsWith("@example.com")) && data.ref.matches("^refs/heads/(main|release/.*)$")`,
		`source == "stripe" && data.type == "invoice.payment_failed" && data.data.object.amount_due >= 10000 && data.data.object.currency == "usd"`,
		`data.data.object.lines.data.exists(l, l.price.recurring.interval == "year" && l.amount > 500)`,
		`source == "slack" && form.command == "/deploy" && form.text.contains("prod")`,
		`received_at > timestamp("2020-01-01T00:00:00Z") && replay == 0 && type != "ping"`,
	} {
		if _, err := CompileFilter(src); err != nil {
			t.Errorf("CompileFilter(%s): %v", src, err)
		}
	}
	for _, src := range []string{
		`{"text": "push to " + data.repository.full_name + " by " + data.pusher.name}`,
		`{"text": "<" + data.compare + "|" + string(size(data.commits)) + " new commits> pushed to " + data.ref,
		  "blocks": data.commits.map(c, {"type": "section", "text": {"type": "mrkdwn", "text": "<" + c.url + "|" + c.id + "> " + c.message + " - " + c.author.name}})}`,
		`{"invoice": data.data.object.id, "amount": data.data.object.amount_due / 100, "lines": data.data.object.lines.data.map(l, {"price": l.price.id, "amount": l.amount})}`,
		`{"id": id, "at": received_at, "event": data}`,
	} {
		if _, err := CompileTransform(src); err != nil {
			t.Errorf("CompileTransform(%s): %v", src, err)
		}
	}
}

// bigEnvelope is an event whose body is a list of n items and a string of
// 1 MiB.
func bigEnvelope(n int) *topics.Envelope {
	var b strings.Builder
	b.WriteString(`{"big":"`)
	b.WriteString(strings.Repeat("ab", 1<<19))
	b.WriteString(`","items":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"item-%d","n":%d}`, i, i)
	}
	b.WriteString(`]}`)
	return &topics.Envelope{ID: "x:1", Source: "x", EventID: "1", Data: []byte(b.String())}
}

// TestRuntimeCostLimit: expressions that pass the estimate, on payloads far
// larger than it assumed, end with the cost limit's error instead of
// running on; comprehensions stay linear in their iterations.
func TestRuntimeCostLimit(t *testing.T) {
	huge := NewInput(bigEnvelope(200_000))
	small := NewInput(bigEnvelope(1_000))
	for _, tc := range []struct {
		name, src string
		in        *Input
		transform bool
	}{
		{"a string operation on each of 200,000 items", `data.items.exists(i, i.name.contains("nothing-like-it"))`, huge, false},
		{"a map over 200,000 items", `data.items.map(i, {"n": i.name + i.name})`, huge, true},
		{"a 1 MiB string scanned for each item", `data.items.exists(i, data.big.contains(i.name))`, small, false},
		{"a 1 MiB string concatenated for each item", `data.items.map(i, data.big + i.name)`, small, true},
		{"a pattern over 1 MiB for each item", `data.items.exists(i, data.big.matches("^(a|b)*c$"))`, small, false},
		{"the payload compared to itself for each item", `data.items.exists(i, data == dyn(data) && i.n < 0)`, small, false},
		{"the payload looked for in a list for each item", `data.items.exists(i, data in [i, i, data] && i.n < 0)`, small, false},
		{"a list of the payload referenced many times", "[" + strings.Repeat("data,", 500) + "data]", small, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.transform {
				var tr *Transform
				if tr, err = CompileTransform(tc.src); err != nil {
					t.Fatal(err)
				}
				var out []byte
				out, err = tr.Apply(tc.in)
				if err == nil {
					t.Fatalf("Apply = %d bytes, nil; want the cost limit's error", len(out))
				}
			} else {
				var f *Filter
				if f, err = CompileFilter(tc.src); err != nil {
					t.Fatal(err)
				}
				var ok bool
				ok, err = f.Match(tc.in)
				if err == nil {
					t.Fatalf("Match = %v, nil; want the cost limit's error", ok)
				}
			}
			if !strings.Contains(err.Error(), "cost limit exceeded") {
				t.Errorf("error %q, want the cost limit's", err)
			}
		})
	}
}

// TestLargePayloadWithinLimit: a single pass over 20,000 items, building a
// list (whose accumulator is read for free), is within the limit.
func TestLargePayloadWithinLimit(t *testing.T) {
	in := NewInput(bigEnvelope(20_000))
	tr, err := CompileTransform(`data.items.filter(i, i.n % 2 == 0).map(i, i.n)`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := tr.Apply(in)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if !strings.HasPrefix(string(out), "[0,2,4,") || !strings.HasSuffix(string(out), ",19998]") {
		t.Errorf("Apply = %.40s...", out)
	}
	f, err := CompileFilter(`data.items.exists(i, i.name == "item-19999") && size(data.big) > 0`)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := f.Match(in); !ok || err != nil {
		t.Errorf("Match = %v, %v; want true", ok, err)
	}
}

// TestCostOfTypicalFilters: a typical filter on a GitHub payload costs a
// few units, several orders of magnitude below the limit.
func TestCostOfTypicalFilters(t *testing.T) {
	in := NewInput(testEnvelope())
	for _, src := range []string{
		`source == "github" && data.ref == "refs/heads/main" && data.commits.exists(c, c.message.contains("deploy"))`,
	} {
		f, err := CompileFilter(src)
		if err != nil {
			t.Fatal(err)
		}
		m := &meter{in: in}
		if _, _, err := f.prg.Eval(m); err != nil {
			t.Fatal(err)
		}
		if m.cost > 100 {
			t.Errorf("%s costs %d units, want at most 100", src, m.cost)
		}
	}
}

func TestPatterns(t *testing.T) {
	for _, tc := range []struct {
		src       string
		line, col int
		msg       string
	}{
		{`data.ref.matches(data.pattern)`, 1, 18, "literal pattern"},
		{"source == \"x\" ||\n  matches(data.ref, \"(\")", 2, 21, "missing closing )"},
		{`data.ref.matches("[a-z]{1000}")`, 1, 18, "instructions"},
	} {
		_, err := CompileFilter(tc.src)
		var e *Error
		if !errors.As(err, &e) || e.Line != tc.line || e.Column != tc.col || !strings.Contains(e.Msg, tc.msg) {
			t.Errorf("CompileFilter(%s) = %v, want an error at %d:%d saying %q", tc.src, err, tc.line, tc.col, tc.msg)
		}
	}
	for src, want := range map[string]bool{
		`data.ref.matches("^refs/heads/(main|release/.*)$")`: true,
		`matches(data.ref, "^refs/tags/")`:                   false,
		`data.repository.id.matches("1")`:                    false, // an evaluation error: not a string
	} {
		got, err := match(t, src, testEnvelope())
		if (err == nil && got != want) || (err != nil && src != `data.repository.id.matches("1")`) {
			t.Errorf("%s: Match = %v, %v; want %v", src, got, err, want)
		}
	}
}
