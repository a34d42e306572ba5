package ingest_test

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookstream/hookstream/ingest"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/topics"
)

const githubSecret = "gh-secret"

// testSources is the sources file the tests run with.
var testSources = ingest.Sources{Sources: map[string]ingest.Source{
	"github": {
		Verify:    ingest.Verify{Scheme: "github", Secret: githubSecret},
		EventID:   "header:X-GitHub-Delivery",
		EventType: "header:X-GitHub-Event",
	},
	"billing": {
		Verify:    ingest.Verify{Scheme: "github", Secret: githubSecret},
		EventID:   "header:X-GitHub-Delivery",
		RateLimit: "1/h",
	},
	"orders":  {EventID: "json:order.id"},
	"limited": {RateLimit: "2/h"},
	"open":    {},
}}

// receiver is an ingest handler on a test broker.
type receiver struct {
	env *kafkatest.Env
	srv *httptest.Server
	h   *ingest.Handler
	reg *prometheus.Registry
}

func newReceiver(t *testing.T, env *kafkatest.Env, cfg ingest.Config, opts ...kgo.Opt) *receiver {
	t.Helper()
	if cfg.Sources.Sources == nil {
		cfg.Sources = testSources
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = 64 << 10
	}
	if cfg.AckTimeout == 0 {
		cfg.AckTimeout = 5 * time.Second
	}
	cfg.Topic = env.Names.Ingest
	producer := env.Client(t, append(ingest.ProducerOpts(cfg), opts...)...)
	reg := prometheus.NewRegistry()
	h, err := ingest.New(cfg, producer, kafkatest.Logger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &receiver{env: env, srv: srv, h: h, reg: reg}
}

type response struct {
	status int
	header http.Header
	body   map[string]string
}

func (r *receiver) post(t *testing.T, source string, header http.Header, body string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.srv.URL+"/webhooks/"+source, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := r.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := response{status: resp.StatusCode, header: resp.Header}
	if err := json.Unmarshal(raw, &out.body); err != nil {
		t.Fatalf("response body %q is not a JSON object: %v", raw, err)
	}
	return out
}

func githubHeaders(delivery, body string) http.Header {
	mac := hmac.New(sha256.New, []byte(githubSecret))
	mac.Write([]byte(body))
	return http.Header{
		"Content-Type":        {"application/json"},
		"X-Github-Delivery":   {delivery},
		"X-Github-Event":      {"push"},
		"X-Hub-Signature-256": {"sha256=" + hex.EncodeToString(mac.Sum(nil))},
		"User-Agent":          {"GitHub-Hookshot/abc"},
	}
}

func TestAcceptWritesOneRecord(t *testing.T) {
	env := kafkatest.New(t, 3, 64<<10)
	rc := newReceiver(t, env, ingest.Config{})
	body := `{"ref":"refs/heads/main","after":"abc"}`
	before := time.Now().UTC()

	resp := rc.post(t, "github", githubHeaders("d-1", body), body)

	if resp.status != http.StatusAccepted {
		t.Fatalf("status: got %d %v, want 202", resp.status, resp.body)
	}
	if resp.body["status"] != "accepted" || resp.body["id"] != "github:d-1" || resp.body["request_id"] == "" {
		t.Errorf("body: got %v, want status accepted, id github:d-1 and a request id", resp.body)
	}
	if got := resp.header.Get("X-Request-Id"); got != resp.body["request_id"] {
		t.Errorf("X-Request-Id: got %q, want the body's %q", got, resp.body["request_id"])
	}
	recs := env.Records(t, env.Names.Ingest)
	if len(recs) != 1 {
		t.Fatalf("records: got %d, want 1", len(recs))
	}
	r := recs[0]
	if string(r.Key) != "github:d-1" || string(r.Value) != body {
		t.Errorf("record: got key %q value %q, want key github:d-1 and the raw body", r.Key, r.Value)
	}
	h := kafkatest.Headers(r)
	want := map[string]string{
		topics.HeaderSource:        "github",
		topics.HeaderEventID:       "d-1",
		topics.HeaderEventType:     "push",
		topics.HeaderRequestID:     resp.body["request_id"],
		topics.HeaderContentType:   "application/json",
		"hs-h-x-github-delivery":   "d-1",
		"hs-h-x-github-event":      "push",
		"hs-h-x-hub-signature-256": githubHeaders("d-1", body).Get("X-Hub-Signature-256"),
	}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("header %s: got %q, want %q", k, h[k], v)
		}
	}
	if _, ok := h["hs-h-user-agent"]; ok {
		t.Errorf("header hs-h-user-agent: carried, want only allow-listed headers")
	}
	received, err := time.Parse(time.RFC3339Nano, h[topics.HeaderReceivedAt])
	if err != nil || received.Before(before.Add(-time.Second)) || !strings.HasSuffix(h[topics.HeaderReceivedAt], "Z") {
		t.Errorf("hs-received-at: got %q (%v), want RFC 3339 UTC at about %v", h[topics.HeaderReceivedAt], err, before)
	}
}

