package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/user"
	"slices"
	"strings"
	"testing"

	"github.com/hookstream/hookstream/admin"
)

// TestCLIChangesInTheAuditTrail: the commands that write the topics
// themselves, not through the admin API, record their changes in the
// audit trail as cli:<user>@<host>, with the actions, targets and field
// names the API records, and never a value.
func TestCLIChangesInTheAuditTrail(t *testing.T) {
	a := startAccessNode(t)
	kafka := []string{"--brokers", strings.Join(a.n.cfg.Brokers, ","), "--topic-prefix", a.n.cfg.TopicPrefix}
	run := func(args ...string) string {
		t.Helper()
		root := newRootCommand()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(io.Discard)
		root.SetArgs(append(args, kafka...))
		if err := root.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("hookstream %s: %v", strings.Join(args, " "), err)
		}
		return out.String()
	}
	const (
		secret  = "whsec_Y2xpLWF1ZGl0LXRlc3Qtc3Vic2NyaWJlci1zZWNyZXQ="
		rotated = "whsec_cm90YXRlZC1ieS10aGUtY2xpLWF1ZGl0LXRlc3Q="
		header  = "Bearer downstream-credential-of-the-cli"
		key     = "api-key-of-the-cli-audit-test"
	)
	var sub struct{ ID string }
	out := run("subscriptions", "add", "--url", "https://example.com/cli", "--secret", secret,
		"--header", "Authorization: "+header, "--description", "payments", "--output", "json")
	if err := json.Unmarshal([]byte(out), &sub); err != nil || sub.ID == "" {
		t.Fatalf("subscriptions add: got %q (%v), want the subscription as JSON", out, err)
	}
	id := sub.ID
	run("subscriptions", "update", id, "--url", "https://example.com/v2", "--header", "X-Api-Key: "+key)
	run("subscriptions", "disable", id)
	run("subscriptions", "enable", id)
	run("subscriptions", "rotate-secret", id, "--secret", rotated)
	run("replay", "--group", "processor", "--to-earliest", "--execute")
	run("replay", "--group", "processor", "--to-latest") // a dry run changes nothing
	run("dlq", "redrive", "--dlq", "delivery", "--all", "--execute")
	run("dlq", "redrive", "--all") // a dry run changes nothing
	run("subscriptions", "rm", id)

	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	actor := "cli:" + me.Username + "@" + host

	out, err = a.cli(t, accessToken, "audit", "--actor", actor, "--output", "json")
	if err != nil {
		t.Fatalf("audit --actor %s: %v", actor, err)
	}
	type line struct {
		action, target string
		status         int
		fields         []string
	}
	want := []line{
		{"subscription.create", id, 201, []string{"description", "headers", "secret", "url"}},
		{"subscription.update", id, 200, []string{"headers", "url"}},
		{"subscription.disable", id, 200, []string{"enabled"}},
		{"subscription.enable", id, 200, []string{"enabled"}},
		{"subscription.rotate", id, 200, []string{"secret"}},
		{"replay.execute", "processor", 200, []string{"group", "target"}},
		{"dlq.redrive", "delivery", 200, []string{"all", "kind"}},
		{"subscription.delete", id, 204, nil},
	}
	var got []line
	for _, l := range strings.FieldsFunc(out, func(r rune) bool { return r == '\n' }) {
		var r admin.Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("audit --output json: line %q: %v", l, err)
		}
		if r.Actor.Name != actor || r.At.IsZero() {
			t.Errorf("record %+v: want actor %s and a time", r, actor)
		}
		got = append(got, line{r.Action, r.Target, r.Status, r.Fields})
	}
	if len(got) != len(want) {
		t.Fatalf("audit --actor %s: got %d records %+v, want %d", actor, len(got), got, len(want))
	}
	for i, w := range want {
		if g := got[i]; g.action != w.action || g.target != w.target || g.status != w.status || !slices.Equal(g.fields, w.fields) {
			t.Errorf("record %d: got %+v, want %+v", i, g, w)
		}
	}

	// No value reaches the trail: every record, read as the API serves it.
	out, err = a.cli(t, accessToken, "audit", "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{secret, rotated, header, key, "downstream-credential-of-the-cli", "https://example.com"} {
		if strings.Contains(out, s) {
			t.Errorf("the audit trail holds %q: %s", s, out)
		}
	}
}
