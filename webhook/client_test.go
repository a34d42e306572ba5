package webhook

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstream/hookstream/subscriptions"
)

// clientTestBody is the envelope of the deliveries of these tests.
const clientTestBody = `{"id":"evt_1","source":"github","type":"push","data":{"n":1}}`

// newClientTestServer starts a loopback subscriber, closed at cleanup.
func newClientTestServer(t testing.TB, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// newClientForTest returns a client, closed at cleanup.
func newClientForTest(t testing.TB, cfg Config) *Client {
	t.Helper()
	c := New(cfg)
	t.Cleanup(c.Close)
	return c
}

// clientTestUserAgent is the User-Agent of clientTestDelivery.
const clientTestUserAgent = "hookstream/1.2.3"

// clientTestDelivery returns a delivery of clientTestBody to url as
// webhook-id evt_1, signed with keys (the current one first) by a
// subscription as the dispatcher renders it.
func clientTestDelivery(url string, keys ...[]byte) Delivery {
	if len(keys) == 0 {
		keys = [][]byte{[]byte("test key")}
	}
	s := subscriptions.Subscription{ID: "sub_test", Secret: "whsec_" + base64.StdEncoding.EncodeToString(keys[0])}
	if len(keys) > 1 {
		s.PreviousSecret = "whsec_" + base64.StdEncoding.EncodeToString(keys[1])
		s.PreviousSecretUntil = time.Now().Add(time.Hour)
	}
	h, err := subscriptions.Compile(s).Header("evt_1", []byte(clientTestBody), time.Now(), clientTestUserAgent)
	if err != nil {
		panic(err)
	}
	return Delivery{URL: url, Header: h, Body: []byte(clientTestBody)}
}

// clientSpecVerify checks a webhook-signature header as the Standard Webhooks
// specification describes it, independently of package signature: each
// space-separated "v1,<base64>" is the base64 of HMAC-SHA256(key,
// "id.timestamp.body"), compared in constant time. It returns how many
// signatures there are and the index of the key each one matches (-1: none).
func clientSpecVerify(t testing.TB, keys [][]byte, id, timestamp, header string, body []byte) []int {
	t.Helper()
	var matched []int
	for _, field := range strings.Split(header, " ") {
		b64, ok := strings.CutPrefix(field, "v1,")
		if !ok {
			t.Errorf("signature field %q: does not start with v1,", field)
			matched = append(matched, -1)
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Errorf("signature field %q: %v", field, err)
			matched = append(matched, -1)
			continue
		}
		which := -1
		for i, key := range keys {
			h := hmac.New(sha256.New, key)
			fmt.Fprintf(h, "%s.%s.%s", id, timestamp, body)
			if hmac.Equal(sig, h.Sum(nil)) {
				which = i
				break
			}
		}
		matched = append(matched, which)
	}
	return matched
}

// clientSeen is what a subscriber received.
type clientSeen struct {
	header http.Header
	body   []byte
}

func TestClientDeliverSigned(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys [][]byte
	}{
		{"one key", [][]byte{[]byte("current key")}},
		{"rotation", [][]byte{[]byte("current key"), []byte("previous key")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := make(chan clientSeen, 1)
			srv := newClientTestServer(t, func(w http.ResponseWriter, r *http.Request) {
				body, err := io.ReadAll(r.Body)
				if err != nil {
					t.Errorf("subscriber: read body: %v", err)
				}
				if r.Method != http.MethodPost {
					t.Errorf("method: got %s, want POST", r.Method)
				}
				seen <- clientSeen{r.Header.Clone(), body}
				w.WriteHeader(http.StatusNoContent)
			})
			c := newClientForTest(t, Config{AllowPrivate: true})

			before := time.Now().Unix()
			res := c.Deliver(t.Context(), clientTestDelivery(srv.URL+"/hook", tc.keys...))
			after := time.Now().Unix()
			if got, want := res.OK(), true; got != want {
				t.Fatalf("OK: got %v, want %v (status %d, err %v)", got, want, res.Status, res.Err)
			}
			if got, want := res.Status, http.StatusNoContent; got != want {
				t.Errorf("Status: got %d, want %d", got, want)
			}
			if res.Latency <= 0 {
				t.Errorf("Latency: got %s, want > 0", res.Latency)
			}

			s := <-seen
			for _, h := range []struct{ name, want string }{
				{"Content-Type", "application/json"},
				{"User-Agent", clientTestUserAgent},
				{"webhook-id", "evt_1"},
			} {
				if got := s.header.Get(h.name); got != h.want {
					t.Errorf("%s: got %q, want %q", h.name, got, h.want)
				}
			}
			if got, want := string(s.body), clientTestBody; got != want {
				t.Errorf("body: got %s, want %s", got, want)
			}
			ts := s.header.Get("webhook-timestamp")
			secs, err := strconv.ParseInt(ts, 10, 64)
			if err != nil || secs < before || secs > after {
				t.Errorf("webhook-timestamp: got %q, want Unix seconds in [%d, %d]", ts, before, after)
			}
			matched := clientSpecVerify(t, tc.keys, "evt_1", ts, s.header.Get("webhook-signature"), s.body)
			if got, want := len(matched), len(tc.keys); got != want {
				t.Fatalf("signatures: got %d, want %d", got, want)
			}
			for i, got := range matched {
				if want := i; got != want { // one signature per key, in order
					t.Errorf("signature %d: matches key %d, want key %d", i, got, want)
				}
			}
		})
	}
}