func TestRejectedRequestsWriteNothing(t *testing.T) {
	env := kafkatest.New(t, 3, 1<<10)
	rc := newReceiver(t, env, ingest.Config{MaxBody: 1 << 10})
	signed := githubHeaders("d-2", `{"a":1}`)
	tests := []struct {
		name       string
		source     string
		header     http.Header
		body       string
		status     int
		err        string
		retryAfter bool
	}{
		{"bad signature", "github", githubHeaders("d-2", `{"a":2}`), `{"a":1}`, 401, "invalid signature", false},
		{"missing signature", "github", http.Header{"X-Github-Delivery": {"d-3"}}, `{}`, 401, "invalid signature", false},
		{"tampered body", "github", signed, `{"a":1} `, 401, "invalid signature", false},
		{"unknown source", "gitlab", nil, `{}`, 404, "unknown source", false},
		{"invalid JSON", "open", http.Header{"Content-Type": {"application/json"}}, `{"a":`, 400, "invalid JSON payload", false},
		{"invalid +json", "open", http.Header{"Content-Type": {"application/vnd.api+json; charset=utf-8"}}, `nope`, 400, "invalid JSON payload", false},
		{"empty body", "open", nil, ``, 400, "empty body", false},
		{"no event id", "orders", http.Header{"Content-Type": {"application/json"}}, `{"order":{}}`, 400, "no event id in the request", false},
		{"too large", "open", nil, strings.Repeat("x", 1<<10+1), 413, "payload too large", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := rc.post(t, tt.source, tt.header, tt.body)
			if resp.status != tt.status || resp.body["error"] != tt.err || resp.body["request_id"] == "" {
				t.Errorf("got %d %v, want %d with error %q and a request id", resp.status, resp.body, tt.status, tt.err)
			}
		})
	}
	t.Run("rate limited", func(t *testing.T) {
		for i := range 2 {
			if resp := rc.post(t, "limited", nil, fmt.Sprintf("event %d", i)); resp.status != 202 {
				t.Fatalf("request %d within the limit: got %d %v, want 202", i, resp.status, resp.body)
			}
		}
		resp := rc.post(t, "limited", nil, "event 3")
		if resp.status != 429 || resp.body["error"] != "rate limited" || resp.header.Get("Retry-After") == "" {
			t.Errorf("over the limit: got %d %v Retry-After %q, want 429 rate limited with Retry-After", resp.status, resp.body, resp.header.Get("Retry-After"))
		}
	})
	recs := env.Records(t, env.Names.Ingest)
	if len(recs) != 2 {
		t.Errorf("records: got %d, want only the 2 accepted within the rate limit", len(recs))
	}
}

