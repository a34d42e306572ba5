// Package webhook is hookstream's outbound HTTP client. A delivery
// attempt is one POST to a subscriber URL, its body and signed headers
// rendered by the subscription (subscriptions.Compiled), bounded in time
// and in what it reads of the answer, without redirects or proxies,
// through a dialer that refuses loopback, private, link-local and
// metadata addresses (the SSRF guard); the attempts to one host share its
// connections and wait for them in bounded numbers (Client.Room). An
// endpoint is verified before it is subscribed (verify.go).
//
// It owns the HTTP exchange and what its answer says (Result); it does
// not own what becomes of an attempt (retries, circuits, dead letters,
// disabling: package dispatch), nor signing (package signature) nor
// rendering (package subscriptions).
package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/hookstream/hookstream/signature"
	"github.com/hookstream/hookstream/subscriptions"
)

// ErrForbiddenAddress marks a target refused by the SSRF guard: an address
// being dialed is loopback, private, link-local (cloud metadata included),
// unspecified, multicast, shared (CGNAT) or otherwise not publicly routable,
// and Config.AllowPrivate is off.
var ErrForbiddenAddress = errors.New("forbidden delivery address")

// Defaults of Config.
const (
	defaultTimeout  = 15 * time.Second
	defaultMaxConns = 64
)

const (
	// maxDrain bounds how much of a response body is read (and
	// discarded) so that the connection can be reused; a longer body closes
	// the connection instead.
	maxDrain = 64 << 10
	// maxSnippet bounds how much of a failed response's body its
	// error quotes.
	maxSnippet = 128
	// maxRetryAfter caps a Retry-After.
	maxRetryAfter = 24 * time.Hour
	// maxHeaderBytes bounds the response headers of a subscriber.
	maxHeaderBytes = 64 << 10
)

// Config configures deliveries.
type Config struct {
	// Timeout bounds one attempt, from dialing to reading the response,
	// unless the delivery has its own; default 15s.
	Timeout time.Duration
	// AllowPrivate allows loopback, private, link-local and metadata
	// targets; default false.
	AllowPrivate bool
	// Propagator writes the trace context of an attempt to its request
	// (traceparent); default W3C Trace Context.
	Propagator propagation.TextMapPropagator
	// UserAgent is sent with every delivery, e.g. "hookstream/1.2.3";
	// default none (Go's).
	UserAgent string
	// MaxConns bounds the connections per host, idle or active, and the
	// attempts in flight to it; default 64. An attempt waits for one of
	// them before its timeout starts.
	MaxConns int
	// RequireHTTPS refuses targets that are not https, loopback aside (see
	// subscriptions.Security.RequireHTTPS); default false.
	RequireHTTPS bool
}

// Delivery is one attempt.
type Delivery struct {
	URL string
	// Header is every header but the trace context, which the client
	// writes: what subscriptions.Compiled.Header builds, signed.
	Header http.Header
	// Body is what subscriptions.Compiled.Render builds: an envelope,
	// a transform's JSON, or a batch of either.
	Body []byte
	// Timeout bounds the attempt, at most subscriptions.MaxTimeout; 0:
	// the client's.
	Timeout time.Duration
	// Room, when set, is called once the attempt holds one of its host's
	// connection slots, or has stopped waiting for one (Client.Room).
	Room func()
}

// Result is the outcome of one attempt.
type Result struct {
	// Status is the HTTP status, 0 when there was no response.
	Status int
	// Latency runs from sending the request to the end of reading the
	// response.
	Latency time.Duration
	// Err is nil on success; otherwise it describes the transport error,
	// timeout, refused target (wrapping ErrForbiddenAddress) or non-2xx
	// status. It never contains the query string of the URL.
	Err error
	// RetryAfter is the Retry-After of a 429 or 503 response, in seconds
	// or as an HTTP date, capped at 24h; otherwise 0.
	RetryAfter time.Duration
}

// OK reports a 2xx response, fully received.
func (r Result) OK() bool { return r.Err == nil && r.Status >= 200 && r.Status < 300 }

