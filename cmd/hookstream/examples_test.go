package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/ingest"
	"github.com/hookstream/hookstream/subscriptions"
)

// The payloads the README sends and the docs' subscriptions are written
// for: real provider webhooks in examples/webhooks, posted as their
// providers sign them with the secrets of examples/sources.yaml.
const (
	samplesDir    = "../../examples/webhooks"
	sampleSources = "../../examples/sources.yaml"
)

// samplePost is one webhook the examples test sends: a payload of
// examples/webhooks, possibly edited into a variant the docs speak of.
type samplePost struct {
	name      string // what the docs call it
	file      string // in examples/webhooks
	eventType string // GitHub's X-GitHub-Event; Stripe's is in the JSON
	edit      func(map[string]any)
}

var samplePosts = []samplePost{
	{name: "push", file: "github-push.json", eventType: "push"},
	{name: "pull request opened on main", file: "github-pull-request-opened.json", eventType: "pull_request"},
	{name: "pull request opened on a release branch", file: "github-pull-request-opened.json", eventType: "pull_request",
		edit: func(p map[string]any) {
			p["pull_request"].(map[string]any)["base"].(map[string]any)["ref"] = "release-1.2"
		}},
	{name: "pull request closed on main", file: "github-pull-request-opened.json", eventType: "pull_request",
		edit: func(p map[string]any) { p["action"] = "closed" }},
	{name: "payment of 2,500.00", file: "stripe-payment-intent-succeeded.json"},
	{name: "payment of exactly 1,000.00", file: "stripe-payment-intent-succeeded.json", edit: stripeAmount(100000)},
	{name: "payment of 42.00", file: "stripe-payment-intent-succeeded.json", edit: stripeAmount(4200)},
	{name: "customer created, no amount", file: "stripe-customer-created.json"},
}

func stripeAmount(cents int) func(map[string]any) {
	return func(p map[string]any) {
		p["id"] = fmt.Sprintf("%s_%d", p["id"], cents)
		p["data"].(map[string]any)["object"].(map[string]any)["amount"] = cents
	}
}

var (
	sampleGitHub = []string{"push", "pull request opened on main", "pull request opened on a release branch", "pull request closed on main"}
	sampleStripe = []string{"payment of 2,500.00", "payment of exactly 1,000.00", "payment of 42.00", "customer created, no amount"}
	sampleAll    = append(slices.Clone(sampleGitHub), sampleStripe...)
)

// documentedTakes is, for every subscription the README and docs/ create
// with `subscriptions add` (by URL, topic:NAME or pull:SOURCES), the
// sample webhooks it receives as the page says; it is filtered from the
// others. A subscription documented without an entry here fails the test.
var documentedTakes = map[string][]string{
	// README: the sink takes everything, so do the pull loop and the
	// topic subscription of pushes.
	"http://127.0.0.1:9000/": sampleAll,
	"pull:":                  sampleAll,
	"topic:ci.pushes":        {"push"},
	// docs/delivery.md: the introduction and batching take every event
	// their globs name.
	"https://ci.example.com/hook":                {"pull request opened on main", "pull request opened on a release branch", "pull request closed on main"},
	"https://warehouse.example.com/hook":         sampleAll,
	"topic:billing.stripe-payments":              {"payment of 2,500.00"}, // amount > 100000
	"pull:stripe":                                sampleStripe,
	"https://ci.example.com/hooks/pull-requests": {"pull request opened on main"},
	"https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX": {"push"},
	"https://finance.example.com/hooks/large-payments":                              {"payment of 2,500.00", "payment of exactly 1,000.00"},
	// docs/alerts.md: hookstream's own operational events only.
	"https://hooks.slack.com/services/T000/B000/XXXX": nil,
	// docs/deployment.md: the Compose CLI's example and the demo sink
	// take everything.
	"https://example.com/hook": sampleAll,
	"http://sink:9000/":        sampleAll,
}

