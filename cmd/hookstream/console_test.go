package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/internal/kafkatest"
)

// The console's tests drive it as an operator does: Debian's chromium,
// headless, through chromedp, against a `hookstream run` on kfake (the
// embedded broker), or on the Apache Kafka of HOOKSTREAM_TEST_BROKERS.
// Each subtest signs in from a fresh browser profile and reads what the
// page shows. Without a browser on PATH they skip, in one line; with
// HOOKSTREAM_REQUIRE_BROWSER=1 (CI) a missing browser fails them.
// HOOKSTREAM_SCREENSHOTS=DIR writes the README's screenshots (1280×800)
// to DIR.

const (
	requireBrowserEnv = "HOOKSTREAM_REQUIRE_BROWSER"
	screenshotsEnv    = "HOOKSTREAM_SCREENSHOTS"
	consoleToken      = "console-test-admin-token"
	// browserTimeout bounds one browser action; waits poll up to their own.
	browserTimeout = 20 * time.Second
)

// browserPaths are the names Debian and others give Chromium.
var browserPaths = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"}

// newBrowser starts a headless Chromium for the test and returns its
// context, or skips (fails under HOOKSTREAM_REQUIRE_BROWSER=1) without one.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path := ""
	for _, name := range browserPaths {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		msg := "console tests need Chromium: none of " + strings.Join(browserPaths, ", ") + " is on PATH (apt-get install chromium)"
		if os.Getenv(requireBrowserEnv) == "1" {
			t.Fatal(msg + ", and " + requireBrowserEnv + "=1")
		}
		t.Skip(msg)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.WindowSize(1280, 800),
		chromedp.UserDataDir(t.TempDir()),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// consoleNode is a `hookstream run` with an admin token, its console at
// base.
type consoleNode struct {
	*embedded
	proc *process
	base string // http://<admin address>
}

// startConsoleNode starts `hookstream run` with every role, on the
// embedded broker or, with HOOKSTREAM_TEST_BROKERS, on that cluster.
// Deliveries are retried twice, 100ms apart, before a dead letter.
func startConsoleNode(t *testing.T) *consoleNode {
	t.Helper()
	d := newEmbedded(t)
	d.extra = map[string]string{
		"HOOKSTREAM_ADMIN_TOKEN":            consoleToken,
		"HOOKSTREAM_DELIVERY_SCHEDULE":      "100ms,100ms",
		"HOOKSTREAM_DELIVERY_DISABLE_AFTER": "1h",
		"HOOKSTREAM_TRACE_URL":              "http://127.0.0.1:16686/trace/{trace_id}",
	}
	if kafkatest.Real() {
		d.kafka = kafkatest.New(t, 3, 1<<20)
		d.extra["HOOKSTREAM_BROKERS"] = strings.Join(d.kafka.Seeds, ",")
		d.extra["HOOKSTREAM_TOPIC_PREFIX"] = d.kafka.Names.Prefix
		d.extra["HOOKSTREAM_PARTITIONS"] = "3"
		d.extra["HOOKSTREAM_DELIVERY_ALLOW_PRIVATE"] = "true" // the subscribers are httptest servers
		d.extra["HOOKSTREAM_DELIVERY_REQUIRE_HTTPS"] = "false"
	}
	n := &consoleNode{embedded: d, base: "http://" + d.adminAddr}
	n.proc = d.run(t, "hookstream run")
	return n
}

// cli runs a hookstream command against the node.
func (n *consoleNode) cli(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	env := map[string]string{"HOOKSTREAM_EMBEDDED_ADDR": n.brokerAddr, "HOOKSTREAM_ADMIN_ADDR": n.adminAddr, "HOOKSTREAM_ADMIN_TOKEN": consoleToken}
	for _, k := range []string{"HOOKSTREAM_BROKERS", "HOOKSTREAM_TOPIC_PREFIX", "HOOKSTREAM_PARTITIONS", "HOOKSTREAM_DELIVERY_ALLOW_PRIVATE", "HOOKSTREAM_DELIVERY_REQUIRE_HTTPS"} {
		if v, ok := n.extra[k]; ok {
			env[k] = v
		}
	}
	return lagReplayRun(t, env, args...)
}

// subscribe adds a subscription to url from the earliest event and
// returns its id.
func (n *consoleNode) subscribe(t *testing.T, url string) string {
	t.Helper()
	out, errOut, code := n.cli(t, "subscriptions", "add", "--url", url, "--from", "earliest", "--output", "json")
	var sub struct{ ID string }
	if code != 0 || json.Unmarshal([]byte(out), &sub) != nil || sub.ID == "" {
		t.Fatalf("subscriptions add: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	return sub.ID
}

// enabled reads whether subscription id is enabled, as the CLI shows it.
func (n *consoleNode) enabled(t *testing.T, id string) bool {
	t.Helper()
	out, errOut, code := n.cli(t, "subscriptions", "get", id, "--output", "json")
	var sub struct{ Enabled bool }
	if code != 0 || json.Unmarshal([]byte(out), &sub) != nil {
		t.Fatalf("subscriptions get %s: exit %d, stdout %q, stderr %q", id, code, out, errOut)
	}
	return sub.Enabled
}

// tab is one browser tab in a profile of its own (no cookie shared with
// another tab), with a 1280×800 viewport.
type tab struct {
	t   *testing.T
	ctx context.Context
}

func newTab(t *testing.T, browser context.Context) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	b := &tab{t: t, ctx: ctx}
	// The first action opens the tab, for the life of ctx: it runs with no
	// timeout of its own.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			url, _ := within(b, chromedp.Location())
			t.Logf("the page at failure: %s\n%s", url, b.text())
		}
	})
	return b
}

