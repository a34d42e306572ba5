package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/signature"
	"github.com/hookstream/hookstream/subscriptions"
)

// TestSubscriptionFlagsRefused: flags out of range, expressions that do
// not compile and headers a subscription may not have are refused with
// one line before any broker is asked.
func TestSubscriptionFlagsRefused(t *testing.T) {
	t.Setenv("HOOKSTREAM_BROKERS", "127.0.0.1:1") // nothing listens: a case that got this far would fail
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"subscriptions", "add", "--url", "https://a.example/hook", "--batch-max", "0"},
			"invalid subscription: batch_max: 0 is not between 1 and 1000"},
		{[]string{"subscriptions", "add", "--url", "https://a.example/hook", "--batch-max", "1001"},
			"invalid subscription: batch_max: 1001 is not between 1 and 1000"},
		{[]string{"subscriptions", "add", "--url", "https://a.example/hook", "--batch-max", "10", "--batch-wait", "11s"},
			"invalid subscription: batch_wait: 11s is not between 0s and 10s"},
		{[]string{"subscriptions", "update", "sub_a", "--batch-max", "0"},
			"invalid subscription: batch_max: 0 is not between 1 and 1000"},
		{[]string{"subscriptions", "update", "sub_a", "--batch-wait", "-1s"},
			"invalid subscription: batch_wait: -1s is not between 0s and 10s"},
		{[]string{"subscriptions", "add", "--url", "https://a.example/hook", "--filter", `data.action = "opened"`},
			"invalid subscription: invalid filter: line 1, column 13: Syntax error: token recognition error at: '= '; a single = does not compare: write =="},
		{[]string{"subscriptions", "update", "sub_a", "--filter", `data.action`},
			"invalid subscription: invalid filter: line 1, column 1: a filter must be a bool, this one is a dyn: compare it, as in data.draft == true"},
		{[]string{"subscriptions", "update", "sub_a", "--transform", `{"text": body.title}`},
			"invalid subscription: invalid transform: line 1, column 10: undeclared reference to 'body' (in container '')"},
		{[]string{"subscriptions", "add", "--url", "https://a.example/hook", "--header", "X-Token"},
			`--header: "X-Token" is not 'Name: value'`},
		{[]string{"subscriptions", "add", "--url", "https://a.example/hook", "--header", "x-a: 1", "--header", "X-A: 2"},
			"--header: X-A given twice"},
		{[]string{"subscriptions", "update", "sub_a", "--header", "X-A: 1", "--unset-header", "x-a"},
			"--header and --unset-header both name X-A"},
		{[]string{"subscriptions", "add", "--url", "https://a.example/hook", "--header", "Webhook-Signature: v1,forged"},
			"invalid subscription: headers: Webhook-Signature is set by hookstream and cannot be set by a subscription"},
		{[]string{"subscriptions", "update", "sub_a", "--header", "X-A:"},
			"invalid subscription: headers: X-A has an empty value"},
		{[]string{"subscriptions", "add", "--url", "https://a.example/hook", "--schedule", "1s,soon"},
			`--schedule: invalid duration "soon" (want e.g. 5s, 10m, 168h)`},
		{[]string{"subscriptions", "update", "sub_a", "--schedule", "1s,48h"},
			"invalid subscription: schedule: delay 2 (48h) is not above 0s and at most 24h"},
		{[]string{"subscriptions", "update", "sub_a", "--timeout", "90s"},
			"invalid subscription: timeout: 1m30s is not between 0s (HOOKSTREAM_DELIVERY_TIMEOUT) and 60s"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			root := &cobra.Command{Use: "hookstream", SilenceUsage: true, SilenceErrors: true}
			root.AddCommand(newSubscriptionsCommand())
			root.SetArgs(tt.args)
			root.SetOut(io.Discard)
			root.SetErr(io.Discard)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got := ""
			if err := root.ExecuteContext(ctx); err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("error: got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestSubscriptionControlsCLI: `subscriptions add|update` set a
// subscription's filter, transform, headers, schedule and timeout; `get`
// prints them, header values included; `list` never prints a header
// value; --header on update keeps the other headers, --unset-header
// removes one, --filter "" clears the filter; a filter that does not
// compile exits 1 and changes nothing.
func TestSubscriptionControlsCLI(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 3, 1<<20)
	cliEnv := map[string]string{"HOOKSTREAM_BROKERS": strings.Join(env.Seeds, ","), "HOOKSTREAM_TOPIC_PREFIX": env.Names.Prefix,
		"HOOKSTREAM_PARTITIONS": "3", "HOOKSTREAM_SECRET_KEY": newSecretKey(t)}
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, code := lagReplayRun(t, cliEnv, args...)
		if code != 0 {
			t.Fatalf("hookstream %s: exit %d, stderr %q", strings.Join(args, " "), code, errOut)
		}
		return out
	}
	getJSON := func(id string) subscriptions.Subscription {
		t.Helper()
		var s subscriptions.Subscription
		if err := json.Unmarshal([]byte(cli("subscriptions", "get", id, "--output", "json")), &s); err != nil {
			t.Fatal(err)
		}
		return s
	}

	const filter, transform = `source == "github" && data.action == "opened"`, `{"text": "opened: " + data.pull_request.title}`
	var created subscriptions.Subscription
	out := cli("subscriptions", "add", "--url", "https://ci.example.com/hook", "--output", "json",
		"--filter", filter, "--transform", transform, "--header", "authorization: Bearer tok-91c2", "--header", "X-Team: ci",
		"--schedule", "10s, 1m", "--timeout", "5s")
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatalf("add: %v in %q", err, out)
	}
	want := subscriptions.Subscription{Filter: filter, Transform: transform,
		Headers:  map[string]string{"Authorization": "Bearer tok-91c2", "X-Team": "ci"},
		Schedule: []subscriptions.Duration{subscriptions.Duration(10 * time.Second), subscriptions.Duration(time.Minute)},
		Timeout:  subscriptions.Duration(5 * time.Second)}
	controls := func(s subscriptions.Subscription) subscriptions.Subscription {
		return subscriptions.Subscription{Filter: s.Filter, Transform: s.Transform, Headers: s.Headers, Schedule: s.Schedule, Timeout: s.Timeout}
	}
	if got := controls(getJSON(created.ID)); !reflect.DeepEqual(got, want) {
		t.Fatalf("get after add: got %+v, want %+v", got, want)
	}

	table := cli("subscriptions", "get", created.ID)
	for _, line := range []string{
		"filter:     " + filter + "\n",
		"transform:  " + transform + "\n",
		"header:     Authorization: Bearer tok-91c2\n",
		"header:     X-Team: ci\n",
		"schedule:   10s,1m\n",
		"timeout:    5s\n",
	} {
		if !strings.Contains(table, line) {
			t.Errorf("get: output %q lacks %q", table, line)
		}
	}
	for _, args := range [][]string{{"subscriptions", "list"}, {"subscriptions", "list", "--output", "json"}} {
		if out := cli(args...); strings.Contains(out, "tok-91c2") || !strings.Contains(out, created.ID) {
			t.Errorf("%s: got %q, want the subscription without its header values", strings.Join(args, " "), out)
		}
	}

	out = cli("subscriptions", "update", created.ID, "--header", "x-team: platform", "--header", "X-Region: eu", "--unset-header", "authorization")
	if strings.Contains(out, "platform") || !strings.Contains(out, "header:     X-Team: …") {
		t.Errorf("update: output %q, want the headers with their values hidden", out)
	}
	want.Headers = map[string]string{"X-Team": "platform", "X-Region": "eu"}
	if got := controls(getJSON(created.ID)); !reflect.DeepEqual(got, want) {
		t.Errorf("after --header and --unset-header: got %+v, want %+v", got, want)
	}

	_, errOut, code := lagReplayRun(t, cliEnv, "subscriptions", "update", created.ID, "--filter", `data.action ==`, "--timeout", "1s")
	if code != 1 || !strings.HasPrefix(errOut, "hookstream: invalid subscription: invalid filter: line 1, column 15: ") {
		t.Errorf("update with a bad filter: exit %d, stderr %q; want exit 1 and invalid filter with its position", code, errOut)
	}
	if got := controls(getJSON(created.ID)); !reflect.DeepEqual(got, want) {
		t.Errorf("after a refused update: got %+v, want nothing changed %+v", got, want)
	}

	cli("subscriptions", "update", created.ID, "--filter", "", "--schedule", "", "--timeout", "0")
	want.Filter, want.Schedule, want.Timeout = "", nil, 0
	if got := controls(getJSON(created.ID)); !reflect.DeepEqual(got, want) {
		t.Errorf("after clearing: got %+v, want %+v", got, want)
	}
}