// TestDocumentedSubscriptionExamples runs `hookstream run` with the sample
// sources file, posts the sample webhooks (examples/webhooks) signed as
// their providers sign them, and runs every `subscriptions add` of the
// README and docs/ as written against the same broker. Each subscription
// must take the events its page says and no other, and render every event
// it takes: a transform that fails on one would dead-letter it. The Slack
// example renders a push as the page shows, the finance one carries its
// token, schedule and timeout.
func TestDocumentedSubscriptionExamples(t *testing.T) {
	t.Parallel()
	d := newEmbedded(t)
	d.extra = map[string]string{"HOOKSTREAM_CONFIG": sampleSources}
	p := d.run(t, "hookstream run --config examples/sources.yaml")
	sources, err := ingest.LoadSources(sampleSources, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}

	keys := make(map[string]string) // sample name -> record key
	for i, post := range samplePosts {
		body, headers := samplePayload(t, post, i)
		source, _, _ := strings.Cut(post.file, "-")
		status, resp := postSigned(t, d.httpAddr, source, sources.Sources[source].Verify.Secret, headers, body)
		if status != http.StatusAccepted {
			t.Fatalf("%s: POST /webhooks/%s: got %d %v, want 202", post.name, source, status, resp)
		}
		keys[post.name] = resp["id"].(string)
	}
	waitProcessed(t, d.kafka, p, 30*time.Second)
	events := make(map[string]*kgo.Record)
	for _, r := range d.kafka.Records(t, d.kafka.Names.Events) {
		events[string(r.Key)] = r
	}

	cliEnv := map[string]string{"HOOKSTREAM_EMBEDDED_ADDR": d.brokerAddr}
	created := make(map[string]subscriptions.Subscription) // by documentedTakes key
	for _, doc := range documentedAdds(t, map[string]string{"FINANCE_TOKEN": "tok-5e1f"}) {
		out, errOut, code := lagReplayRun(t, cliEnv, append(doc.args, "--output", "json")...)
		if code != 0 {
			t.Fatalf("%s: %s: exit %d, stderr %q", doc.file, strings.Join(doc.args, " "), code, errOut)
		}
		var sub subscriptions.Subscription
		if err := json.Unmarshal([]byte(out), &sub); err != nil {
			t.Fatalf("%s: %s: %v in %q", doc.file, strings.Join(doc.args, " "), err, out)
		}
		// What the dispatchers will read: the stored subscription.
		out, errOut, code = lagReplayRun(t, cliEnv, "subscriptions", "get", sub.ID, "--output", "json")
		if code != 0 || json.Unmarshal([]byte(out), &sub) != nil {
			t.Fatalf("get %s: exit %d, stdout %q, stderr %q", sub.ID, code, out, errOut)
		}
		key := subscriptionKey(sub)
		if _, ok := documentedTakes[key]; !ok {
			t.Errorf("%s: %s creates %s, which documentedTakes does not list: say what it receives", doc.file, strings.Join(doc.args, " "), key)
			continue
		}
		created[key] = sub
	}
	for key := range documentedTakes {
		if _, ok := created[key]; !ok {
			t.Errorf("documentedTakes lists %s, which no page creates", key)
		}
	}

	for _, key := range slices.Sorted(maps.Keys(created)) {
		sub := created[key]
		c := subscriptions.Compile(sub)
		for _, post := range samplePosts {
			t.Run(key+"/"+post.name, func(t *testing.T) {
				rec := events[keys[post.name]]
				if rec == nil {
					t.Fatalf("%s: no record %s on the events topic", post.name, keys[post.name])
				}
				want := slices.Contains(documentedTakes[key], post.name)
				d := c.Match(subscriptions.NewEvent(rec))
				if d.Err != nil || d.Match != want {
					t.Fatalf("filter %q, sources %q, types %q: got %v, %v; want %v without error", sub.Filter, sub.Sources, sub.EventTypes, d.Match, d.Err, want)
				}
				if !d.Match {
					return
				}
				if _, err := c.Render(subscriptions.NewEvent(rec), 0); err != nil {
					t.Errorf("transform %q fails, so the event would be dead-lettered: %v", sub.Transform, err)
				}
			})
		}
	}

	slack := created["https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"]
	body, err := subscriptions.Compile(slack).Render(subscriptions.NewEvent(events[keys["push"]]), 0)
	want := `{"text":"octocat pushed 2 commit(s) to octocat/hello-world (refs/heads/main): https://github.com/octocat/hello-world/compare/6113728f27ae...0d1a26e67d8f"}`
	if err != nil || string(body) != want {
		t.Errorf("Slack transform of a push: got %s, %v; want %s", body, err, want)
	}
	finance := created["https://finance.example.com/hooks/large-payments"]
	if finance.Headers["Authorization"] != "Bearer tok-5e1f" || len(finance.Schedule) != 3 || finance.Timeout != subscriptions.Duration(10*time.Second) {
		t.Errorf("finance subscription: headers %v, schedule %v, timeout %v; want the token from $FINANCE_TOKEN, 3 delays, 10s",
			finance.Headers, finance.Schedule, finance.Timeout)
	}
}

