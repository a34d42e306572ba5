package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDocumentedSubscriptionExamples runs the `subscriptions add`
// commands of docs/delivery.md's "Subscription controls" as written, on a
// test broker, and checks what the subscriptions they create take and
// send against provider payloads (testdata/providers): a pull request
// opened on main matches, one on another branch does not; a push becomes
// the Slack message the page shows; a Stripe event over the amount
// matches, one under it or without an amount does not.
func TestDocumentedSubscriptionExamples(t *testing.T) {
	t.Parallel()
	commands := documentedCommands(t, "../../docs/delivery.md", "## Subscription controls", map[string]string{"FINANCE_TOKEN": "tok-5e1f"})
	env := kafkatest.New(t, 3, 1<<20)
	cliEnv := map[string]string{"HOOKSTREAM_BROKERS": strings.Join(env.Seeds, ","), "HOOKSTREAM_TOPIC_PREFIX": env.Names.Prefix,
		"HOOKSTREAM_PARTITIONS": "3", "HOOKSTREAM_SECRET_KEY": newSecretKey(t)}
	byURL := map[string]subscriptions.Subscription{}
	for _, args := range commands {
		if len(args) < 3 || args[0] != "hookstream" || args[1] != "subscriptions" || args[2] != "add" {
			t.Fatalf("documented command %q: want hookstream subscriptions add", args)
		}
		out, errOut, code := lagReplayRun(t, cliEnv, append(args[1:], "--output", "json")...)
		if code != 0 {
			t.Fatalf("%s: exit %d, stderr %q", strings.Join(args, " "), code, errOut)
		}
		var created subscriptions.Subscription
		if err := json.Unmarshal([]byte(out), &created); err != nil {
			t.Fatalf("%s: %v in %q", strings.Join(args, " "), err, out)
		}
		// What the dispatchers will read: the stored subscription.
		out, errOut, code = lagReplayRun(t, cliEnv, "subscriptions", "get", created.ID, "--output", "json")
		var stored subscriptions.Subscription
		if code != 0 || json.Unmarshal([]byte(out), &stored) != nil {
			t.Fatalf("get %s: exit %d, stdout %q, stderr %q", created.ID, code, out, errOut)
		}
		byURL[stored.URL] = stored
	}
	sub := func(url string) subscriptions.Subscription {
		t.Helper()
		s, ok := byURL[url]
		if !ok {
			t.Fatalf("no documented subscription to %s among %d", url, len(byURL))
		}
		return s
	}

	pr := fixture(t, "github-pull-request-opened.json")
	prOn := func(action, base string) map[string]any {
		p := clone(t, pr)
		p["action"] = action
		p["pull_request"].(map[string]any)["base"].(map[string]any)["ref"] = base
		return p
	}
	push := fixture(t, "github-push.json")
	payment := fixture(t, "stripe-payment-intent-succeeded.json")
	paymentOf := func(amount int) map[string]any {
		p := clone(t, payment)
		p["data"].(map[string]any)["object"].(map[string]any)["amount"] = amount
		return p
	}
	customer := fixture(t, "stripe-customer-created.json")

	ci := sub("https://ci.example.com/hooks/pull-requests")
	slack := sub("https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX")
	finance := sub("https://finance.example.com/hooks/large-payments")
	for _, tt := range []struct {
		name  string
		sub   subscriptions.Subscription
		event *topics.Envelope
		want  bool
	}{
		{"pull request opened on main", ci, github("pull_request", prOn("opened", "main")), true},
		{"pull request opened on a release branch", ci, github("pull_request", prOn("opened", "release-1.2")), false},
		{"pull request closed on main", ci, github("pull_request", prOn("closed", "main")), false},
		{"push to main, to the CI", ci, github("push", push), false},
		{"push, to Slack", slack, github("push", push), true},
		{"pull request, to Slack", slack, github("pull_request", pr), false},
		{"payment of 2,500.00", finance, stripe(payment), true},
		{"payment of exactly 1,000.00", finance, stripe(paymentOf(100000)), true},
		{"payment of 42.00", finance, stripe(paymentOf(4200)), false},
		{"customer created, no amount", finance, stripe(customer), false},
		{"push, to finance", finance, github("push", push), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := takes(t, tt.sub, tt.event)
			if err != nil || got != tt.want {
				t.Errorf("filter %q: got %v, %v; want %v without error", tt.sub.Filter, got, err, tt.want)
			}
		})
	}

	body, err := subscriptions.Compile(slack).Render(event(t, github("push", push)), 0)
	want := `{"text":"octocat pushed 2 commit(s) to octocat/hello-world (refs/heads/main): https://github.com/octocat/hello-world/compare/6113728f27ae...0d1a26e67d8f"}`
	if err != nil || string(body) != want {
		t.Errorf("Slack transform of a push: got %s, %v; want %s", body, err, want)
	}

	if finance.Headers["Authorization"] != "Bearer tok-5e1f" || len(finance.Schedule) != 3 || finance.Timeout != subscriptions.Duration(10*time.Second) {
		t.Errorf("finance subscription: headers %v, schedule %v, timeout %v; want the token from $FINANCE_TOKEN, 3 delays, 10s",
			finance.Headers, finance.Schedule, finance.Timeout)
	}
}