func TestClientDeliverStatus(t *testing.T) {
	// Every URL carries a secret query, which no error may repeat.
	const query = "?token=secret"
	redirected := new(atomic.Int32)
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc // nil: nothing listens
		status  int
		ok      bool
		gone    bool
		errHas  string        // a part of Err, "" when Err is nil
		minWait time.Duration // bounds of RetryAfter
		maxWait time.Duration
	}{
		{
			name:    "200",
			handler: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") },
			status:  200, ok: true,
		},
		{
			name:    "204",
			handler: func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) },
			status:  204, ok: true,
		},
		{
			name: "200 with a body past the drain limit",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Write(make([]byte, 3*maxDrain))
			},
			status: 200, ok: true,
		},
		{
			name: "500",
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "boom", http.StatusInternalServerError)
			},
			status: 500, errHas: `status 500 Internal Server Error: "boom\n"`,
		},
		{
			name: "301 not followed",
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/elsewhere" {
					redirected.Add(1)
					return
				}
				http.Redirect(w, r, "/elsewhere?token=secret", http.StatusMovedPermanently)
			},
			status: 301, errHas: "/elsewhere?… not followed",
		},
		{
			name:    "410",
			handler: func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusGone) },
			status:  410, gone: true, errHas: "status 410 Gone",
		},
		{
			name: "429 with seconds",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", "7")
				w.WriteHeader(http.StatusTooManyRequests)
			},
			status: 429, errHas: "status 429", minWait: 7 * time.Second, maxWait: 7 * time.Second,
		},
		{
			name: "503 with a date",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", time.Now().Add(90*time.Second).UTC().Format(http.TimeFormat))
				w.WriteHeader(http.StatusServiceUnavailable)
			},
			status: 503, errHas: "status 503", minWait: 85 * time.Second, maxWait: 90 * time.Second,
		},
		{
			name: "500 ignores Retry-After",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", "7")
				w.WriteHeader(http.StatusInternalServerError)
			},
			status: 500, errHas: "status 500",
		},
		{
			name:   "connection refused",
			status: 0, errHas: "connection refused",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var target string
			if tc.handler != nil {
				target = newClientTestServer(t, tc.handler).URL + "/hook" + query
			} else {
				srv := httptest.NewServer(http.NotFoundHandler())
				target = srv.URL + "/hook" + query
				srv.Close()
			}
			c := newClientForTest(t, Config{AllowPrivate: true})

			res := c.Deliver(t.Context(), clientTestDelivery(target))
			if got, want := res.Status, tc.status; got != want {
				t.Errorf("Status: got %d, want %d", got, want)
			}
			if got, want := res.OK(), tc.ok; got != want {
				t.Errorf("OK: got %v, want %v", got, want)
			}
			if got, want := res.Gone(), tc.gone; got != want {
				t.Errorf("Gone: got %v, want %v", got, want)
			}
			if got := res.RetryAfter; got < tc.minWait || got > tc.maxWait {
				t.Errorf("RetryAfter: got %s, want [%s, %s]", got, tc.minWait, tc.maxWait)
			}
			switch {
			case tc.errHas == "" && res.Err != nil:
				t.Errorf("Err: got %v, want nil", res.Err)
			case tc.errHas != "" && res.Err == nil:
				t.Errorf("Err: got nil, want one containing %q", tc.errHas)
			case tc.errHas != "":
				if got := res.Err.Error(); !strings.Contains(got, tc.errHas) || strings.Contains(got, "secret") {
					t.Errorf("Err: got %q, want it to contain %q and not the query", got, tc.errHas)
				}
			}
		})
	}
	if got, want := redirected.Load(), int32(0); got != want {
		t.Errorf("requests to the redirect target: got %d, want %d", got, want)
	}
}

