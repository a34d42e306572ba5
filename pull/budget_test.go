package pull_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/pull"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// Metrics of the byte budget.
const (
	budgetInUse   = "hookstream_pull_budget_bytes_in_use"
	budgetRefused = "hookstream_pull_budget_refused_total"
	inProgress    = "hookstream_pull_requests_in_progress"
	answered      = "hookstream_pull_requests_total"
)

// metric is the sum of the series of metric name, or an error when the
// server has no such metric.
func (h *harness) metric(name string) (float64, error) {
	families, err := h.metrics.Gather()
	if err != nil {
		return 0, err
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		sum := 0.0
		for _, m := range f.GetMetric() {
			sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
		return sum, nil
	}
	return 0, fmt.Errorf("no metric %s", name)
}

// count is the sum of counter name's series, 0 before the first.
func (h *harness) count(t *testing.T, name string) float64 {
	t.Helper()
	v, err := h.metric(name)
	if err != nil {
		return 0
	}
	return v
}

func (h *harness) mustMetric(t *testing.T, name string) float64 {
	t.Helper()
	v, err := h.metric(name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// newSlowHarness is newHarness whose listener's connections have send
// buffers of 4 KiB: an answer past them waits for a slow consumer in the
// process's memory, as one past the kernel's own buffers does (up to 4
// MiB a connection on a Linux host with default settings, the size of an
// answer).
func newSlowHarness(t *testing.T, cfg pull.Config) *harness {
	t.Helper()
	return newHarnessOn(t, kafkatest.New(t, 3, 1<<20), cfg, func(h *harness) { h.sendBuffer = 4 << 10 })
}

// sendBuffers sets the send buffer of each connection it accepts.
type sendBuffers struct {
	net.Listener
	size int
}

func (l sendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		err = c.(*net.TCPConn).SetWriteBuffer(l.size)
	}
	return c, err
}

// slowPull sends a pull request of sub on a connection of its own whose
// receive buffer is 4 KiB, and reads nothing: an answer larger than the
// kernels buffer sits being written until the connection closes, which
// closing the returned connection (or the test's end) does.
func (h *harness) slowPull(t *testing.T, sub subscriptions.Subscription, query url.Values) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(h.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	conn := c.(*net.TCPConn)
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetReadBuffer(4 << 10); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "GET /subscriptions/%s/events?%s HTTP/1.1\r\nHost: hookstream\r\nAuthorization: Bearer %s\r\n\r\n",
		sub.ID, query.Encode(), sub.Secret); err != nil {
		t.Fatal(err)
	}
	return conn
}

// answerStatus reads the status of the answer on conn, and the body of
// an answer that is not 200 (a 200's may wait for a slow reader).
func answerStatus(t *testing.T, conn net.Conn) int {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("answer of a slow pull: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatalf("answer of a slow pull: %v", err)
		}
	}
	return resp.StatusCode
}

// liveHeap is the bytes of the heap in use after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// bigEvents writes n events of about size bytes each.
func (h *harness) bigEvents(t *testing.T, prefix string, n, size int) {
	t.Helper()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, eventRecord(t, h.env.Names, "shop", prefix+strconv.Itoa(i), "order", `{"pad":"`+strings.Repeat("x", size)+`"}`))
	}
	producer := h.env.Client(t, kgo.ProducerBatchMaxBytes(int32(topics.MaxRecordBytes(1<<20))))
	if err := producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// drained waits until no request is in progress and the budget holds
// nothing, then checks that sub is served (one event: answers through
// the slow harness's buffers are slow to read).
func (h *harness) drained(t *testing.T, when string, sub subscriptions.Subscription) {
	t.Helper()
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if v, err := h.metric(budgetInUse); err != nil || v != 0 {
			return fmt.Errorf("budget in use %s: got %v (%v), want 0", when, v, err)
		}
		if v, err := h.metric(inProgress); err != nil || v != 0 {
			return fmt.Errorf("requests in progress %s: got %v (%v), want 0", when, v, err)
		}
		return nil
	})
	if a := h.pull(t, sub.ID, sub.Secret, url.Values{"limit": {"1"}}); a.status != http.StatusOK || len(a.Events) != 1 {
		t.Errorf("%s: got %d %s with %d events, want 200 with 1", when, a.status, a.Error, len(a.Events))
	}
}