// TestUnsignedFloodSparesTheSourceBudget: requests that fail verification
// never spend a verified source's rate limit; they are limited per client
// address instead (401, then 429), and a signed request still gets in.
func TestUnsignedFloodSparesTheSourceBudget(t *testing.T) {
	env := kafkatest.New(t, 3, 64<<10)
	rc := newReceiver(t, env, ingest.Config{})
	unsigned := http.Header{"Content-Type": {"application/json"}, "X-Github-Delivery": {"forged"}}
	const flood = 60
	var statuses []int
	for i := range flood {
		resp := rc.post(t, "billing", unsigned, fmt.Sprintf(`{"n":%d}`, i))
		statuses = append(statuses, resp.status)
		if resp.status == 429 && resp.header.Get("Retry-After") == "" {
			t.Errorf("unsigned request %d: 429 without Retry-After", i)
		}
	}
	if statuses[0] != 401 || statuses[flood-1] != 429 {
		t.Fatalf("unsigned flood: got statuses %v, want 401 first and 429 once the address is over its limit", statuses)
	}
	for i := 1; i < flood; i++ {
		if s := statuses[i]; s != 429 && (s != 401 || statuses[i-1] != 401) {
			t.Fatalf("unsigned flood: got statuses %v, want only 401s then only 429s", statuses)
		}
	}

	body := `{"amount":1}`
	if resp := rc.post(t, "billing", githubHeaders("paid-1", body), body); resp.status != 202 {
		t.Fatalf("signed request after the flood: got %d %v, want 202 (the source's budget is untouched)", resp.status, resp.body)
	}
	if resp := rc.post(t, "billing", githubHeaders("paid-2", body), body); resp.status != 429 {
		t.Errorf("second signed request: got %d %v, want 429 (the source's own limit of 1/h)", resp.status, resp.body)
	}

	// Another client address has its own allowance of failures.
	other := rc.srv.Client()
	other.Transport = &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}
	req, _ := http.NewRequest(http.MethodPost, rc.srv.URL+"/webhooks/billing", strings.NewReader(`{}`))
	resp, err := other.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("unsigned request from another address: got %d, want 401", resp.StatusCode)
	}
	if recs := env.Records(t, env.Names.Ingest); len(recs) != 1 || string(recs[0].Key) != "billing:paid-1" {
		t.Errorf("records: got %d, want only billing:paid-1", len(recs))
	}
}

// TestDuplicateFastPath: a second POST of an accepted id is answered 200
// duplicate and writes nothing; both answers name the id, escaped as JSON
// whatever characters it holds.
func TestDuplicateFastPath(t *testing.T) {
	env := kafkatest.New(t, 3, 64<<10)
	rc := newReceiver(t, env, ingest.Config{})
	body := `{"x":1}`
	const id = `same "<&>\ é`
	first := rc.post(t, "github", githubHeaders(id, body), body)
	second := rc.post(t, "github", githubHeaders(id, body), body)
	if first.status != 202 || first.body["status"] != "accepted" || first.body["id"] != "github:"+id || first.body["request_id"] == "" {
		t.Fatalf("first: got %d %v, want 202 accepted github:%s with a request id", first.status, first.body, id)
	}
	if second.status != 200 || second.body["status"] != "duplicate" || second.body["id"] != "github:"+id || second.body["request_id"] == "" {
		t.Errorf("second: got %d %v, want 200 duplicate github:%s with a request id", second.status, second.body, id)
	}
	if n := len(env.Records(t, env.Names.Ingest)); n != 1 {
		t.Errorf("records: got %d, want 1", n)
	}
}

// TestLastAcceptedTimestamp: each source exports when it last had a
// webhook accepted, which the silent-source alert compares with its usual
// gap; rejected requests do not count.
func TestLastAcceptedTimestamp(t *testing.T) {
	env := kafkatest.New(t, 3, 64<<10)
	rc := newReceiver(t, env, ingest.Config{})
	body := `{"x":1}`
	before := float64(time.Now().Unix())
	rc.post(t, "github", githubHeaders("a", body), body)
	rc.post(t, "github", http.Header{}, body) // unsigned: 401
	got := map[string]float64{}
	mfs, err := rc.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "hookstream_ingest_last_accepted_timestamp_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	if len(got) != 1 || got["github"] < before || got["github"] > float64(time.Now().Unix()+1) {
		t.Errorf("hookstream_ingest_last_accepted_timestamp_seconds: got %v, want github at about now (%v)", got, before)
	}
}