func TestClientDeliverBadURL(t *testing.T) {
	c := newClientForTest(t, Config{AllowPrivate: true})
	for _, raw := range []string{"ftp://example.com/", "/relative", "http://user:hunter2@127.0.0.1:1/", "http://%zz"} {
		t.Run(raw, func(t *testing.T) {
			res := c.Deliver(t.Context(), clientTestDelivery(raw))
			if got, want := res.Status, 0; got != want {
				t.Errorf("Status: got %d, want %d", got, want)
			}
			if res.Err == nil || !strings.HasPrefix(res.Err.Error(), "url: ") || strings.Contains(res.Err.Error(), "hunter2") {
				t.Errorf("Err: got %v, want a url: error without the password", res.Err)
			}
		})
	}
	t.Run("unsigned", func(t *testing.T) {
		srv := newClientTestServer(t, func(w http.ResponseWriter, r *http.Request) {
			t.Errorf("unsigned delivery sent")
		})
		d := clientTestDelivery(srv.URL)
		d.Header.Del("webhook-signature")
		if res := c.Deliver(t.Context(), d); res.Err == nil {
			t.Errorf("Err: got nil, want an error")
		}
	})
}

// clientHang is a subscriber that answers nothing until the client hangs up
// (or 10s pass).
func clientHang(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body) // the server notices a hang-up only once the body is read
	select {
	case <-r.Context().Done():
	case <-time.After(10 * time.Second):
	}
}

// clientDribbleHeaders starts a loopback server that answers every connection
// with a status line and then one byte of headers every 50ms, never ending
// them, until the client hangs up.
func clientDribbleHeaders(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				bufio.NewReader(conn).ReadString('\n') // the request line
				if _, err := io.WriteString(conn, "HTTP/1.1 200 OK\r\n"); err != nil {
					return
				}
				for {
					if _, err := io.WriteString(conn, "X"); err != nil {
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/hook"
}

func TestClientDeliverTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, tc := range []struct {
		name   string
		target func(t *testing.T) string
	}{
		{"sleeping handler", func(t *testing.T) string {
			return newClientTestServer(t, clientHang).URL
		}},
		{"slow-loris body", func(t *testing.T) string {
			return newClientTestServer(t, func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body) // so that the server notices the client hang up
				w.WriteHeader(http.StatusOK)
				rc := http.NewResponseController(w)
				for {
					if _, err := w.Write([]byte("x")); err != nil {
						return
					}
					if err := rc.Flush(); err != nil {
						return
					}
					select {
					case <-r.Context().Done():
						return
					case <-time.After(50 * time.Millisecond):
					}
				}
			}).URL
		}},
		{"slow-loris headers", clientDribbleHeaders},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClientForTest(t, Config{AllowPrivate: true, Timeout: timeout})
			target := tc.target(t)

			start := time.Now()
			res := c.Deliver(t.Context(), clientTestDelivery(target))
			elapsed := time.Since(start)
			if got, want := res.OK(), false; got != want {
				t.Errorf("OK: got %v, want %v", got, want)
			}
			if res.Err == nil {
				t.Errorf("Err: got nil, want a timeout")
			}
			if limit := timeout + time.Second; elapsed > limit {
				t.Errorf("returned after %s, want within %s", elapsed, limit)
			}
		})
	}
}