// Gone reports a 410: the subscriber asks to be disabled.
func (r Result) Gone() bool { return r.Status == http.StatusGone }

// Client delivers webhooks over keep-alive connections shared by all
// subscriptions. It is safe for concurrent use; build it with New.
type Client struct {
	http         *http.Client
	transport    *http.Transport
	hosts        hostGates
	timeout      time.Duration
	userAgent    string
	requireHTTPS bool
	propagator   propagation.TextMapPropagator
}

// New returns a client configured by cfg, with defaults for its zero
// fields. It does no I/O.
func New(cfg Config) *Client {
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	maxConns := cfg.MaxConns
	if maxConns <= 0 {
		maxConns = defaultMaxConns
	}
	var propagator propagation.TextMapPropagator = propagation.TraceContext{}
	if cfg.Propagator != nil {
		propagator = cfg.Propagator
	}
	// The transport's own bounds are backstops at the longest timeout a
	// delivery may have: each attempt's context bounds it as its
	// subscription says.
	backstop := max(timeout, subscriptions.MaxTimeout)
	dialer := &net.Dialer{Timeout: backstop, KeepAlive: 30 * time.Second}
	if !cfg.AllowPrivate {
		// Control runs on every address dialed, after name resolution, so
		// it sees the address actually connected to: DNS rebinding and
		// every address of a multi-address name are covered.
		dialer.Control = guardDial
	}
	transport := &http.Transport{
		Proxy:                  nil, // a proxy would dial for us, past the guard
		DialContext:            dialer.DialContext,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    backstop,
		ResponseHeaderTimeout:  backstop,
		ExpectContinueTimeout:  time.Second,
		IdleConnTimeout:        90 * time.Second,
		MaxIdleConnsPerHost:    maxConns,
		MaxConnsPerHost:        maxConns,
		MaxResponseHeaderBytes: maxHeaderBytes,
		DisableCompression:     true, // bodies are discarded
	}
	return &Client{
		http: &http.Client{
			Transport: transport,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
		transport:    transport,
		hosts:        hostGates{size: maxConns, gates: make(map[string]*hostGate)},
		timeout:      timeout,
		userAgent:    cfg.UserAgent,
		requireHTTPS: cfg.RequireHTTPS,
		propagator:   propagator,
	}
}

// Close closes idle connections. Deliveries in flight are not interrupted,
// and the client stays usable.
func (c *Client) Close() { c.transport.CloseIdleConnections() }

// Timeout is how long an attempt takes at most, unless its delivery
// says otherwise.
func (c *Client) Timeout() time.Duration { return c.timeout }

// Deliver makes one attempt: a POST of d.Body with d.Header to d.URL,
// which succeeds on a 2xx response received in full within the timeout
// (d.Timeout, else the client's). Redirects are not followed. The attempt
// first waits for one of the MaxConns slots of its host, as long as
// parent allows: the timeout is the subscriber's time to answer, not the
// queue's. Deliver returns no later than the timeout after it has a slot,
// or when parent is done.
func (c *Client) Deliver(parent context.Context, d Delivery) Result {
	timeout := c.timeout
	if d.Timeout > 0 {
		timeout = d.Timeout
	}
	req, err := http.NewRequestWithContext(parent, http.MethodPost, d.URL, bytes.NewReader(d.Body))
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) { // do not repeat the URL, which may hold secrets
			err = ue.Err
		}
		return Result{Err: fmt.Errorf("url: %w", err)}
	}
	target := redactURL(req.URL)
	if err := subscriptions.CheckTarget(req.URL, c.requireHTTPS); err != nil {
		return Result{Err: err}
	}
	if d.Header.Get(signature.HeaderSignature) == "" {
		return Result{Err: fmt.Errorf("post %s: unsigned", target)}
	}
	release, err := c.hosts.acquire(parent, req.URL.Scheme+"://"+req.URL.Host)
	if d.Room != nil {
		d.Room()
	}
	if err != nil {
		return Result{Err: fmt.Errorf("post %s: waiting for a connection: %w", target, err)}
	}
	defer release()
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	req = req.WithContext(ctx)

	req.Header = d.Header // built for this attempt
	c.propagator.Inject(parent, propagation.HeaderCarrier(req.Header))

	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return Result{Latency: time.Since(start), Err: describeTransportError(parent, ctx, timeout, target, err)}
	}
	res := Result{Status: resp.StatusCode}
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	var snippet []byte
	if resp.StatusCode >= 400 {
		snippet = make([]byte, maxSnippet)
	}
	snippet, err = drain(resp.Body, snippet)
	res.Latency = time.Since(start)

	switch {
	case ok && err != nil:
		res.Err = describeTransportError(parent, ctx, timeout, target, fmt.Errorf("status %d, reading the body: %w", resp.StatusCode, err))
	case ok:
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		loc := "(no Location)"
		if u, err := resp.Location(); err == nil {
			loc = redactURL(u)
		}
		res.Err = fmt.Errorf("%s: redirect to %s not followed", statusText(resp.StatusCode), loc)
	default:
		res.Err = errors.New(statusText(resp.StatusCode))
		if len(snippet) > 0 {
			res.Err = fmt.Errorf("%s: %q", statusText(resp.StatusCode), snippet)
		}
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		res.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return res
}