// subscriptionKey names s in documentedTakes: its URL, topic:NAME, or
// pull:SOURCES.
func subscriptionKey(s subscriptions.Subscription) string {
	switch {
	case s.Topic != "":
		return "topic:" + s.Topic
	case s.Pull:
		return "pull:" + strings.Join(s.Sources, ",")
	}
	return s.URL
}

// samplePayload returns the body of post and the headers its provider
// sends besides the signature; i makes each GitHub delivery id unique.
func samplePayload(t *testing.T, post samplePost, i int) ([]byte, map[string]string) {
	t.Helper()
	body, err := os.ReadFile(filepath.Join(samplesDir, post.file))
	if err != nil {
		t.Fatal(err)
	}
	if post.edit != nil {
		var v map[string]any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("%s: %v", post.file, err)
		}
		post.edit(v)
		if body, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	headers := map[string]string{"Content-Type": "application/json"}
	if post.eventType != "" {
		headers["X-GitHub-Event"] = post.eventType
		headers["X-GitHub-Delivery"] = fmt.Sprintf("72d3162e-cc78-11e3-81ab-4c9367dc%04d", i)
	}
	return body, headers
}

// postSigned posts body to /webhooks/source with headers, signed with
// secret as the source's provider signs: GitHub's X-Hub-Signature-256 or
// Stripe's Stripe-Signature (a wrong secret makes a wrong signature).
func postSigned(t *testing.T, httpAddr, source, secret string, headers map[string]string, body []byte) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+httpAddr+"/webhooks/"+source, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	switch source {
	case "github":
		req.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex(secret, body))
	case "stripe":
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		req.Header.Set("Stripe-Signature", "t="+ts+",v1="+hmacHex(secret, append([]byte(ts+"."), body...)))
	default:
		t.Fatalf("no signing for source %s", source)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST /webhooks/%s: %v", source, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("POST /webhooks/%s: answer: %v", source, err)
	}
	return resp.StatusCode, out
}

func hmacHex(secret string, msg []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(msg)
	return hex.EncodeToString(m.Sum(nil))
}

// TestSampleSources loads examples/sources.yaml as `hookstream run
// --config` does: a sample webhook of each source signed with its secret
// is accepted, one signed with another secret or not signed is refused
// 401, and a source the file does not name 404.
func TestSampleSources(t *testing.T) {
	t.Parallel()
	sources, err := ingest.LoadSources(sampleSources, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("examples/sources.yaml: %v", err)
	}
	d := newEmbedded(t)
	d.extra = map[string]string{"HOOKSTREAM_CONFIG": sampleSources}
	d.run(t, "hookstream run --config examples/sources.yaml")
	for i, post := range []samplePost{samplePosts[0], samplePosts[4]} {
		source, _, _ := strings.Cut(post.file, "-")
		secret := sources.Sources[source].Verify.Secret
		if secret == "" {
			t.Fatalf("examples/sources.yaml: source %s has no secret", source)
		}
		body, headers := samplePayload(t, post, i)
		if status, resp := postSigned(t, d.httpAddr, source, secret, headers, body); status != http.StatusAccepted {
			t.Errorf("%s signed with its secret: got %d %v, want 202", source, status, resp)
		}
		body, headers = samplePayload(t, post, i+100)
		if status, resp := postSigned(t, d.httpAddr, source, "not-the-secret", headers, body); status != http.StatusUnauthorized || resp["error"] != "invalid signature" {
			t.Errorf("%s signed with another secret: got %d %v, want 401 invalid signature", source, status, resp)
		}
		if status, resp := postJSON(t, d.httpAddr, source, string(body)); status != http.StatusUnauthorized {
			t.Errorf("%s unsigned: got %d %v, want 401", source, status, resp)
		}
	}
	if status, resp := postJSON(t, d.httpAddr, "shopify", `{"id":1}`); status != http.StatusNotFound {
		t.Errorf("a source the file does not name: got %d %v, want 404", status, resp)
	}
}