// TestClientWaitForAHostIsNotTheTimeout: with every connection to a host
// busy, an attempt waits for one without its timeout running: the time a
// subscriber is given starts when its request can be sent, so many
// subscriptions to one host fail no delivery by queueing for it.
func TestClientWaitForAHostIsNotTheTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	release := make(chan struct{})
	var served atomic.Int32
	srv := newClientTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		if served.Add(1) <= 2 {
			<-release
		}
		w.WriteHeader(http.StatusNoContent)
	})
	c := newClientForTest(t, Config{AllowPrivate: true, Timeout: time.Minute, MaxConns: 2})
	results := make(chan Result, 3)
	for range 2 {
		go func() { results <- c.Deliver(t.Context(), clientTestDelivery(srv.URL)) }()
	}
	for served.Load() < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	d := clientTestDelivery(srv.URL)
	d.Timeout = timeout
	go func() { results <- c.Deliver(t.Context(), d) }()
	time.Sleep(3 * timeout) // the third waits for a connection past its timeout
	if n := served.Load(); n != 2 {
		t.Fatalf("requests the server got while both connections were busy: %d, want 2", n)
	}
	close(release)
	for range 3 {
		if res := <-results; !res.OK() {
			t.Errorf("delivery: %v, want every one delivered", res.Err)
		}
	}
}

func TestClientDeliverCanceled(t *testing.T) {
	srv := newClientTestServer(t, clientHang)
	c := newClientForTest(t, Config{AllowPrivate: true, Timeout: time.Minute})
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()

	res := c.Deliver(ctx, clientTestDelivery(srv.URL))
	if got, want := errors.Is(res.Err, context.DeadlineExceeded), true; got != want {
		t.Errorf("errors.Is(%v, context.DeadlineExceeded): got %v, want %v", res.Err, got, want)
	}
	if res.Err != nil && strings.Contains(res.Err.Error(), "timeout after") {
		t.Errorf("Err: got %q, want no attempt timeout: the caller's context ended it", res.Err)
	}
}

func TestClientDeliverReusesConnection(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"success", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }},
		{"failure with a body", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			w.Write(make([]byte, 8<<10))
		}},
		{"redirect", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var conns atomic.Int32
			srv := httptest.NewUnstartedServer(tc.handler)
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			t.Cleanup(srv.Close)
			c := newClientForTest(t, Config{AllowPrivate: true})

			for range 50 {
				c.Deliver(t.Context(), clientTestDelivery(srv.URL))
			}
			if got, want := conns.Load(), int32(1); got != want {
				t.Errorf("connections: got %d, want %d", got, want)
			}
		})
	}
}