// Room waits, as long as ctx allows, until an attempt to rawURL's host
// may start: at most roomPerSlot times the host's connections wait for one
// at once, so that many subscriptions sharing a host queue as callers of
// Room (one goroutine a lane) rather than as parked attempts. The caller
// passes release as the attempt's Delivery.Room, or calls it itself when
// the attempt does not go; it may be called more than once. A URL that
// does not parse has room: Deliver refuses it.
func (c *Client) Room(ctx context.Context, rawURL string) (release func(), err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return func() {}, nil
	}
	leave, err := c.hosts.enter(ctx, u.Scheme+"://"+u.Host, func(g *hostGate) chan struct{} { return g.room })
	if err != nil {
		return nil, err
	}
	return sync.OnceFunc(leave), nil
}

// roomPerSlot: attempts that may wait for each connection slot of a host.
const roomPerSlot = 2

// hostGates bound the attempts in flight to each host (scheme, host and
// port) to size, the transport's connections per host, and those waiting
// to roomPerSlot × size. A host's gate exists while attempts hold or wait
// for it: the map is bounded by the attempts in flight.
type hostGates struct {
	size  int
	mu    sync.Mutex
	gates map[string]*hostGate
}

type hostGate struct {
	slots chan struct{}
	room  chan struct{}
	users int // holding or waiting for a slot or room
}

// acquire waits for a slot of host, or until ctx ends; release gives it
// back.
func (g *hostGates) acquire(ctx context.Context, host string) (release func(), err error) {
	return g.enter(ctx, host, func(h *hostGate) chan struct{} { return h.slots })
}