// documentedAdd is one `subscriptions add` of the README or docs/: its
// arguments from "subscriptions" on, without --output.
type documentedAdd struct {
	file string
	args []string
}

// documentedAdds returns every `subscriptions add` in the sh blocks of
// README.md and docs/*.md, run as `hookstream ...` or through Compose's
// cli service, split into words as a shell splits them, $VAR expanded
// from vars.
func documentedAdds(t *testing.T, vars map[string]string) []documentedAdd {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var adds []documentedAdd
	for _, path := range append([]string{"../../README.md"}, files...) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		file := strings.TrimPrefix(path, "../../")
		inBlock, line := false, ""
		for _, l := range strings.Split(string(b), "\n") {
			switch {
			case l == "```sh":
				inBlock = true
				continue
			case l == "```":
				inBlock = false
				continue
			case !inBlock || strings.HasPrefix(l, "#"):
				continue
			}
			if cont, ok := strings.CutSuffix(l, `\`); ok {
				line += cont
				continue
			}
			l, line = line+l, ""
			if !strings.Contains(l, "subscriptions add") {
				continue
			}
			words, err := shellWords(l, vars)
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			i := slices.Index(words, "subscriptions")
			if i < 1 || words[i+1] != "add" || !strings.HasSuffix(words[i-1], "hookstream") && words[i-1] != "cli" {
				t.Fatalf("%s: %q: want hookstream subscriptions add", file, l)
			}
			var args []string
			for _, w := range words[i:] {
				w, end := strings.CutSuffix(w, ")") // SUB=$(hookstream subscriptions add ...)
				if w == "|" || w == "#" {
					break
				}
				args = append(args, w)
				if end {
					break
				}
			}
			if j := slices.Index(args, "--output"); j >= 0 {
				args = slices.Delete(args, j, j+2)
			}
			adds = append(adds, documentedAdd{file: file, args: args})
		}
	}
	if len(adds) == 0 {
		t.Fatal("no subscriptions add in README.md or docs/")
	}
	return adds
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

// TestReadmeQuickStart follows the README's quick start as a newcomer
// does: `hookstream run` with the arguments of its first command, then
// every curl it posts to /webhooks, signed as its SIG=$(openssl dgst ...)
// lines sign, each answered as the README's comment under it says. Every
// body is a payload of examples/webhooks, so the docs' subscriptions are
// written for what the README sends. Once the events are processed, the
// log holds no warning or error beyond those of the start.
func TestReadmeQuickStart(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, text, ok := strings.Cut(string(raw), "\n## Quick start\n")
	if !ok {
		t.Fatal("README: no section Quick start")
	}
	text, _, _ = strings.Cut(text, "\n## ")
	steps := shSteps(text)
	if len(steps) == 0 || !strings.HasPrefix(steps[0].command, "go run ./cmd/hookstream run") {
		t.Fatalf("README: the quick start does not begin with go run ./cmd/hookstream run: %+v", steps[:min(len(steps), 1)])
	}
	runArgs, err := shellWords(strings.TrimPrefix(steps[0].command, "go run ./cmd/hookstream run"), nil)
	if err != nil {
		t.Fatal(err)
	}
	d := newEmbedded(t)
	d.extra = map[string]string{}
	for i := 0; i < len(runArgs); i += 2 {
		if runArgs[i] != "--config" || i+1 == len(runArgs) {
			t.Fatalf("README: run %q: the test knows only --config FILE", runArgs)
		}
		d.extra["HOOKSTREAM_CONFIG"] = filepath.Join("../..", runArgs[i+1])
	}
	p := d.run(t, "hookstream run (README)")

	vars := make(map[string]string)
	signing := regexp.MustCompile(`^(\w+)=\$\(openssl dgst -sha256 -hmac (\S+) (\S+) \| sed 's/\.\*= //'\)$`)
	answer := regexp.MustCompile(`^# HTTP/1\.1 (\d{3})`)
	posts := 0
	for _, step := range steps {
		if m := signing.FindStringSubmatch(step.command); m != nil {
			body, err := os.ReadFile(filepath.Join("../..", m[3]))
			if err != nil {
				t.Fatalf("README: %s: %v", step.command, err)
			}
			vars[m[1]] = hmacHex(m[2], body)
			continue
		}
		if !strings.HasPrefix(step.command, "curl ") || !strings.Contains(step.command, "/webhooks/") {
			continue
		}
		posts++
		words, err := shellWords(step.command, vars)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(http.MethodPost, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		var bodyFile string
		for i := 1; i < len(words); i++ {
			switch w := words[i]; {
			case w == "-i" || w == "-s" || w == "-sf":
			case w == "-X" && i+1 < len(words) && words[i+1] == "POST":
				i++
			case w == "-H" && i+1 < len(words):
				i++
				k, v, _ := strings.Cut(words[i], ":")
				req.Header.Set(k, strings.TrimSpace(v))
			case w == "--data-binary" && i+1 < len(words) && strings.HasPrefix(words[i+1], "@"):
				i++
				bodyFile = words[i][1:]
			case strings.HasPrefix(w, "localhost:8080/webhooks/"):
				req.URL, err = req.URL.Parse("http://" + d.httpAddr + strings.TrimPrefix(w, "localhost:8080"))
				if err != nil {
					t.Fatal(err)
				}
			default:
				t.Fatalf("README: %s: the test does not know curl's %q; post a file of examples/webhooks with --data-binary @FILE", step.command, w)
			}
		}
		if dir, _ := filepath.Split(bodyFile); dir != "examples/webhooks/" || req.URL.Host == "" {
			t.Fatalf("README: %s: want a POST to localhost:8080/webhooks/SOURCE of a payload of examples/webhooks (--data-binary @examples/webhooks/FILE)", step.command)
		}
		body, err := os.ReadFile(filepath.Join("../..", bodyFile))
		if err != nil {
			t.Fatal(err)
		}
		req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("README: %s: %v", step.command, err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := answer.FindStringSubmatch(step.comment)
		if m == nil {
			t.Errorf("README: %s: no # HTTP/1.1 <status> under it (got %d %s)", step.command, resp.StatusCode, got)
		} else if want, _ := strconv.Atoi(m[1]); resp.StatusCode != want {
			t.Errorf("README: %s: got %d %s, want %d as the README says", step.command, resp.StatusCode, got, want)
		}
	}
	if posts == 0 {
		t.Fatal("README: the quick start posts no webhook")
	}
	waitProcessed(t, d.kafka, p, 30*time.Second)
	if code := p.stop(t, 20*time.Second); code != 0 {
		t.Errorf("exit code after SIGTERM: got %d, want 0", code)
	}
	_, after, _ := strings.Cut(p.output.String(), "hookstream running")
	for _, l := range strings.Split(after, "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			t.Errorf("log after the start: %s", l)
		}
	}
}

// shStep is one command of a Markdown sh block (its continuation lines
// joined) and the comment lines right under it.
type shStep struct{ command, comment string }

// shSteps returns the commands of the sh blocks of a Markdown text.
func shSteps(text string) []shStep {
	var steps []shStep
	inBlock, line := false, ""
	for _, l := range strings.Split(text, "\n") {
		switch {
		case l == "```sh":
			inBlock = true
		case l == "```":
			inBlock = false
		case !inBlock || strings.TrimSpace(l) == "":
		case strings.HasPrefix(l, "#"):
			if len(steps) > 0 {
				steps[len(steps)-1].comment += l + "\n"
			}
		default:
			if cont, ok := strings.CutSuffix(l, `\`); ok {
				line += cont
				continue
			}
			command, _, _ := strings.Cut(line+l, "   # ") // a comment after the command
			steps = append(steps, shStep{command: strings.TrimSpace(command)})
			line = ""
		}
	}
	return steps
}