func TestStatsCountAnswers(t *testing.T) {
	env := kafkatest.New(t, 3, 64<<10)
	rc := newReceiver(t, env, ingest.Config{})
	body := `{"x":1}`
	for _, h := range []http.Header{githubHeaders("a", body), githubHeaders("a", body), githubHeaders("b", body), {}} {
		rc.post(t, "github", h, body)
	}
	rc.post(t, "nope", nil, body)
	got := rc.h.Stats().Sources
	want := map[string]ingest.SourceStats{"github": {Accepted: 2, Duplicates: 1, Rejected: 1}, "_other": {Rejected: 1}}
	if !maps.Equal(got, want) {
		t.Errorf("Stats: got %+v, want %+v", got, want)
	}
}

func TestUnknownSources(t *testing.T) {
	env := kafkatest.New(t, 3, 64<<10)
	tests := []struct {
		name   string
		cfg    ingest.Config
		status int
	}{
		{"no sources file accepts all", ingest.Config{AcceptAll: true, Sources: ingest.Sources{Sources: map[string]ingest.Source{}}}, 202},
		{"allow_unknown_sources", ingest.Config{Sources: ingest.Sources{AllowUnknown: true, Sources: map[string]ingest.Source{}}}, 202},
		{"refused by default with a file", ingest.Config{Sources: ingest.Sources{Sources: map[string]ingest.Source{"a": {}}}}, 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := newReceiver(t, env, tt.cfg)
			if resp := rc.post(t, "anything", nil, tt.name); resp.status != tt.status {
				t.Errorf("got %d %v, want %d", resp.status, resp.body, tt.status)
			}
		})
	}
}

// TestOperationalSourceRefused: nobody outside may write events of source
// hookstream, whose events subscribers take for hookstream's own word.
func TestOperationalSourceRefused(t *testing.T) {
	env := kafkatest.New(t, 3, 64<<10)
	rc := newReceiver(t, env, ingest.Config{AcceptAll: true, Sources: ingest.Sources{Sources: map[string]ingest.Source{}}})
	if resp := rc.post(t, topics.OperationalSource, nil, `{"id":"subscription.disabled-1"}`); resp.status != http.StatusNotFound {
		t.Errorf("POST /webhooks/%s: got %d %v, want 404", topics.OperationalSource, resp.status, resp.body)
	}
}

func TestConcurrentPostsAllLand(t *testing.T) {
	env := kafkatest.New(t, 6, 64<<10)
	rc := newReceiver(t, env, ingest.Config{})
	const n = 500
	var wg sync.WaitGroup
	statuses := make([]int, n)
	for i := range n {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, rc.srv.URL+"/webhooks/open", strings.NewReader(fmt.Sprintf(`{"id":"e-%d"}`, i)))
			req.Header.Set("Content-Type", "application/json")
			resp, err := rc.srv.Client().Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		})
	}
	wg.Wait()
	for i, s := range statuses {
		if s != 202 {
			t.Fatalf("request %d: got %d, want 202", i, s)
		}
	}
	keys := make(map[string]bool)
	for _, r := range env.Records(t, env.Names.Ingest) {
		keys[string(r.Key)] = true
	}
	if len(keys) != n {
		t.Errorf("distinct records: got %d, want %d", len(keys), n)
	}
}

// TestBrokerOutage stops the broker: the receiver answers 503 within its
// acknowledgement bound and writes nothing, then accepts again once the
// broker is back.
func TestBrokerOutage(t *testing.T) {
	if kafkatest.Real() {
		t.Skip("stops and restarts the in-process broker")
	}
	dir, addr := t.TempDir(), kafkatest.FreeAddr(t)
	start := func() *topics.Embedded {
		b, err := topics.StartEmbedded(dir, addr, kafkatest.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	broker := start()
	env := &kafkatest.Env{Seeds: []string{addr}, Names: topics.NewNames("outage")}
	env.Ensure(t, 3, 64<<10)
	const bound = 1500 * time.Millisecond
	rc := newReceiver(t, env, ingest.Config{AckTimeout: bound}, kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }))
	post := func(id string) response {
		return rc.post(t, "open", http.Header{"Content-Type": {"application/json"}}, fmt.Sprintf(`{"id":%q}`, id))
	}
	if resp := post("before"); resp.status != 202 {
		t.Fatalf("before the outage: got %d %v, want 202", resp.status, resp.body)
	}

	broker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*bound)
	defer cancel()
	done := make(chan response, 1)
	go func() { done <- post("during") }()
	select {
	case resp := <-done:
		if resp.status != 503 || resp.body["error"] != "temporarily unavailable" || resp.header.Get("Retry-After") == "" {
			t.Errorf("during the outage: got %d %v Retry-After %q, want 503 temporarily unavailable with Retry-After", resp.status, resp.body, resp.header.Get("Retry-After"))
		}
	case <-ctx.Done():
		t.Fatalf("during the outage: no answer within %v; the acknowledgement wait is unbounded", 5*bound)
	}

	broker = start()
	defer broker.Close()
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if resp := post("after"); resp.status != 202 {
			return fmt.Errorf("after the outage: got %d %v", resp.status, resp.body)
		}
		return nil
	})
	keys := make(map[string]bool)
	for _, r := range env.Records(t, env.Names.Ingest) {
		keys[string(r.Key)] = true
	}
	if !keys["open:before"] || !keys["open:after"] || keys["open:during"] {
		t.Errorf("records: got keys %v, want open:before and open:after, and not open:during (answered 503)", keys)
	}
}