// within runs one action in the tab, bounded by browserTimeout.
func within[T any](b *tab, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, browserTimeout)
	defer cancel()
	return chromedp.Run(ctx, a)
}

// do runs actions, failing the test with what on error.
func (b *tab) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if _, err := within(b, chromedp.Steps(actions...)); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// open navigates to url and waits for the page to load.
func (b *tab) open(url string) {
	b.t.Helper()
	b.do("open "+url, chromedp.Navigate(url))
}

// text is what the page shows: the body's rendered text.
func (b *tab) text() string {
	s, err := within(b, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if err != nil {
		return fmt.Sprintf("(no text: %v)", err)
	}
	return s
}

// location is the page's URL.
func (b *tab) location() string {
	b.t.Helper()
	url, err := within(b, chromedp.Location())
	if err != nil {
		b.t.Fatalf("location: %v", err)
	}
	return url
}

// waitText waits until the page shows every one of want.
func (b *tab) waitText(want ...string) {
	b.t.Helper()
	kafkatest.WaitFor(b.t, 30*time.Second, func() error {
		text := b.text()
		for _, w := range want {
			if !strings.Contains(text, w) {
				return fmt.Errorf("the page does not show %q", w)
			}
		}
		return nil
	})
}

// waitPage reloads url until the page shows every one of want.
func (b *tab) waitPage(url string, want ...string) {
	b.t.Helper()
	kafkatest.WaitFor(b.t, 60*time.Second, func() error {
		if _, err := within(b, chromedp.Steps(chromedp.Navigate(url))); err != nil {
			return err
		}
		text := b.text()
		for _, w := range want {
			if !strings.Contains(text, w) {
				return fmt.Errorf("%s does not show %q", url, w)
			}
		}
		return nil
	})
}

// named selects the elements whose accessible role and name are these, as
// a screen reader finds them: a control with no accessible name is not
// found.
func named(role, name string) chromedp.QueryOption {
	return chromedp.ByFunc(func(ctx context.Context, t *chromedp.Target, n *chromedp.Node) ([]cdp.NodeID, error) {
		res, err := cdp.Call(ctx, t, accessibility.QueryAXTree, accessibility.QueryAXTreeParams{NodeID: n.NodeID, AccessibleName: name, Role: role})
		if err != nil {
			return nil, err
		}
		var backend []cdp.BackendNodeID
		for _, ax := range res.Nodes {
			if !ax.Ignored && ax.BackendDOMNodeID != 0 {
				backend = append(backend, ax.BackendDOMNodeID)
			}
		}
		if len(backend) == 0 {
			return nil, nil
		}
		ids, err := cdp.Call(ctx, t, dom.PushNodesByBackendIDsToFrontend, dom.PushNodesByBackendIDsToFrontendParams{BackendNodeIDs: backend})
		return ids.NodeIDs, err
	})
}

// control names a control for the messages: `button "Sign in"`.
func control(role, name string) string { return fmt.Sprintf("%s %q", role, name) }

// fill types value into the field named name.
func (b *tab) fill(name, value string) {
	b.t.Helper()
	b.do("fill "+control("textbox", name),
		chromedp.Clear("", named("textbox", name), chromedp.NodeVisible),
		chromedp.SendKeys("", value, named("textbox", name), chromedp.NodeVisible))
}

// press clicks the button named name.
func (b *tab) press(name string) {
	b.t.Helper()
	b.do("press "+control("button", name), chromedp.Click("", named("button", name), chromedp.NodeVisible))
}

// follow clicks the link named name.
func (b *tab) follow(name string) {
	b.t.Helper()
	b.do("follow "+control("link", name), chromedp.Click("", named("link", name), chromedp.NodeVisible))
}

// has reports whether the page has a control of role named name.
func (b *tab) has(role, name string) bool {
	b.t.Helper()
	ids, err := within(b, chromedp.QueryNodeIDs("", named(role, name), chromedp.AtLeast(0)))
	if err != nil {
		b.t.Fatalf("look for %s: %v", control(role, name), err)
	}
	return len(ids) > 0
}

// unnamedControls lists the page's controls that have no accessible
// name, as a screen reader sees them: their role and HTML.
func (b *tab) unnamedControls() []string {
	b.t.Helper()
	tree, err := within(b, func(ctx context.Context, t *chromedp.Target) (accessibility.GetFullAXTreeResult, error) {
		return cdp.Call(ctx, t, accessibility.GetFullAXTree, accessibility.GetFullAXTreeParams{})
	})
	if err != nil {
		b.t.Fatalf("accessibility tree: %v", err)
	}
	text := func(v *accessibility.Value) string {
		var s string
		if v != nil {
			_ = json.Unmarshal([]byte(v.Value), &s) // not a string: none
		}
		return strings.TrimSpace(s)
	}
	var out []string
	for _, n := range tree.Nodes {
		switch role := text(n.Role); role {
		case "button", "link", "textbox", "searchbox", "combobox", "radio", "checkbox", "listbox", "DisclosureTriangle":
			if !n.Ignored && text(n.Name) == "" {
				out = append(out, fmt.Sprintf("%s (backend node %d)", role, n.BackendDOMNodeID))
			}
		}
	}
	return out
}

// tab presses the Tab key and returns the focused element's role and
// accessible name.
func (b *tab) tab() (role, name string) {
	b.t.Helper()
	for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeRawKeyDown, input.DispatchKeyEventTypeKeyUp} {
		params := input.DispatchKeyEventParams{Type: typ, Key: "Tab", Code: "Tab", WindowsVirtualKeyCode: 9, NativeVirtualKeyCode: 9}
		if _, err := within(b, func(ctx context.Context, t *chromedp.Target) (cdp.Empty, error) {
			return cdp.Call(ctx, t, input.DispatchKeyEvent, params)
		}); err != nil {
			b.t.Fatalf("press Tab: %v", err)
		}
	}
	focused, err := within(b, chromedp.Evaluate[[]string](`(() => {
		const e = document.activeElement;
		if (!e || e === document.body) return ["", ""];
		const label = e.labels && e.labels.length ? e.labels[0].innerText : "";
		return [e.tagName.toLowerCase() + (e.type ? ":" + e.type : ""), (e.getAttribute("aria-label") || label || e.innerText || e.value || "").trim()];
	})()`))
	if err != nil {
		b.t.Fatalf("read the focused element: %v", err)
	}
	return focused[0], focused[1]
}