// TestBudgetBoundsSlowPullers: the caps' worth of slow pullers (512
// requests at once, 8 for each of 64 subscriptions, each reading its
// answer through a 4 KiB window) over events of 800 KB: the records read
// for answers and the answers being written stay within the byte budget,
// the requests past it are answered 503 with Retry-After, and the live
// heap grows by the budget and the connections' buffers at most.
func TestBudgetBoundsSlowPullers(t *testing.T) {
	h := newSlowHarness(t, pull.Config{})
	const subs = pull.DefaultMaxRequests / pull.DefaultMaxRequestsPerSubscription
	var ss []subscriptions.Subscription
	for range subs + 1 { // the last one pulls once they are all in
		ss = append(ss, h.subscribe(t, subscriptions.Subscription{Pull: true}))
	}
	spare := ss[subs]
	for _, s := range ss { // known to the server, so that no request reads the registry
		if a := h.pull(t, s.ID, s.Secret, nil); a.status != http.StatusOK {
			t.Fatalf("pull: %d %s", a.status, a.Error)
		}
	}
	h.bigEvents(t, "big-", 6, 800_000) // 5 to an answer of 4 MiB
	before, err := h.metric(answered)
	if err != nil {
		t.Fatal(err)
	}
	base := liveHeap()
	// The budget, and per connection its buffers on both ends (net/http's
	// reader and writer, the test's connection) with room to spare.
	bound := int64(pull.DefaultBudget) + pull.DefaultMaxRequests*48<<10
	peak := int64(0)
	check := func(when string) {
		t.Helper()
		grown := liveHeap() - base
		peak = max(peak, grown)
		if grown > bound {
			t.Fatalf("%s: the live heap grew by %d MiB, over the bound of %d MiB (the budget %d MiB and the connections')",
				when, grown>>20, bound>>20, pull.DefaultBudget>>20)
		}
	}
	var conns []*net.TCPConn
	for i, s := range ss[:subs] {
		for range pull.DefaultMaxRequestsPerSubscription {
			conns = append(conns, h.slowPull(t, s, nil))
		}
		check(fmt.Sprintf("%d slow pullers", (i+1)*pull.DefaultMaxRequestsPerSubscription))
	}
	// Every request is answered, or sits being written: none answered
	// for longer than a request waits for the budget.
	last, since := -1.0, time.Now()
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		busy, done := h.mustMetric(t, inProgress), h.count(t, answered)
		if done != last {
			last, since = done, time.Now()
		}
		if int(busy)+int(done-before) != len(conns) || time.Since(since) < 2*time.Second {
			return fmt.Errorf("%v in progress and %v answered of %d", busy, done-before, len(conns))
		}
		return nil
	})
	for range 5 {
		check("all slow pullers in")
	}
	inUse := h.mustMetric(t, budgetInUse)
	refused := h.mustMetric(t, budgetRefused)
	busy := h.mustMetric(t, inProgress)
	t.Logf("%d slow pullers: live heap grew by %.1f MiB at most (bound %d MiB); budget in use %.1f MiB; %v answers being written, %v refused for the budget",
		len(conns), float64(peak)/(1<<20), bound>>20, inUse/(1<<20), busy, refused)
	if inUse > pull.DefaultBudget || inUse == 0 {
		t.Errorf("budget in use: got %v, want some and at most %d", inUse, pull.DefaultBudget)
	}
	if refused == 0 || busy == 0 {
		t.Errorf("got %v answers being written and %v refused, want both", busy, refused)
	}
	if a := h.pull(t, spare.ID, spare.Secret, nil); a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") != "1" {
		t.Errorf("a pull while the budget is spent: got %d %s (Retry-After %q), want 503 with Retry-After 1", a.status, a.Error, a.header.Get("Retry-After"))
	}
	for _, c := range conns {
		c.Close()
	}
	h.drained(t, "once the slow pullers left", spare)
}

// TestBudgetRefusesPastIt: with a budget of 16 MiB, slow pullers hold
// what their answers take (up to 4 MB each) while they are written,
// within the budget, until the next one's fetch has no room: that pull
// is answered 503 with Retry-After and counted, as is the next one of
// another subscription; each byte comes back once the slow pullers leave.
func TestBudgetRefusesPastIt(t *testing.T) {
	const budget = 16 << 20
	h := newSlowHarness(t, pull.Config{Budget: budget})
	h.bigEvents(t, "big-", 6, 800_000)
	sub := h.subscribe(t, subscriptions.Subscription{Pull: true})
	other := h.subscribe(t, subscriptions.Subscription{Pull: true})
	var slow []*net.TCPConn
	for len(slow) < pull.DefaultMaxRequestsPerSubscription && h.count(t, budgetRefused) == 0 {
		served := h.count(t, "hookstream_pull_events_total")
		slow = append(slow, h.slowPull(t, sub, nil))
		// Its answer is being written, or it was refused.
		kafkatest.WaitFor(t, 10*time.Second, func() error {
			if inUse := h.mustMetric(t, budgetInUse); inUse > budget {
				t.Fatalf("%d slow pullers: budget in use %v, over the budget", len(slow), inUse)
			}
			if h.count(t, "hookstream_pull_events_total") == served && h.count(t, budgetRefused) == 0 {
				return fmt.Errorf("slow puller %d neither served nor refused", len(slow))
			}
			return nil
		})
	}
	if refused := h.count(t, budgetRefused); refused != 1 || len(slow) < 2 {
		t.Fatalf("after %d slow pullers: %v refused for the budget, want the last one", len(slow), refused)
	}
	if inUse := h.mustMetric(t, budgetInUse); inUse == 0 || inUse > budget {
		t.Errorf("budget in use with %d answers being written: got %v, want some and at most %d", len(slow)-1, inUse, budget)
	}
	last := slow[len(slow)-1]
	if code := answerStatus(t, last); code != http.StatusServiceUnavailable {
		t.Errorf("the pull past the budget: got %d, want 503", code)
	}
	a := h.pull(t, other.ID, other.Secret, nil)
	if a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") != "1" {
		t.Errorf("another subscription's pull while the budget is spent: got %d %s (Retry-After %q), want 503 with Retry-After 1",
			a.status, a.Error, a.header.Get("Retry-After"))
	}
	if refused := h.count(t, budgetRefused); refused != 2 {
		t.Errorf("refused for the budget: got %v, want 2", refused)
	}
	for _, c := range slow[:len(slow)-1] {
		if code := answerStatus(t, c); code != http.StatusOK {
			t.Errorf("a slow pull within the budget: got %d, want 200", code)
		}
		c.Close()
	}
	h.drained(t, "once the slow pullers left", other)
}

