package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookstream/hookstream/events"
	"github.com/hookstream/hookstream/internal/kafkatest"
)

// TestPullEndToEnd: `subscriptions add --pull` prints the pull token,
// list shows the kind, `events pull` prints the events as JSON lines and
// keeps its cursor in a file, resuming after it; the ledger shows each
// event acknowledged by the pull subscription; and the pull endpoint is
// on the ingest listener.
func TestPullEndToEnd(t *testing.T) {
	t.Parallel()
	d := newEmbedded(t)
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, code := lagReplayRun(t, map[string]string{"HOOKSTREAM_EMBEDDED_ADDR": d.brokerAddr, "HOOKSTREAM_ADMIN_ADDR": d.adminAddr}, args...)
		if code != 0 {
			t.Fatalf("hookstream %s: exit %d, %s %s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	run := d.run(t, "hookstream run")
	var sub struct {
		ID     string
		Secret string `json:"pull_token"`
		Pull   bool
	}
	added := cli("subscriptions", "add", "--pull", "--from", "earliest", "--output", "json")
	if err := json.Unmarshal([]byte(added), &sub); err != nil || !sub.Pull || sub.Secret == "" {
		t.Fatalf("subscriptions add --pull: %+v %v, want a pull subscription with its token", sub, err)
	}
	// The README's curl loop takes the id and the token from that output.
	var fields map[string]any
	if err := json.Unmarshal([]byte(added), &fields); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"ID": sub.ID, "TOKEN": sub.Secret} {
		if field := readmeSubField(t, name); fields[field] != want {
			t.Errorf("README: %s=$(... | jq -r .%s) takes %v from subscriptions add --pull --output json, want %q", name, field, fields[field], want)
		}
	}
	if out := cli("subscriptions", "get", sub.ID); !strings.Contains(out, "pull token:  "+sub.Secret) {
		t.Errorf("subscriptions get: %q lacks the pull token", out)
	}
	if out := cli("subscriptions", "list"); !strings.Contains(out, "KIND") || !strings.Contains(out, sub.ID+"  pull") || strings.Contains(out, sub.Secret) {
		t.Errorf("subscriptions list: %q, want a KIND column saying pull and no token", out)
	}

	d.mustAccept(t, "p-1", `{"n":1}`)
	d.mustAccept(t, "p-2", "{\n  \"n\": 2\n}\n") // pretty-printed, as providers send: still one line
	waitProcessed(t, d.kafka, run, 30*time.Second)
	cursorFile := filepath.Join(t.TempDir(), "cursor")
	pullArgs := []string{"events", "pull", sub.ID, "--token", sub.Secret, "--url", "http://" + d.httpAddr, "--cursor-file", cursorFile}
	ids := func(out string) []string {
		var got []string
		for line := range strings.Lines(out) {
			var e struct{ ID string }
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("events pull line %q: %v", line, err)
			}
			got = append(got, e.ID)
		}
		slices.Sort(got)
		return got
	}
	if got := ids(cli(pullArgs...)); !slices.Equal(got, []string{"github:p-1", "github:p-2"}) {
		t.Errorf("events pull: got %v, want both events", got)
	}
	if b, err := os.ReadFile(cursorFile); err != nil || len(b) < 10 {
		t.Errorf("cursor file: %q %v", b, err)
	}
	d.mustAccept(t, "p-3", `{"n":3}`)
	waitProcessed(t, d.kafka, run, 30*time.Second)
	if got := ids(cli(pullArgs...)); !slices.Equal(got, []string{"github:p-3"}) {
		t.Errorf("events pull from its cursor file: got %v, want the new event alone", got)
	}

	// --follow long-polls: an event posted while it waits is printed.
	follower := startProcess(t, "events pull --follow", map[string]string{}, append(pullArgs, "--follow")...)
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		follower.mustBeAlive(t)
		if m, err := metricSum(d.adminAddr, "hookstream_pull_waiting"); err != nil || m != 1 {
			return fmt.Errorf("waiting long polls: %v %v, want 1", m, err)
		}
		return nil
	})
	d.mustAccept(t, "p-4", `{"n":4}`)
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		follower.mustBeAlive(t)
		if !strings.Contains(follower.output.String(), `"id":"github:p-4"`) {
			return fmt.Errorf("events pull --follow printed %q, want p-4", follower.output.String())
		}
		return nil
	})
	// Ctrl-C during a long poll ends it quietly.
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		follower.mustBeAlive(t)
		if m, err := metricSum(d.adminAddr, "hookstream_pull_waiting"); err != nil || m != 1 {
			return fmt.Errorf("waiting long polls: %v %v, want 1", m, err)
		}
		return nil
	})
	if code := interrupt(t, follower, 30*time.Second); code != 0 || strings.Contains(follower.output.String(), "hookstream:") {
		t.Errorf("events pull --follow after Ctrl-C: exit %d, output\n%s\nwant exit 0 and nothing but the events", code, follower.output.String())
	}

	// The last pull presented the cursor past p-1 and p-2: their stories
	// show them delivered to the pull subscription.
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		out, errOut, code := lagReplayRun(t, map[string]string{"HOOKSTREAM_EMBEDDED_ADDR": d.brokerAddr, "HOOKSTREAM_ADMIN_ADDR": d.adminAddr},
			"events", "get", "github:p-1", "--output", "json")
		var s events.Story
		if code != 0 || json.Unmarshal([]byte(out), &s) != nil {
			return fmt.Errorf("events get: exit %d, %s %s", code, out, errOut)
		}
		for _, dl := range s.Deliveries {
			if dl.Subscription == sub.ID && dl.State == "delivered" {
				return nil
			}
		}
		return fmt.Errorf("story deliveries %+v, want %s delivered", s.Deliveries, sub.ID)
	})

	// The table has no HTTP status for an acknowledgment: "-", as for an
	// attempt that got no answer.
	out := cli("events", "get", "github:p-1")
	var row []string
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == sub.ID {
			row = f
		}
	}
	if len(row) != 4 || row[1] != "delivered" || row[3] != "-" {
		t.Errorf("events get: subscription row %q in %q, want it delivered, with - for its last status", row, out)
	}

	// A wrong token: the command fails with the endpoint's answer.
	_, errOut, code := lagReplayRun(t, nil, "events", "pull", sub.ID, "--token", "whsec_wrong", "--url", "http://"+d.httpAddr)
	if code == 0 || !strings.Contains(errOut, "401") || !strings.Contains(errOut, "subscriptions get "+sub.ID) {
		t.Errorf("events pull with a wrong token: exit %d, stderr %q; want a failure naming 401 and where the pull token is shown", code, errOut)
	}
	if status, _, err := httpGet("http://" + d.httpAddr + "/subscriptions/" + sub.ID + "/events"); err != nil || status != http.StatusUnauthorized {
		t.Errorf("GET without a token: %d %v, want 401", status, err)
	}
}

// readmeSubField is the field of `subscriptions add --output json` that
// the README's pull loop assigns to the shell variable name, as
// NAME=$(echo "$SUB" | jq -r .FIELD).
func readmeSubField(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`\b` + name + `=\$\(echo "\$SUB" \| jq -r \.(\w+)\)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("README: no %s=$(echo \"$SUB\" | jq -r .FIELD)", name)
	}
	return string(m[1])
}