// takes reports whether s takes event, as a dispatcher judges it
// (subscriptions.Compile): its globs, then its filter.
func takes(t *testing.T, s subscriptions.Subscription, ev *topics.Envelope) (bool, error) {
	d := subscriptions.Compile(s).Match(event(t, ev))
	return d.Match, d.Err
}

// event is env as the record a dispatcher reads.
func event(t *testing.T, env *topics.Envelope) *subscriptions.Event {
	t.Helper()
	value, err := env.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return subscriptions.NewEvent(&kgo.Record{Value: value})
}

// github is the envelope of a GitHub delivery of eventType, with the
// source of docs/sources.md (type from X-GitHub-Event, carried).
func github(eventType string, payload map[string]any) *topics.Envelope {
	return envelope("github", "72d3162e-cc78-11e3-81ab-4c9367dc0958", eventType,
		map[string]string{"x-github-event": eventType, "x-github-delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958"}, payload)
}

// stripe is the envelope of a Stripe event (type from its JSON).
func stripe(payload map[string]any) *topics.Envelope {
	return envelope("stripe", payload["id"].(string), payload["type"].(string), map[string]string{"stripe-signature": "t=1714557960,v1=5257a869"}, payload)
}

func envelope(source, eventID, eventType string, headers map[string]string, payload map[string]any) *topics.Envelope {
	data, _ := json.Marshal(payload)
	return &topics.Envelope{ID: source + ":" + eventID, Source: source, EventID: eventID, Type: eventType,
		ReceivedAt: time.Date(2024, 5, 1, 10, 6, 0, 0, time.UTC), ContentType: "application/json", Headers: headers, Data: data}
}

func fixture(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "providers", name))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return v
}

func clone(t *testing.T, v map[string]any) map[string]any {
	t.Helper()
	b, _ := json.Marshal(v)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// documentedCommands returns the commands of the sh blocks of section
// (from its heading to the next) of the markdown file at path, split into
// words as a shell splits them, $VAR expanded from vars.
func documentedCommands(t *testing.T, path, section string, vars map[string]string) [][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, text, ok := strings.Cut(string(b), "\n"+section+"\n")
	if !ok {
		t.Fatalf("%s: no section %q", path, section)
	}
	if end := strings.Index(text, "\n## "); end >= 0 {
		text = text[:end]
	}
	var commands [][]string
	inBlock, line := false, ""
	for _, l := range strings.Split(text, "\n") {
		switch {
		case l == "```sh":
			inBlock = true
			continue
		case l == "```":
			inBlock = false
			continue
		case !inBlock || strings.HasPrefix(l, "#") || strings.TrimSpace(l) == "":
			continue
		}
		if cont, ok := strings.CutSuffix(l, `\`); ok {
			line += cont
			continue
		}
		words, err := shellWords(line+l, vars)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		commands = append(commands, words)
		line = ""
	}
	if len(commands) == 0 {
		t.Fatalf("%s: no command in section %q", path, section)
	}
	return commands
}

// shellWords splits s as sh does for the quoting the docs use: single
// quotes keep everything, double quotes expand $VAR and take \" and \\.
func shellWords(s string, vars map[string]string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	expand := func(i int) int { // s[i] == '$'; returns the index after the name
		j := i + 1
		for j < len(s) && (s[j] == '_' || 'A' <= s[j] && s[j] <= 'Z' || 'a' <= s[j] && s[j] <= 'z' || '0' <= s[j] && s[j] <= '9') {
			j++
		}
		w.WriteString(vars[s[i+1:j]])
		return j
	}
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == ' ' || c == '\t':
			if inWord {
				words, inWord = append(words, w.String()), false
				w.Reset()
			}
			i++
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("unterminated ' in %q", s)
			}
			w.WriteString(s[i+1 : i+1+end])
			inWord, i = true, i+end+2
		case c == '"':
			inWord, i = true, i+1
			for ; i < len(s) && s[i] != '"'; i++ {
				switch {
				case s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\' || s[i+1] == '$'):
					i++
					w.WriteByte(s[i])
				case s[i] == '$':
					i = expand(i) - 1
				default:
					w.WriteByte(s[i])
				}
			}
			if i == len(s) {
				return nil, fmt.Errorf("unterminated \" in %q", s)
			}
			i++
		case c == '$':
			inWord, i = true, expand(i)
		default:
			w.WriteByte(c)
			inWord, i = true, i+1
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}