// TestPullTokenCLI: a pull subscription's secret is its pull token, and
// the CLI names it so: `add --pull`, `get` and `rotate-secret` print it as
// pull_token (JSON) or on a "pull token:" line (text), once, never as a
// secret; `list` hides it; a webhook's secret is still its secret.
func TestPullTokenCLI(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 3, 1<<20)
	cliEnv := map[string]string{"HOOKSTREAM_BROKERS": strings.Join(env.Seeds, ","), "HOOKSTREAM_TOPIC_PREFIX": env.Names.Prefix,
		"HOOKSTREAM_PARTITIONS": "3", "HOOKSTREAM_SECRET_KEY": newSecretKey(t)}
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, code := lagReplayRun(t, cliEnv, args...)
		if code != 0 {
			t.Fatalf("hookstream %s: exit %d, stderr %q", strings.Join(args, " "), code, errOut)
		}
		return out
	}
	type shown struct {
		ID                string
		Secret            *string `json:"secret"`
		PullToken         string  `json:"pull_token"`
		PreviousPullToken string  `json:"previous_pull_token"`
	}
	decode := func(out string) shown {
		t.Helper()
		var s shown
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("%v in %q", err, out)
		}
		return s
	}
	created := decode(cli("subscriptions", "add", "--pull", "--output", "json"))
	if !strings.HasPrefix(created.PullToken, "whsec_") || created.Secret != nil {
		t.Fatalf("add --pull --output json: %+v, want a pull_token and no secret", created)
	}
	if got := decode(cli("subscriptions", "get", created.ID, "--output", "json")); got.PullToken != created.PullToken || got.Secret != nil {
		t.Errorf("get --output json: %+v, want the pull_token %s and no secret", got, created.PullToken)
	}
	out := cli("subscriptions", "get", created.ID)
	if strings.Count(out, created.PullToken) != 1 || !strings.Contains(out, "pull token:  "+created.PullToken+" ") {
		t.Errorf("get: %q, want the token once, on its pull token line", out)
	}
	var listed []map[string]any
	if err := json.Unmarshal([]byte(cli("subscriptions", "list", "--output", "json")), &listed); err != nil || len(listed) != 1 ||
		listed[0]["pull_token"] != "whsec_…" || listed[0]["secret"] != nil || listed[0]["max_in_flight"] != nil || listed[0]["ordered"] != nil {
		t.Errorf("list --output json: %v %v, want the pull_token hidden, no secret, no max_in_flight nor ordered (they do not apply)", listed, err)
	}
	rotated := decode(cli("subscriptions", "rotate-secret", created.ID, "--output", "json"))
	if !strings.HasPrefix(rotated.PullToken, "whsec_") || rotated.PullToken == created.PullToken || rotated.PreviousPullToken != created.PullToken || rotated.Secret != nil {
		t.Errorf("rotate-secret --output json: %+v, want a new pull_token and the old one as previous_pull_token", rotated)
	}
	out = cli("subscriptions", "add", "--pull")
	if strings.Count(out, "whsec_") != 1 || !strings.Contains(out, "pull token:  whsec_") {
		t.Errorf("add --pull: %q, want the token once, on its pull token line", out)
	}
	if webhook := decode(cli("subscriptions", "add", "--url", "https://ci.example.com/hook", "--output", "json")); webhook.Secret == nil || webhook.PullToken != "" {
		t.Errorf("add --url --output json: %+v, want its secret and no pull_token", webhook)
	}
}