// TestOverloadSheds: when the producer's buffer is full the receiver
// answers 503 with Retry-After at once instead of queueing the request.
func TestOverloadSheds(t *testing.T) {
	env := kafkatest.New(t, 1, 64<<10)
	if env.Cluster == nil {
		t.Skip("holds produce requests in the in-process broker")
	}
	release := make(chan struct{}) // one send lets one produce request through
	held := make(chan struct{}, 1)
	env.Cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		select {
		case held <- struct{}{}:
		default:
		}
		<-release
		return nil, nil, false
	})
	tests := []struct {
		name string
		cfg  ingest.Config
		opts []kgo.Opt
	}{
		{"producer buffer full", ingest.Config{AckTimeout: 10 * time.Second}, []kgo.Opt{kgo.MaxBufferedRecords(1)}},
		{"requests in flight", ingest.Config{AckTimeout: 10 * time.Second, MaxInFlight: 1}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := newReceiver(t, env, tt.cfg, tt.opts...)
			first := make(chan response, 1)
			go func() { first <- rc.post(t, "open", nil, "first "+tt.name) }()
			<-held // the first record is in flight: buffer and slot taken
			start := time.Now()
			resp := rc.post(t, "open", nil, "second "+tt.name)
			if resp.status != 503 || resp.header.Get("Retry-After") != "1" {
				t.Errorf("over capacity: got %d %v Retry-After %q, want 503 with Retry-After 1", resp.status, resp.body, resp.header.Get("Retry-After"))
			}
			if waited := time.Since(start); waited > 5*time.Second {
				t.Errorf("over capacity: answered after %v, want at once (well within the 10s acknowledgement wait)", waited)
			}
			release <- struct{}{}
			if r := <-first; r.status != 202 {
				t.Errorf("first: got %d, want 202 once the broker answers", r.status)
			}
		})
	}
}

// slowSender is a client that sends its headers and the start of its body,
// then holds the rest back.
type slowSender struct {
	conn net.Conn
	rd   *bufio.Reader
	rest string
}

// startSlow opens a request announcing body and sends its first bytes once
// the receiver has begun to read the body (after its 100 Continue).
func startSlow(t *testing.T, rc *receiver, source, body string) *slowSender {
	t.Helper()
	conn, err := net.Dial("tcp", rc.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST /webhooks/%s HTTP/1.1\r\nHost: ingest\r\nContent-Type: application/json\r\n"+
		"Content-Length: %d\r\nExpect: 100-continue\r\n\r\n", source, len(body))
	s := &slowSender{conn: conn, rd: bufio.NewReader(conn), rest: body[5:]}
	line, err := s.rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("slow sender: got %q (%v) before sending its body, want 100 Continue", line, err)
	}
	if _, err := s.rd.ReadString('\n'); err != nil { // the blank line ending the 100
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, body[:5]); err != nil {
		t.Fatal(err)
	}
	return s
}