func TestClientDeliverForbidden(t *testing.T) {
	var requests atomic.Int32
	srv := newClientTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
	})
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	c := newClientForTest(t, Config{})

	// The guard refuses in the dialer's Control, before connect: no packet
	// leaves for any of these.
	for _, tc := range []struct {
		url     string
		address string // named in the error
	}{
		{fmt.Sprintf("http://127.0.0.1:%d/hook", port), "127.0.0.1"},
		{fmt.Sprintf("http://[::1]:%d/hook", port), "::1"},
		{fmt.Sprintf("http://[::ffff:127.0.0.1]:%d/hook", port), "127.0.0.1"},
		{fmt.Sprintf("http://localhost:%d/hook", port), ""}, // 127.0.0.1 or ::1
		{"http://10.0.0.1:9/hook", "10.0.0.1"},
		{"http://169.254.169.254/latest/meta-data/", "169.254.169.254"},
		{"http://[fd00:ec2::254]/latest/meta-data/", "fd00:ec2::254"},
		{"http://0.0.0.0:9/hook", "0.0.0.0"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			res := c.Deliver(t.Context(), clientTestDelivery(tc.url))
			if got, want := errors.Is(res.Err, ErrForbiddenAddress), true; got != want {
				t.Fatalf("errors.Is(%v, ErrForbiddenAddress): got %v, want %v", res.Err, got, want)
			}
			if got, want := res.Status, 0; got != want {
				t.Errorf("Status: got %d, want %d", got, want)
			}
			if got := res.Err.Error(); !strings.Contains(got, tc.address) {
				t.Errorf("Err: got %q, want it to name %s", got, tc.address)
			}
		})
	}
	if got, want := requests.Load(), int32(0); got != want {
		t.Errorf("requests received: got %d, want %d", got, want)
	}
}

func TestClientGuardDial(t *testing.T) {
	for _, tc := range []struct {
		address   string
		forbidden bool
	}{
		{"93.184.215.14:443", false},
		{"[2606:4700:4700::1111]:443", false},
		{"127.0.0.1:80", true},
		{"[::ffff:169.254.169.254]:80", true},
		{"[fe80::1%eth0]:80", true},
		{"example.com:80", true}, // never a name: refused, not resolved
		{"", true},
	} {
		t.Run(tc.address, func(t *testing.T) {
			err := guardDial("tcp", tc.address, nil)
			if got, want := errors.Is(err, ErrForbiddenAddress), tc.forbidden; got != want {
				t.Errorf("guardDial(%q) = %v: forbidden got %v, want %v", tc.address, err, got, want)
			}
		})
	}
}

func TestClassifyDeliveryAddr(t *testing.T) {
	for _, tc := range []struct {
		ip   string
		want string
	}{
		// Public.
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"93.184.215.14", ""},
		{"100.63.255.255", ""},
		{"100.128.0.0", ""},
		{"172.15.255.255", ""},
		{"172.32.0.0", ""},
		{"169.253.255.255", ""},
		{"223.255.255.255", ""},
		{"2606:4700:4700::1111", ""},
		{"2001:4860:4860::8888", ""},
		{"64:ff9b::808:808", ""}, // NAT64 of 8.8.8.8
		// Loopback.
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		// Private.
		{"10.0.0.1", "private"},
		{"10.255.255.255", "private"},
		{"172.16.0.0", "private"},
		{"172.31.255.255", "private"},
		{"192.168.1.1", "private"},
		{"::ffff:10.0.0.1", "private"},
		{"::ffff:192.168.0.1", "private"},
		{"fc00::1", "private"},
		{"fd12:3456::1", "private"},
		{"fd00:ec2::254", "private"},  // AWS metadata over IPv6
		{"64:ff9b::a00:1", "private"}, // NAT64 of 10.0.0.1
		{"64:ff9b:1::1", "private"},
		// Link-local, cloud metadata included.
		{"169.254.169.254", "link-local"},
		{"169.254.0.1", "link-local"},
		{"::ffff:169.254.169.254", "link-local"},
		{"::ffff:a9fe:a9fe", "link-local"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"fec0::1", "link-local"},
		// Unspecified.
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "unspecified"},
		{"::", "unspecified"},
		{"::ffff:0.0.0.0", "unspecified"},
		// Multicast.
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"ff02::1", "multicast"},
		{"ff0e::1", "multicast"},
		{"::ffff:224.0.0.1", "multicast"},
		// Shared address space (CGNAT), Alibaba's metadata included.
		{"100.64.0.1", "shared (CGNAT)"},
		{"100.100.100.200", "shared (CGNAT)"},
		{"100.127.255.255", "shared (CGNAT)"},
		{"::ffff:100.64.0.1", "shared (CGNAT)"},
		// Reserved.
		{"192.0.0.192", "reserved"},
		{"198.18.0.1", "reserved"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.255", "reserved"},
		{"::a00:1", "reserved"}, // IPv4-compatible
		{"100::1", "reserved"},
	} {
		t.Run(tc.ip, func(t *testing.T) {
			if got := classifyAddr(netip.MustParseAddr(tc.ip)); got != tc.want {
				t.Errorf("classifyAddr(%s): got %q, want %q", tc.ip, got, tc.want)
			}
		})
	}
	if got, want := classifyAddr(netip.Addr{}), "invalid"; got != want {
		t.Errorf("classifyAddr(zero): got %q, want %q", got, want)
	}
}

func TestClientParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		value string
		want  time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"7", 7 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"86400", 24 * time.Hour},
		{"86401", 24 * time.Hour},
		{"99999999999999999999999", 24 * time.Hour},
		{"-5", 0},
		{"+5", 0},
		{"1.5", 0},
		{"soon", 0},
		{"Sun, 01 Mar 2026 12:01:30 GMT", 90 * time.Second},
		{"Sunday, 01-Mar-26 12:01:30 GMT", 90 * time.Second},
		{"Sun Mar  1 12:01:30 2026", 90 * time.Second},
		{"Sun, 01 Mar 2026 11:00:00 GMT", 0},
		{"Sun, 08 Mar 2026 12:00:00 GMT", 24 * time.Hour},
		{"Sun, 01 Mar 2026 12:01:30", 0},
	} {
		t.Run(tc.value, func(t *testing.T) {
			if got := parseRetryAfter(tc.value, now); got != tc.want {
				t.Errorf("parseRetryAfter(%q): got %s, want %s", tc.value, got, tc.want)
			}
		})
	}
}

func BenchmarkDeliver(b *testing.B) {
	srv := newClientTestServer(b, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	})
	c := newClientForTest(b, Config{AllowPrivate: true})
	d := clientTestDelivery(srv.URL+"/hook", []byte("current key"), []byte("previous key"))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if res := c.Deliver(ctx, d); !res.OK() {
			b.Fatalf("Deliver: status %d, err %v", res.Status, res.Err)
		}
	}
}

// TestClientRoomBoundsWaitingAttempts: at most roomPerSlot × MaxConns
// attempts to one host hold room at once (the rest wait in Room, as lanes,
// not as parked attempts); another host has its own; a release given
// twice frees one place.
func TestClientRoomBoundsWaitingAttempts(t *testing.T) {
	const maxConns = 2
	c := newClientForTest(t, Config{AllowPrivate: true, MaxConns: maxConns})
	ctx := context.Background()
	var held []func()
	for range roomPerSlot * maxConns {
		release, err := c.Room(ctx, "http://127.0.0.1:9/a")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, release)
	}
	full := func() bool {
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		release, err := c.Room(short, "http://127.0.0.1:9/b")
		if err == nil {
			held = append(held, release)
			return false
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Room on a full host: %v, want the context's deadline", err)
		}
		return true
	}
	if !full() {
		t.Fatalf("Room gave a place beyond %d for one host", roomPerSlot*maxConns)
	}
	other, err := c.Room(ctx, "http://127.0.0.2:9/")
	if err != nil {
		t.Fatalf("Room of another host while the first is full: %v", err)
	}
	other()
	held[0]()
	held[0]()
	if full() {
		t.Fatal("no place after a release")
	}
	if !full() {
		t.Fatal("a release given twice freed two places")
	}
	for _, release := range held {
		release()
	}
}