// TestTopicSubscriptionCLI: `subscriptions add --topic` creates a topic
// subscription and its topic; list and get show the topic; a topic of
// hookstream's own, or one another subscription writes, is refused.
func TestTopicSubscriptionCLI(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 3, 1<<20)
	cliEnv := map[string]string{"HOOKSTREAM_BROKERS": strings.Join(env.Seeds, ","), "HOOKSTREAM_TOPIC_PREFIX": env.Names.Prefix,
		"HOOKSTREAM_PARTITIONS": "3"}
	target := env.Names.Prefix + "-payments"
	out, errOut, code := lagReplayRun(t, cliEnv, "subscriptions", "add", "--topic", target, "--source", "stripe", "--output", "json")
	if code != 0 {
		t.Fatalf("add --topic: exit %d, stderr %q", code, errOut)
	}
	var s subscriptions.Subscription
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("add: %v in %q", err, out)
	}
	if s.Topic != target || s.URL != "" || s.Secret != "" {
		t.Errorf("add --topic: got %+v, want topic %s, no url nor secret", s, target)
	}
	if _, err := env.Admin(t).ListTopics(context.Background(), target); err != nil {
		t.Fatalf("list %s: %v", target, err)
	}
	for _, args := range [][]string{{"subscriptions", "list"}, {"subscriptions", "get", s.ID}} {
		out, errOut, code := lagReplayRun(t, cliEnv, args...)
		if code != 0 || !strings.Contains(out, "topic "+target) {
			t.Errorf("%s: exit %d, output %q (stderr %q), want it to show topic %s", strings.Join(args, " "), code, out, errOut, target)
		}
		// Ordering, batching and a secret do not apply to a topic subscription.
		if row, want := tableRow(out, s.ID), " - - stripe * -"; !strings.HasSuffix(row, want) {
			t.Errorf("%s: row %q, want it to end %q", strings.Join(args, " "), row, want)
		}
	}
	for _, name := range []string{string(env.Names.Events), "__consumer_offsets", target} {
		_, errOut, code := lagReplayRun(t, cliEnv, "subscriptions", "add", "--topic", name)
		if code == 0 || !strings.Contains(errOut, "topic: "+name) {
			t.Errorf("add --topic %s: exit %d, stderr %q; want it refused, naming the topic", name, code, errOut)
		}
	}
}