// TestBudgetReturnsToZero: requests abandoned on every path (the consumer
// gone while its answer is written, while it waits for the budget, while
// its long poll waits; answers cut by the write timeout; refused
// requests; fetches failing) give back every byte they held.
func TestBudgetReturnsToZero(t *testing.T) {
	h := newSlowHarness(t, pull.Config{Budget: 16 << 20, WriteTimeout: 2 * time.Second, MaxRequestsPerSubscription: 64})
	h.bigEvents(t, "big-", 6, 800_000)
	sub := h.subscribe(t, subscriptions.Subscription{Pull: true})
	idle := h.subscribe(t, subscriptions.Subscription{Pull: true})
	if _, err := h.registry.Update(context.Background(), idle.ID, func(s *subscriptions.Subscription) error {
		s.EventTypes = []string{"nothing"} // its long polls wait
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		var conns []*net.TCPConn
		for range 40 { // more than the budget takes: some wait for it
			conns = append(conns, h.slowPull(t, sub, nil))
		}
		for range 10 {
			conns = append(conns, h.slowPull(t, idle, url.Values{"wait": {"30s"}}))
		}
		var wg sync.WaitGroup
		for _, q := range []url.Values{{"cursor": {"garbage"}}, {"limit": {"0"}}, {"wait": {"-1s"}}} {
			wg.Go(func() { h.pull(t, sub.ID, sub.Secret, q) })
		}
		wg.Go(func() { h.pull(t, sub.ID, "wrong", nil) })
		wg.Wait()
		if round < 2 {
			// Gone at once: during their scans, their answers, their
			// waits for the budget and their long polls.
			time.Sleep(time.Duration(round) * 300 * time.Millisecond)
			for _, c := range conns {
				c.SetLinger(0)
				c.Close()
			}
		} else {
			// Left to the write timeout, the long polls to their wait.
			for _, c := range conns[40:] {
				c.Close()
			}
		}
		h.drained(t, fmt.Sprintf("after round %d of abandoned requests", round), sub)
	}
	if c := h.env.Cluster; c != nil {
		// Fetches failing: each request ends 503, and gives its bytes back.
		var failing atomic.Bool
		failing.Store(true)
		c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			if !failing.Load() {
				return nil, nil, false
			}
			resp := req.ResponseKind().(*kmsg.FetchResponse)
			resp.Version = req.GetVersion()
			resp.ErrorCode = kerr.UnknownServerError.Code
			return resp, nil, true
		})
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				if a := h.pull(t, sub.ID, sub.Secret, nil); a.status != http.StatusServiceUnavailable {
					t.Errorf("while fetches fail: got %d %s, want 503", a.status, a.Error)
				}
			})
		}
		wg.Wait()
		failing.Store(false)
		h.drained(t, "after the fetches failed", sub)
	}
}

// TestEventLargerThanBudget: an event larger than the whole budget is
// served, alone, once nothing else holds the budget; while something
// does, its pull is answered 503 with Retry-After, never left waiting.
func TestEventLargerThanBudget(t *testing.T) {
	h := newSlowHarness(t, pull.Config{Budget: 1 << 20})
	h.bigEvents(t, "huge-", 1, 2_000_000)
	sub := h.subscribe(t, subscriptions.Subscription{Pull: true})
	a := h.pull(t, sub.ID, sub.Secret, nil)
	if a.status != http.StatusOK || len(a.Events) != 1 {
		t.Fatalf("an event of 2 MB with a budget of 1 MiB: got %d %s with %d events, want 200 with it", a.status, a.Error, len(a.Events))
	}
	held := h.slowPull(t, sub, nil)
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		if v := h.mustMetric(t, budgetInUse); v == 0 {
			return fmt.Errorf("the slow pull holds nothing yet")
		}
		return nil
	})
	if b := h.pull(t, sub.ID, sub.Secret, nil); b.status != http.StatusServiceUnavailable || b.header.Get("Retry-After") == "" {
		t.Errorf("while a slow pull holds the budget: got %d %s (Retry-After %q), want 503 with Retry-After", b.status, b.Error, b.header.Get("Retry-After"))
	}
	held.Close()
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		if b := h.pull(t, sub.ID, sub.Secret, nil); b.status != http.StatusOK || len(b.Events) != 1 {
			return fmt.Errorf("once the slow pull left: got %d %s with %d events, want 200 with the event", b.status, b.Error, len(b.Events))
		}
		return nil
	})
}