// finish sends the rest of the body and returns the receiver's status.
func (s *slowSender) finish(t *testing.T) int {
	t.Helper()
	if _, err := io.WriteString(s.conn, s.rest); err != nil {
		t.Fatalf("slow sender: connection closed before its body was sent: %v", err)
	}
	return s.status(t)
}

func (s *slowSender) status(t *testing.T) int {
	t.Helper()
	_ = s.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(s.rd, nil)
	if err != nil {
		t.Fatalf("slow sender: no answer: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSlowSendersTakeNoSlots: clients trickling their bodies hold their
// own connections, not the receiver's request slots: a normal request is
// accepted while they are still sending, and each is accepted once its
// body is complete. A sender slower than the body timeout is cut off.
func TestSlowSendersTakeNoSlots(t *testing.T) {
	env := kafkatest.New(t, 3, 64<<10)
	const slots = 4
	rc := newReceiver(t, env, ingest.Config{MaxInFlight: slots, BodyTimeout: 10 * time.Second})
	var slow []*slowSender
	for i := range 2 * slots {
		slow = append(slow, startSlow(t, rc, "open", fmt.Sprintf(`{"id":"slow-%d"}`, i)))
	}

	if resp := rc.post(t, "open", http.Header{"Content-Type": {"application/json"}}, `{"id":"normal"}`); resp.status != 202 {
		t.Fatalf("normal request beside %d slow senders: got %d %v, want 202", len(slow), resp.status, resp.body)
	}
	for i, s := range slow {
		if status := s.finish(t); status != 202 {
			t.Errorf("slow sender %d once its body is complete: got %d, want 202", i, status)
		}
	}
	if n := len(env.Records(t, env.Names.Ingest)); n != 2*slots+1 {
		t.Errorf("records: got %d, want %d", n, 2*slots+1)
	}

	t.Run("cut off after the body timeout", func(t *testing.T) {
		const timeout = 300 * time.Millisecond
		rc := newReceiver(t, env, ingest.Config{BodyTimeout: timeout})
		start := time.Now()
		s := startSlow(t, rc, "open", `{"id":"loris"}`)
		if status := s.status(t); status != http.StatusRequestTimeout {
			t.Errorf("sender that stops mid-body: got %d, want 408", status)
		}
		if waited := time.Since(start); waited < timeout {
			t.Errorf("cut off after %v, want no sooner than the %v timeout", waited, timeout)
		}
	})
}

// bodyBytes reads hookstream_ingest_body_bytes, the bytes of body buffers
// the receiver holds.
func (r *receiver) bodyBytes(t *testing.T) int64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "hookstream_ingest_body_bytes" {
			return int64(mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	t.Fatal("hookstream_ingest_body_bytes not registered")
	return 0
}

// TestBodyBudgetBoundsBodiesHeld: slow senders holding partial bodies take
// the body budget, not slots; a sender past the budget gets 503 with
// Retry-After at once and nothing is written, and once the slow senders
// finish, requests are accepted again. The bytes held never exceed the
// budget, even under a burst.
func TestBodyBudgetBoundsBodiesHeld(t *testing.T) {
	env := kafkatest.New(t, 3, 64<<10)
	const budget, size = 10 << 10, 4 << 10
	rc := newReceiver(t, env, ingest.Config{BodyBudget: budget})
	body := func(id string) string {
		return fmt.Sprintf(`{"id":%q,"pad":"%s"}`, id, strings.Repeat("x", size-len(id)-17))
	}
	post := func(id string) response {
		return rc.post(t, "open", http.Header{"Content-Type": {"application/json"}}, body(id))
	}
	slow := []*slowSender{startSlow(t, rc, "open", body("slow-0")), startSlow(t, rc, "open", body("slow-1"))}
	if held := rc.bodyBytes(t); held > budget || held < 2*size {
		t.Errorf("bytes held by two slow senders of %d bytes: got %d, want between %d and the budget %d", size, held, 2*size, budget)
	}
	if resp := post("over"); resp.status != 503 || resp.header.Get("Retry-After") != "1" {
		t.Errorf("a sender past the budget: got %d %v Retry-After %q, want 503 with Retry-After 1", resp.status, resp.body, resp.header.Get("Retry-After"))
	}
	for i, s := range slow {
		if status := s.finish(t); status != 202 {
			t.Errorf("slow sender %d once its body is complete: got %d, want 202", i, status)
		}
	}
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		if held := rc.bodyBytes(t); held != 0 {
			return fmt.Errorf("bytes held once every request ended: got %d, want 0", held)
		}
		return nil
	})
	if resp := post("after"); resp.status != 202 {
		t.Errorf("a sender once the slow ones finished: got %d %v, want 202", resp.status, resp.body)
	}
	keys := map[string]bool{}
	for _, r := range env.Records(t, env.Names.Ingest) {
		keys[string(r.Key)] = true
	}
	if len(keys) != 3 || keys["open:over"] {
		t.Errorf("records: got keys %v, want open:slow-0, open:slow-1 and open:after, not open:over (answered 503)", keys)
	}

	t.Run("burst", func(t *testing.T) {
		var wg sync.WaitGroup
		statuses := make(chan int, 16)
		for i := range cap(statuses) {
			wg.Go(func() { statuses <- post(fmt.Sprintf("burst-%d", i)).status })
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		for held := int64(0); ; held = rc.bodyBytes(t) {
			if held > budget {
				t.Fatalf("bytes held during a burst: got %d, want at most the budget %d", held, budget)
			}
			select {
			case <-done:
			default:
				continue
			}
			break
		}
		close(statuses)
		for status := range statuses {
			if status != 202 && status != 503 {
				t.Errorf("a request of the burst: got %d, want 202, or 503 past the budget", status)
			}
		}
	})
}

// TestHeaderBytesBounded: the receiver's server refuses request headers
// past maxHeaderBytes with 431, and takes a provider's usual few KB. Each
// request has a connection of its own: on a kept-alive one, net/http's
// bufio slop lets a few KiB more through.
func TestHeaderBytesBounded(t *testing.T) {
	env := kafkatest.New(t, 3, 64<<10)
	addr := kafkatest.FreeAddr(t)
	serve(t, newReceiver(t, env, ingest.Config{Addr: addr}), addr)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	post := func(id string, header http.Header) int {
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/webhooks/open", strings.NewReader(`{"id":"`+id+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = header
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	provider := githubHeaders("d", "{}") // and a few KB more, as providers send
	provider.Set("X-Trace", strings.Repeat("t", 4<<10))
	if status := post("normal", provider); status != 202 {
		t.Errorf("request with %d bytes of headers: got %d, want 202", headerBytes(provider), status)
	}
	huge := http.Header{}
	for i := range 70 {
		huge.Set(fmt.Sprintf("X-Pad-%d", i), strings.Repeat("p", 1<<10))
	}
	if status := post("huge", huge); status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("request with %d bytes of headers: got %d, want 431", headerBytes(huge), status)
	}
}

func headerBytes(h http.Header) int {
	var n int
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// TestAcceptedEventCanBeReplayed: the largest form of invalid bytes the
// receiver accepts makes an events record that still fits the record limit
// when a replay marks it (hs-replay and the envelope's replay), so a
// replay re-emits it instead of dead-lettering it.
func TestAcceptedEventCanBeReplayed(t *testing.T) {
	const maxBody = 64 << 10
	env := kafkatest.New(t, 1, maxBody)
	rc := newReceiver(t, env, ingest.Config{MaxBody: maxBody})
	post := func(n int) int {
		header := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "Idempotency-Key": {fmt.Sprintf("k%06d", n)}}
		return rc.post(t, "open", header, strings.Repeat("\xff", n)).status
	}
	lo, hi := 1<<10, 63<<10 // accepted, refused
	if a, b := post(lo), post(hi); a != http.StatusAccepted || b != http.StatusRequestEntityTooLarge {
		t.Fatalf("forms of %d and %d bytes: got %d and %d, want 202 and 413", lo, hi, a, b)
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if post(mid) == http.StatusAccepted {
			lo = mid
		} else {
			hi = mid
		}
	}
	key := fmt.Sprintf("open:k%06d", lo)
	limit := topics.MaxRecordBytes(maxBody)
	for _, r := range env.Records(t, env.Names.Ingest) {
		if string(r.Key) != key {
			continue
		}
		e, err := topics.NewEnvelope(r, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		e.Replay = 1000
		ev, err := topics.EventRecord(env.Names.Events, r, e)
		if err != nil {
			t.Fatal(err)
		}
		if n := topics.RecordBytes(ev); n > limit {
			t.Errorf("form of %d bytes accepted: replayed, its events record takes %d bytes, over the %d-byte limit", lo, n, limit)
		}
		return
	}
	t.Fatalf("no ingest record %s", key)
}

// TestEventMustFitARecord: a 202 promises the event can be processed, so a
// request whose events record could never fit the record limit is refused
// with 413 and nothing written, while a JSON body at the body limit is
// accepted.
func TestEventMustFitARecord(t *testing.T) {
	const maxBody = 64 << 10
	env := kafkatest.New(t, 3, maxBody)
	rc := newReceiver(t, env, ingest.Config{MaxBody: maxBody})
	form := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
	jsonType := http.Header{"Content-Type": {"application/json"}}
	atLimit := `{"id":"at-limit","pad":"` + strings.Repeat("x", maxBody-len(`{"id":"at-limit","pad":""}`)) + `"}`
	tests := []struct {
		name   string
		header http.Header
		body   string
		status int
	}{
		// base64 and the form decoding, each invalid byte escaped to \ufffd: ~7x.
		{"form of invalid bytes under the body limit", form, strings.Repeat("\xff", 63<<10), 413},
		{"carried header escaped six-fold", http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {strings.Repeat("<", 100<<10)}}, `{"a":1}`, 413},
		{"small form of invalid bytes", form, strings.Repeat("\xff", 4<<10), 202},
		{"JSON at the body limit", jsonType, atLimit, 202},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := rc.post(t, "open", tt.header, tt.body)
			if resp.status != tt.status {
				t.Fatalf("got %d %v, want %d", resp.status, resp.body, tt.status)
			}
			if tt.status == 413 && !strings.HasPrefix(resp.body["error"], "payload too large: ") {
				t.Errorf("error: got %q, want payload too large with the reason", resp.body["error"])
			}
		})
	}
	recs := env.Records(t, env.Names.Ingest)
	if len(recs) != 2 {
		t.Fatalf("records: got %d, want only the 2 accepted", len(recs))
	}
	limit := topics.MaxRecordBytes(maxBody)
	for _, r := range recs {
		e, err := topics.NewEnvelope(r, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		ev, err := topics.EventRecord(env.Names.Events, r, e)
		if err != nil {
			t.Fatal(err)
		}
		if n := topics.RecordBytes(ev); n > limit {
			t.Errorf("accepted %s: its events record takes %d bytes, over the %d-byte limit", r.Key, n, limit)
		}
	}
}

// serve runs rc's own server on addr (Handler.Run, not httptest) until the
// test ends, and returns once it accepts connections.
func serve(t *testing.T, rc *receiver, addr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rc.h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
		}
		return err
	})
}

// TestConnectionsBounded checks that the receiver serves at most MaxConns
// connections at once: one more waits, unserved, until one closes, and is
// then served.
func TestConnectionsBounded(t *testing.T) {
	env := kafkatest.New(t, 3, 64<<10)
	addr := kafkatest.FreeAddr(t)
	const conns = 3
	serve(t, newReceiver(t, env, ingest.Config{Addr: addr, MaxConns: conns}), addr)
	var idle []net.Conn
	for len(idle) < conns {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, conn)
	}
	answered := make(chan int, 1)
	go func() {
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
		resp, err := client.Post("http://"+addr+"/webhooks/open", "application/json", strings.NewReader(`{"id":"one-more"}`))
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	// Each idle connection holds its place: the request waits unserved.
	// Nothing can show that it never will; a second of waiting shows it
	// was not served while the bound held.
	select {
	case status := <-answered:
		t.Fatalf("request beside %d open connections (bound %d): answered %d, want it to wait", len(idle), conns, status)
	case <-time.After(time.Second):
	}
	idle[0].Close()
	if status := <-answered; status != http.StatusAccepted {
		t.Errorf("request once a connection closed: got %d, want 202", status)
	}
	for _, c := range idle[1:] {
		c.Close()
	}
}