// TestSubscriptionsListShowsHealth: `subscriptions list` shows each
// subscription's health as the running instance's dispatcher tells it: a
// subscriber answering 401 makes its subscription failing, with "401
// Unauthorized", in the table and with --output json. When no admin API
// answers, list still lists, the health unknown (never delivering), and
// says why in one line on stderr naming the address.
func TestSubscriptionsListShowsHealth(t *testing.T) {
	t.Parallel()
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusUnauthorized) }))
	t.Cleanup(receiver.Close)
	d := newEmbedded(t)
	d.run(t, "hookstream run")
	cli := func(args ...string) (stdout, stderr string) {
		t.Helper()
		out, errOut, code := lagReplayRun(t, d.env(), args...)
		if code != 0 {
			t.Fatalf("hookstream %s: exit %d, stderr %q", strings.Join(args, " "), code, errOut)
		}
		return out, errOut
	}
	type listed struct {
		ID     string               `json:"id"`
		Health subscriptions.Health `json:"health"`
	}
	listJSON := func(args ...string) (listed, string) {
		t.Helper()
		out, errOut := cli(append([]string{"subscriptions", "list", "--output", "json"}, args...)...)
		var subs []listed
		if err := json.Unmarshal([]byte(out), &subs); err != nil || len(subs) != 1 {
			t.Fatalf("list --output json: %v in %q, want one subscription", err, out)
		}
		return subs[0], errOut
	}

	out, _ := cli("subscriptions", "add", "--url", receiver.URL+"/hook", "--schedule", "1h", "--output", "json")
	var sub struct{ ID string }
	if err := json.Unmarshal([]byte(out), &sub); err != nil {
		t.Fatalf("add: %v in %q", err, out)
	}
	for i := range subscriptions.FailingAfter {
		d.mustAccept(t, fmt.Sprintf("health-%d", i), `{"type":"push"}`)
	}
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		out, errOut := cli("subscriptions", "list")
		if !strings.Contains(out, "HEALTH") || !strings.Contains(tableRow(out, sub.ID), " failing (401 Unauthorized) ") || errOut != "" {
			return fmt.Errorf("list: stdout %q, stderr %q; want a HEALTH column, %s failing (401 Unauthorized), nothing on stderr", out, errOut, sub.ID)
		}
		return nil
	})
	if got, errOut := listJSON(); got.Health.State != subscriptions.HealthFailing || got.Health.Reason != "401 Unauthorized" || got.Health.Since.IsZero() || errOut != "" {
		t.Errorf("list --output json: health %+v, stderr %q; want failing, 401 Unauthorized, since when", got.Health, errOut)
	}

	away := kafkatest.FreeAddr(t) // no instance there
	out, errOut := cli("subscriptions", "list", "--admin-addr", away)
	if row := tableRow(out, sub.ID); !strings.Contains(row, " unknown") || strings.Contains(row, "delivering") {
		t.Errorf("list with no admin API: row %q, want its health unknown", row)
	}
	if strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "health unknown") || !strings.Contains(errOut, away) {
		t.Errorf("list with no admin API: stderr %q, want one line saying the health is unknown, naming %s", errOut, away)
	}
	if got, _ := listJSON("--admin-addr", away); got.Health.State != subscriptions.HealthUnknown || !strings.Contains(got.Health.Reason, away) {
		t.Errorf("list --output json with no admin API: health %+v, want unknown, why naming %s", got.Health, away)
	}
}

