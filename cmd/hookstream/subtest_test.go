package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/signature"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// TestSubscriptionsTestCLI: `subscriptions test` says whether a
// subscription receives an event found on the events topic or given in a
// file, and prints the exact request: the transform's body and every
// header, signed so that the subscriber's check passes; bad arguments
// exit 1 with one line.
func TestSubscriptionsTestCLI(t *testing.T) {
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
	var sub subscriptions.Subscription
	if err := json.Unmarshal([]byte(cli("subscriptions", "add", "--url", "https://ci.example.com/hook", "--output", "json",
		"--source", "github", "--filter", `data.action == "opened"`, "--transform", `{"text": "opened: " + data.title}`,
		"--header", "Authorization: Bearer tok-1")), &sub); err != nil {
		t.Fatal(err)
	}

	envelope := func(id, action string) []byte {
		e := &topics.Envelope{ID: "github:" + id, Source: "github", EventID: id, Type: "pull_request",
			ReceivedAt: time.Now().UTC(), ProcessedAt: time.Now().UTC(), Data: json.RawMessage(`{"action":"` + action + `","title":"Fix it"}`)}
		v, err := e.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if err := env.Client(t).ProduceSync(ctx, &kgo.Record{Topic: string(env.Names.Events), Key: []byte("github:pr1"), Value: envelope("pr1", "opened"),
		Headers: []kgo.RecordHeader{{Key: topics.HeaderSource, Value: []byte("github")}, {Key: topics.HeaderEventType, Value: []byte("pull_request")},
			{Key: topics.HeaderTraceparent, Value: []byte(traceparent)}}}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	var p subscriptions.Preview
	if err := json.Unmarshal([]byte(cli("subscriptions", "test", sub.ID, "--event", "github:pr1", "--output", "json")), &p); err != nil {
		t.Fatal(err)
	}
	if !p.Match || !strings.Contains(string(p.Body), `"text": "opened: Fix it"`) || p.Headers["authorization"] != "Bearer tok-1" || p.Headers["webhook-id"] != "github:pr1" {
		t.Fatalf("test --event: got %+v", p)
	}
	key, _ := signature.DecodeSecret(sub.Secret)
	var body bytes.Buffer // --output json indents it; the transform's JSON is compact
	if err := json.Compact(&body, p.Body); err != nil {
		t.Fatal(err)
	}
	if err := signature.Verify([][]byte{key}, p.Headers["webhook-id"], p.Headers["webhook-timestamp"], p.Headers["webhook-signature"], body.Bytes(), time.Now(), time.Minute); err != nil {
		t.Errorf("the printed signature does not verify: %v", err)
	}

	table := cli("subscriptions", "test", sub.ID, "--event", "github:pr1")
	for _, line := range []string{"match:   yes\n", "POST https://ci.example.com/hook\n", "Authorization: Bearer tok-1\n",
		"Content-Type: application/json\n", "Webhook-Id: github:pr1\n", "User-Agent: hookstream/", "\n{\"text\":\"opened: Fix it\"}\n"} {
		if !strings.Contains(table, line) {
			t.Errorf("test: output %q lacks %q", table, line)
		}
	}

	file := filepath.Join(t.TempDir(), "envelope.json")
	if err := os.WriteFile(file, envelope("pr2", "closed"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := cli("subscriptions", "test", sub.ID, "--file", file); !strings.HasPrefix(out, "match:   no\nreason:  source \"github\" matches \"github\", type \"pull_request\" (no event_types: all), but the filter is false\n") ||
		strings.Contains(out, "POST") {
		t.Errorf("test --file: got %q, want no match by the filter and no request", out)
	}

	// A pull subscription: what a pull answer carries for the event.
	var pulled struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(cli("subscriptions", "add", "--pull", "--output", "json", "--transform", `{"title": data.title}`)), &pulled); err != nil {
		t.Fatal(err)
	}
	p = subscriptions.Preview{}
	if err := json.Unmarshal([]byte(cli("subscriptions", "test", pulled.ID, "--event", "github:pr1", "--output", "json")), &p); err != nil {
		t.Fatal(err)
	}
	if !p.Match || !strings.Contains(string(p.Body), `"title": "Fix it"`) || p.Headers != nil || p.TraceContext["traceparent"] != traceparent {
		t.Errorf("test of a pull subscription --output json: got %+v, want the item served and its trace context, no headers", p)
	}
	table = cli("subscriptions", "test", pulled.ID, "--event", "github:pr1")
	for _, line := range []string{"match:   yes\n", "a pull answer (GET /subscriptions/" + pulled.ID + "/events) carries it as\n",
		"  events[i]:          {\"title\":\"Fix it\"}\n", "  trace_contexts[i]:  {\"traceparent\":\"" + traceparent + "\"}\n"} {
		if !strings.Contains(table, line) {
			t.Errorf("test of a pull subscription: output %q lacks %q", table, line)
		}
	}
	if strings.Contains(table, "POST") || strings.Contains(table, "Webhook-") {
		t.Errorf("test of a pull subscription: output %q shows a webhook request", table)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"subscriptions", "test", sub.ID}, "hookstream: name the event with --event SOURCE:ID or give its envelope with --file, one of the two\n"},
		{[]string{"subscriptions", "test", sub.ID, "--event", "github:pr1", "--file", file}, "hookstream: name the event with --event"},
		{[]string{"subscriptions", "test", sub.ID, "--event", "github:nope"}, "hookstream: event not found: github:nope"},
		{[]string{"subscriptions", "test", "sub_nope", "--event", "github:pr1"}, "hookstream: subscription not found: sub_nope\n"},
		{[]string{"subscriptions", "test", sub.ID, "--file", filepath.Join(t.TempDir(), "none.json")}, "hookstream: --file: open "},
	} {
		if _, errOut, code := lagReplayRun(t, cliEnv, tc.args...); code != 1 || !strings.HasPrefix(errOut, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit 1 and %q", strings.Join(tc.args, " "), code, errOut, tc.want)
		}
	}
}