// enter waits for a place in host's semaphore sem, or until ctx ends;
// release gives it back.
func (g *hostGates) enter(ctx context.Context, host string, sem func(*hostGate) chan struct{}) (release func(), err error) {
	g.mu.Lock()
	gate := g.gates[host]
	if gate == nil {
		gate = &hostGate{slots: make(chan struct{}, g.size), room: make(chan struct{}, roomPerSlot*g.size)}
		g.gates[host] = gate
	}
	gate.users++
	g.mu.Unlock()
	leave := func() {
		g.mu.Lock()
		if gate.users--; gate.users == 0 {
			delete(g.gates, host)
		}
		g.mu.Unlock()
	}
	ch := sem(gate)
	select {
	case ch <- struct{}{}:
		return func() { <-ch; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}

// describeTransportError returns err, the failure of a request to target,
// without the URL net/http puts in it, and says so when the attempt (not its
// parent) ran out of time.
func describeTransportError(parent, attempt context.Context, timeout time.Duration, target string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if attempt.Err() != nil && parent.Err() == nil {
		return fmt.Errorf("post %s: timeout after %s: %w", target, timeout, err)
	}
	return fmt.Errorf("post %s: %w", target, err)
}

// drain reads body into snippet (when it has room), discards the rest up
// to maxDrain bytes so that the connection can be reused, and closes
// body. It returns the part of snippet read, and the first read error other
// than EOF. A body longer than maxDrain is not an error: closing it
// closes the connection.
func drain(body io.ReadCloser, snippet []byte) ([]byte, error) {
	defer body.Close()
	n, err := io.ReadFull(body, snippet)
	snippet = snippet[:n]
	switch err {
	case io.EOF, io.ErrUnexpectedEOF:
		return snippet, nil
	case nil:
	default:
		return snippet, err
	}
	_, err = io.CopyN(io.Discard, body, int64(maxDrain-n))
	if err == io.EOF {
		err = nil
	}
	return snippet, err
}

// statusText describes a status with Go's text for it, not the
// subscriber's.
func statusText(code int) string {
	if text := http.StatusText(code); text != "" {
		return "status " + strconv.Itoa(code) + " " + text
	}
	return "status " + strconv.Itoa(code)
}

// redactURL returns u without user information, query or fragment,
// which may hold secrets, for errors and logs.
func redactURL(u *url.URL) string {
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	s := r.String()
	if u.RawQuery != "" || u.ForceQuery {
		s += "?…"
	}
	return s
}

// parseRetryAfter returns the delay of a Retry-After header value, either
// non-negative integer seconds or an HTTP date (relative to now), capped at
// 24h. Anything else, and a date in the past, gives 0.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if strings.Trim(v, "0123456789") == "" {
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil || secs > uint64(maxRetryAfter/time.Second) { // only ErrRange: a huge number
			return maxRetryAfter
		}
		return time.Duration(secs) * time.Second
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	return min(max(t.Sub(now), 0), maxRetryAfter)
}

// guardDial is the net.Dialer Control of the SSRF guard: it refuses
// to connect to an address that classifyAddr does not call public.
func guardDial(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil { // the dialer passes a numeric address; refuse anything else
		return fmt.Errorf("%w %q: not an IP address", ErrForbiddenAddress, address)
	}
	if class := classifyAddr(ap.Addr()); class != "" {
		return fmt.Errorf("%w %s: %s", ErrForbiddenAddress, ap.Addr(), class)
	}
	return nil
}

// classifyAddr returns why ip must not be delivered to — "loopback",
// "private", "link-local" (which holds cloud metadata endpoints),
// "unspecified", "multicast", "shared (CGNAT)", "reserved" — or "" when it is
// a public address. IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) and NAT64
// addresses (64:ff9b::a.b.c.d) are judged by the IPv4 address they carry.
func classifyAddr(ip netip.Addr) string {
	ip = ip.Unmap().WithZone("")
	if ip.Is6() && nat64.Contains(ip) {
		b := ip.As16()
		ip = netip.AddrFrom4([4]byte(b[12:]))
	}
	switch {
	case !ip.IsValid():
		return "invalid"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsPrivate():
		return "private"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsMulticast():
		return "multicast"
	}
	for _, r := range refusedPrefixes {
		if r.prefix.Contains(ip) {
			return r.class
		}
	}
	return ""
}

// nat64 is the well-known NAT64 prefix (RFC 6052), whose addresses
// reach the IPv4 address in their last four bytes.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// refusedPrefixes are the ranges beyond the netip predicates that are
// not publicly routable.
var refusedPrefixes = []struct {
	prefix netip.Prefix
	class  string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"}, // "this network"; 0.0.0.0 reaches the local host
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (CGNAT)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved"},  // IETF protocol assignments
	{netip.MustParsePrefix("198.18.0.0/15"), "reserved"}, // benchmarking
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},   // and broadcast
	{netip.MustParsePrefix("::/96"), "reserved"},         // IPv4-compatible (deprecated)
	{netip.MustParsePrefix("64:ff9b:1::/48"), "private"}, // local-use NAT64
	{netip.MustParsePrefix("fec0::/10"), "link-local"},   // site-local (deprecated)
	{netip.MustParsePrefix("100::/64"), "reserved"},      // discard-only
}