// TestSubscriptionsAddVerifyRefusedSignature: --verify to an endpoint that
// refuses the signature (hookstream sink with its own secret answers 401)
// says to pass the secret it verifies with as --secret, in one line, and
// writes nothing.
func TestSubscriptionsAddVerifyRefusedSignature(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 3, 1<<20)
	cliEnv := map[string]string{"HOOKSTREAM_BROKERS": strings.Join(env.Seeds, ","), "HOOKSTREAM_TOPIC_PREFIX": env.Names.Prefix,
		"HOOKSTREAM_PARTITIONS": "3", "HOOKSTREAM_DELIVERY_ALLOW_PRIVATE": "true"}
	sinkAddr := kafkatest.FreeAddr(t)
	sink := startProcess(t, "hookstream sink", nil, "sink", "--addr", sinkAddr, "--secret", signature.NewSecret())
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		sink.mustBeAlive(t)
		if !strings.Contains(sink.output.String(), "sink listening") {
			return fmt.Errorf("sink not listening yet")
		}
		return nil
	})
	for _, args := range [][]string{
		{"subscriptions", "add", "--verify", "--url", "http://" + sinkAddr + "/"},
		{"subscriptions", "add", "--verify", "--url", "http://" + sinkAddr + "/", "--secret", signature.NewSecret()},
	} {
		_, errOut, code := lagReplayRun(t, cliEnv, args...)
		if code != 1 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "401") || !strings.Contains(errOut, "pass the secret it verifies with as --secret") {
			t.Errorf("%s: exit %d, stderr %q; want exit 1 and one line saying to pass --secret", strings.Join(args, " "), code, errOut)
		}
	}
	if out, errOut, code := lagReplayRun(t, cliEnv, "subscriptions", "list"); code != 0 || out != "no subscriptions\n" {
		t.Errorf("subscriptions list: exit %d, stdout %q, stderr %q; want nothing written", code, out, errOut)
	}
}

// TestSubscriptionsListByTeam: list --team lists only that team's
// subscriptions, each naming its team, and --team "" those no team owns.
func TestSubscriptionsListByTeam(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 3, 1<<20)
	cliEnv := map[string]string{"HOOKSTREAM_BROKERS": strings.Join(env.Seeds, ","), "HOOKSTREAM_TOPIC_PREFIX": env.Names.Prefix,
		"HOOKSTREAM_PARTITIONS": "3", "HOOKSTREAM_ADMIN_ADDR": kafkatest.FreeAddr(t)}
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, code := lagReplayRun(t, cliEnv, args...)
		if code != 0 {
			t.Fatalf("hookstream %s: exit %d, stderr %q", strings.Join(args, " "), code, errOut)
		}
		return out
	}
	ids := make(map[string]string)
	for _, team := range []string{"blue", "green", ""} {
		var s struct{ ID string }
		if err := json.Unmarshal([]byte(cli("subscriptions", "add", "--url", "https://example.com/"+team, "--team", team, "--output", "json")), &s); err != nil {
			t.Fatal(err)
		}
		ids[team] = s.ID
	}
	for _, team := range []string{"blue", "green", ""} {
		var listed []struct{ ID, Team string }
		if err := json.Unmarshal([]byte(cli("subscriptions", "list", "--team", team, "--output", "json")), &listed); err != nil {
			t.Fatal(err)
		}
		if len(listed) != 1 || listed[0].ID != ids[team] || listed[0].Team != team {
			t.Errorf("list --team %q: got %+v, want only %s of team %q", team, listed, ids[team], team)
		}
	}
}