// signIn signs in with the admin token and waits for the overview.
func (b *tab) signIn(n *consoleNode) {
	b.t.Helper()
	b.signInWith(n, consoleToken)
}

// signInWith signs in with token and waits to leave the sign-in page.
func (b *tab) signInWith(n *consoleNode, token string) {
	b.t.Helper()
	b.open(n.base + "/ui/")
	b.fill("Access token", token)
	b.press("Sign in")
	kafkatest.WaitFor(b.t, 30*time.Second, func() error {
		if url := b.location(); strings.Contains(url, "/ui/login") {
			return fmt.Errorf("still at %s", url)
		}
		return nil
	})
}

// screenshot saves the viewport as DIR/name.png when
// HOOKSTREAM_SCREENSHOTS=DIR.
func (b *tab) screenshot(name string) {
	b.t.Helper()
	dir := os.Getenv(screenshotsEnv)
	if dir == "" {
		return
	}
	png, err := within(b, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// TestConsoleInBrowser is an operator's session in the console, each
// subtest in a fresh browser profile against one running hookstream.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	browser := newBrowser(t)
	n := startConsoleNode(t)

	t.Run("SignIn", func(t *testing.T) {
		b := newTab(t, browser)
		b.open(n.base + "/ui/")
		if url := b.location(); !strings.Contains(url, "/ui/login") {
			t.Errorf("signed out, /ui/ shows %s, want the sign-in page", url)
		}
		b.fill("Access token", "not-the-token")
		b.press("Sign in")
		b.waitText("That token is not accepted")
		if url := b.location(); !strings.Contains(url, "/ui/login") {
			t.Errorf("after a wrong token: at %s, want still the sign-in page", url)
		}
		b.signIn(n)
		if url := b.location(); !strings.HasSuffix(url, "/ui/") {
			t.Errorf("signed in: at %s, want the overview /ui/", url)
		}
	})

	t.Run("Keyboard", func(t *testing.T) {
		b := newTab(t, browser)
		b.open(n.base + "/ui/login")
		var seen []string
		reached := func(want string) bool {
			for range 10 {
				role, name := b.tab()
				seen = append(seen, role+" "+name)
				if strings.EqualFold(name, want) {
					return true
				}
			}
			return false
		}
		for _, want := range []string{"Access token", "Sign in"} {
			if !reached(want) {
				t.Fatalf("Tab never reaches %q on the sign-in page; focus went %s", want, strings.Join(seen, ", "))
			}
		}
		b.signIn(n)
		seen = nil
		for _, want := range []string{"Overview", "Events", "Subscriptions", "Dead letters", "Groups"} {
			if !reached(want) {
				t.Errorf("Tab never reaches the nav link %q; focus went %s", want, strings.Join(seen, ", "))
			}
		}
	})

	// A sink every subscription of the tests delivers to.
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(sink.Close)

	t.Run("Overview", func(t *testing.T) {
		for i := range 3 {
			n.mustAccept(t, fmt.Sprintf("overview-%d", i), `{"ref":"refs/heads/main"}`)
		}
		b := newTab(t, browser)
		b.signIn(n)
		b.waitPage(n.base+"/ui/", "Traffic, last 15 minutes", "github")
	})

	t.Run("DisableEnable", func(t *testing.T) {
		id := n.subscribe(t, sink.URL+"/toggle")
		b := newTab(t, browser)
		b.signIn(n)
		b.open(n.base + "/ui/subscriptions/" + id)
		b.waitText(id, "delivering")
		b.press("Disable")
		b.waitText("disabled")
		if !b.has("button", "Enable") || b.has("button", "Disable") {
			t.Errorf("a disabled subscription's page offers Enable: %v, Disable: %v; want Enable only", b.has("button", "Enable"), b.has("button", "Disable"))
		}
		if n.enabled(t, id) {
			t.Errorf("after Disable, hookstream subscriptions get says %s is enabled", id)
		}
		b.press("Enable")
		b.waitText("delivering")
		if !n.enabled(t, id) {
			t.Errorf("after Enable, hookstream subscriptions get says %s is disabled", id)
		}
	})

	t.Run("GroupsAndReplay", func(t *testing.T) {
		b := newTab(t, browser)
		b.signIn(n)
		b.open(n.base + "/ui/groups")
		b.waitText(string(n.kafka.Names.ProcessorGroup()), string(n.kafka.Names.RetryGroup()), "Plan a replay of processor")
		b.follow("Plan a replay of processor")
		b.do("choose the target earliest", chromedp.Click("", named("radio", "earliest"), chromedp.NodeVisible))
		b.press("Plan")
		// The dry run is the plan as hookstream replay prints it, and the
		// processor runs, so Execute is refused as the command refuses it.
		kafkatest.WaitFor(t, 30*time.Second, func() error {
			out, errOut, code := n.cli(t, "replay", "--group", "processor", "--to-earliest")
			if code != 0 {
				return fmt.Errorf("replay: exit %d: %s", code, errOut)
			}
			want, _, _ := strings.Cut(out, "Dry run:")
			got, err := within(b, chromedp.Text("pre", chromedp.NodeVisible))
			if err != nil {
				return err
			}
			if strings.TrimSpace(got) != strings.TrimSpace(want) {
				b.do("plan again", chromedp.Reload())
				return fmt.Errorf("the page's plan:\n%s\nhookstream replay prints:\n%s", got, want)
			}
			return nil
		})
		b.waitText("Execute is refused", "active member")
		if b.has("button", "Execute") {
			t.Errorf("the plan of the running processor's group offers Execute; hookstream replay --execute refuses it")
		}

		// A disabled subscription's group has no member: its replay executes.
		id := n.subscribe(t, sink.URL+"/replay")
		n.mustAccept(t, "replay-1", `{"n":1}`)
		kafkatest.WaitFor(t, 60*time.Second, func() error {
			out, _, _ := n.cli(t, "lag", "--group", "sub:"+id, "--output", "json")
			var lags []groups.GroupLag
			if json.Unmarshal([]byte(out), &lags) != nil || len(lags) != 1 || lags[0].Total != 0 || lags[0].Partitions == nil {
				return fmt.Errorf("subscription %s not caught up: %s", id, out)
			}
			return nil
		})
		if _, errOut, code := n.cli(t, "subscriptions", "disable", id); code != 0 {
			t.Fatalf("subscriptions disable: %s", errOut)
		}
		b.open(n.base + "/ui/replay?group=sub:" + id + "&target=earliest")
		kafkatest.WaitFor(t, 60*time.Second, func() error {
			if !b.has("button", "Execute") {
				b.do("plan again", chromedp.Reload())
				return fmt.Errorf("no Execute for the disabled subscription's group")
			}
			return nil
		})
		b.press("Execute")
		b.waitText("Committed: " + string(n.kafka.Names.SubscriptionGroup(id)))
		out, _, _ := n.cli(t, "lag", "--group", "sub:"+id, "--output", "json")
		var lags []groups.GroupLag
		if json.Unmarshal([]byte(out), &lags) != nil || len(lags) != 1 || lags[0].Total == 0 {
			t.Errorf("after Execute, lag of sub:%s: got %s, want the events to read again", id, out)
		}
	})

	t.Run("DLQRedrive", func(t *testing.T) {
		var failing atomic.Bool
		failing.Store(true)
		var mu sync.Mutex
		got := map[string]int{}
		flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if failing.Load() {
				http.Error(w, "down for maintenance", http.StatusInternalServerError)
				return
			}
			mu.Lock()
			got[r.Header.Get("webhook-id")]++
			mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(flaky.Close)
		id := n.subscribe(t, flaky.URL+"/dlq")
		n.mustAccept(t, "dlq-1", `{"n":1}`)

		b := newTab(t, browser)
		b.signIn(n)
		list := n.base + "/ui/dlq?kind=delivery&key=" + url.QueryEscape(id+":github:dlq-1")
		b.waitPage(list, "github:dlq-1", "deliver", "500")
		failing.Store(false) // the cause is fixed
		b.press("Redrive delivery letters")
		b.waitText("Preview: 1 letter to copy back", id+":github:dlq-1")
		mu.Lock()
		early := got["github:dlq-1"]
		mu.Unlock()
		if early != 0 {
			t.Errorf("the preview delivered the letter %d times; it must copy nothing", early)
		}
		b.screenshot("dlq-redrive")
		b.press("Execute")
		b.waitText("Redriven 1 letter to")
		kafkatest.WaitFor(t, 30*time.Second, func() error {
			mu.Lock()
			defer mu.Unlock()
			if got["github:dlq-1"] != 1 {
				return fmt.Errorf("the subscriber got github:dlq-1 %d times, want once", got["github:dlq-1"])
			}
			return nil
		})
		b.waitPage(list, "redriven")
		// Redriving again copies nothing: the letter is marked.
		b.press("Redrive delivery letters")
		b.waitText("already redriven", "Nothing to redrive")
		if b.has("button", "Execute") {
			t.Errorf("a preview with nothing to redrive offers Execute")
		}
	})

	t.Run("EventsSearch", func(t *testing.T) {
		n.mustAccept(t, "search-1", `{"n":1}`)
		b := newTab(t, browser)
		b.signIn(n)
		b.open(n.base + "/ui/events")
		b.fill("Source", "git*")
		b.fill("Since", "1h")
		kafkatest.WaitFor(t, 30*time.Second, func() error {
			b.press("Search")
			if text := b.text(); !strings.Contains(text, "github:search-1") {
				return fmt.Errorf("the search does not show github:search-1:\n%s", text)
			}
			return nil
		})
		b.fill("Source", "shop")
		b.press("Search")
		b.waitText("0 found")
	})

	t.Run("Tail", func(t *testing.T) {
		b := newTab(t, browser)
		b.signIn(n)
		b.open(n.base + "/ui/events/tail?source=github")
		b.waitText("Following")
		n.mustAccept(t, "tail-1", `{"n":1}`)
		b.waitText("github:tail-1")
		href, err := within(b, chromedp.AttributeValue("#tail a", "href"))
		if err != nil || !strings.HasSuffix(href.Value, "/ui/events/github:tail-1") {
			t.Errorf("the tail's link: got %+v (%v), want the event's story", href, err)
		}
	})

	t.Run("EventStory", func(t *testing.T) {
		sub := n.subscribe(t, sink.URL+"/story")
		// A payload that would run script if it were rendered as HTML.
		n.mustAccept(t, "story-1", `{"note":"<script>window.hacked=1;alert(1)</script><img src=x onerror=\"window.hacked=2\">"}`)
		b := newTab(t, browser)
		b.signIn(n)
		b.open(n.base + "/ui/events")
		b.fill("Event id", "github:story-1")
		b.press("Open")
		story := n.base + "/ui/events/github:story-1"
		b.waitPage(story, "received by ingest", "processed: emitted", sub+": attempt 1 delivered")

		// The same facts as hookstream events get.
		kafkatest.WaitFor(t, 30*time.Second, func() error {
			out, errOut, code := n.cli(t, "events", "get", "github:story-1")
			if code != 0 {
				return fmt.Errorf("events get: exit %d: %s", code, errOut)
			}
			if _, err := within(b, chromedp.Steps(chromedp.Reload())); err != nil {
				return err
			}
			text := b.text()
			table, _, _ := strings.Cut(out[strings.Index(out, "TIME"):], "\n\n")
			for _, line := range strings.Split(table, "\n")[1:] {
				_, what, _ := strings.Cut(strings.TrimSpace(line), "  ")
				if !strings.Contains(text, strings.TrimSpace(what)) {
					return fmt.Errorf("the page does not show %q of events get:\n%s", strings.TrimSpace(what), out)
				}
			}
			for _, line := range strings.Split(out, "\n") {
				f := strings.Fields(line)
				if len(f) < 2 || f[0] != "TRACE" {
					continue
				}
				if !strings.Contains(text, f[1]) {
					return fmt.Errorf("the page does not show the trace id %s", f[1])
				}
				if len(f) > 2 && !b.has("link", f[1]) {
					return fmt.Errorf("the trace id %s is no link, though events get gives its URL %s", f[1], f[2])
				}
			}
			return nil
		})

		// The envelope is shown open, without a click, and its payload is
		// text: no script ran, no element was injected.
		b.waitText(`<script>window.hacked=1;alert(1)</script>`)
		injected, err := within(b, chromedp.Evaluate[[]any](`[typeof window.hacked, document.querySelectorAll("main script, main img").length]`))
		if err != nil || fmt.Sprint(injected) != "[undefined 0]" {
			t.Errorf("after showing a payload with <script> and <img onerror>: got %v (%v), want no script run and no element injected", injected, err)
		}
		b.screenshot("event")

		b.press("Resend to " + sub)
		b.waitText("Resent github:story-1 to " + sub)
		b.waitPage(story, sub+": resend, attempt 1 delivered")
	})

	t.Run("NarrowScreen", func(t *testing.T) {
		// At 390×844 (a phone) no page is wider than the screen: tables
		// and long text scroll or wrap inside it. Every control has an
		// accessible name.
		b := newTab(t, browser)
		b.signIn(n)
		b.do("set a phone's viewport", chromedp.EmulateViewport(390, 844))
		for _, path := range []string{"/ui/", "/ui/events", "/ui/events?search=1&since=1h", "/ui/events/github:overview-0", "/ui/events/tail",
			"/ui/subscriptions", "/ui/subscriptions/new", "/ui/dlq", "/ui/dlq/redrive?kind=delivery", "/ui/groups", "/ui/replay?group=processor&target=earliest"} {
			b.open(n.base + path)
			width, err := within(b, chromedp.Evaluate[[]int](`[document.documentElement.scrollWidth, window.innerWidth]`))
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if width[0] > width[1] {
				t.Errorf("%s at 390×844: the page is %dpx wide, wider than the screen (%dpx)", path, width[0], width[1])
			}
			if unnamed := b.unnamedControls(); len(unnamed) > 0 {
				t.Errorf("%s: controls without an accessible name: %s", path, strings.Join(unnamed, ", "))
			}
		}
	})

	t.Run("CrossOriginFormChangesNothing", func(t *testing.T) {
		id := n.subscribe(t, sink.URL+"/csrf")
		// Another origin: the same host, another port. Its page posts a
		// form to the console as soon as it loads, once with a made-up
		// CSRF token and once with none, in the signed-in browser.
		for _, field := range []string{`<input type="hidden" name="csrf" value="guessed">`, ""} {
			evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				fmt.Fprintf(w, `<!doctype html><body><form id="f" method="post" action="%s/ui/subscriptions/%s/disable">%s</form>`+
					`<script>document.getElementById("f").submit()</script></body>`, n.base, id, field)
			}))
			b := newTab(t, browser)
			b.signIn(n)
			b.open(evil.URL)
			kafkatest.WaitFor(t, 30*time.Second, func() error {
				if url := b.location(); !strings.HasPrefix(url, n.base) {
					return fmt.Errorf("the form has not been sent: still at %s", url)
				}
				return nil
			})
			b.waitText("refused")
			evil.Close()
			if !n.enabled(t, id) {
				t.Fatalf("a form from %s disabled subscription %s", evil.URL, id)
			}
			b.open(n.base + "/ui/subscriptions/" + id)
			b.waitText("delivering")
		}
	})

	t.Run("OverviewAfterTraffic", func(t *testing.T) {
		// After the subtests above: subscriptions delivering and disabled,
		// dead letters, traffic from one source.
		b := newTab(t, browser)
		b.signIn(n)
		b.waitPage(n.base+"/ui/", "github", "delivering", "disabled", "in the delivery DLQ")
		b.screenshot("overview")
	})

	t.Run("StopEndsTheTail", func(t *testing.T) {
		// Last: it stops the node. A live tail ends when hookstream stops,
		// and does not hold up the admin listener's shutdown.
		b := newTab(t, browser)
		b.signIn(n)
		b.open(n.base + "/ui/events/tail")
		b.waitText("Following")
		if code := n.proc.stop(t, 30*time.Second); code != 0 {
			t.Errorf("hookstream run exit code after SIGTERM: got %d, want 0", code)
		}
		b.waitText("This instance is stopping")
		if log := n.proc.output.String(); strings.Contains(log, "failed to shut down") {
			t.Errorf("the admin listener's shutdown waited for the live tail:\n%s", n.proc.output.tail(5))
		}
	})
}
