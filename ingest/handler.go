// Package ingest is the webhook receiver: it authenticates a provider's
// POST, derives the event id and type, and answers 2xx only once Kafka has
// the record durably (acks=all). It owns the sources model of
// HOOKSTREAM_CONFIG and its validation, HTTP limits, signature schemes and
// event ids; the record format of the ingest topic is topics.IngestRecord.
// It never decides whether an event is a duplicate for good (the processor
// does) and never holds an event it has not handed to Kafka.
package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/net/netutil"

	"github.com/hookstream/hookstream/internal/httpserver"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/tracing"
)

// Config configures the receiver.
type Config struct {
	// Addr is the listener of Run. Default :8080 (HOOKSTREAM_HTTP_ADDR).
	Addr string
	// Sources are the configured providers.
	Sources Sources
	// AcceptAll accepts every source unverified: no sources file was given.
	AcceptAll bool
	// MaxBody is the largest accepted body. Default 1MiB.
	MaxBody int64
	// AckTimeout bounds the wait for Kafka before a 503. Default 5s.
	AckTimeout time.Duration
	// BodyTimeout bounds the time a request's body may take to arrive; a
	// slower sender is cut off with 408. Default DefaultBodyTimeout.
	BodyTimeout time.Duration
	// Topic is the ingest topic.
	Topic topics.Topic
	// MaxInFlight bounds requests handled at once. Default DefaultMaxInFlight.
	MaxInFlight int
	// MaxConns bounds the connections Run serves at once; one more waits
	// in the listen backlog until one closes. Default DefaultMaxConns.
	MaxConns int
	// BodyBudget bounds the bytes of body buffers held at once, across all
	// requests being read or handled; past it a request gets 503. Default
	// max(DefaultBodyBudget, 2×MaxBody).
	BodyBudget int64
	// TrustedProxies are the networks whose X-Forwarded-For is believed:
	// behind them, a client is the nearest address of that header outside
	// them (the failed-verification limit counts per client). Default none:
	// the connection's address is the client
	// (HOOKSTREAM_TRUSTED_PROXIES).
	TrustedProxies []netip.Prefix
	// Tracing traces each request, continuing the provider's traceparent
	// (its trace and parent, never its sampling decision or tracestate:
	// see tracing.Tracing.ExtractProvider), and carries the context in its
	// ingest record. Zero: no spans, the provider's traceparent carried on.
	Tracing tracing.Tracing
}

// DefaultBodyTimeout bounds the arrival of a request's body: a provider
// sends a webhook at once, a slow-loris sender is cut off.
const DefaultBodyTimeout = 30 * time.Second

// DuplicateWindow is how long the receiver itself remembers accepted ids to
// answer provider retries with 200 without writing them again.
const DuplicateWindow = 10 * time.Minute

// DefaultMaxInFlight bounds requests being handled at once; past it the
// receiver answers 503 at once: under CPU saturation, queueing would only
// grow every provider's latency.
const DefaultMaxInFlight = 1024

// DefaultMaxConns bounds the connections served at once: each costs a
// goroutine, net/http's buffers and up to maxHeaderBytes of headers, its
// body being within the body budget.
const DefaultMaxConns = 16384

// DefaultBodyBudget is the least body budget (Config.BodyBudget): bodies
// are read before a slot is taken, so without a budget every connection
// could hold a buffer of up to MaxBody for BodyTimeout.
const DefaultBodyBudget = 64 << 20

// maxHeaderBytes bounds a request's headers, net/http's default being 1 MiB:
// providers send a few KB (GitHub and Stripe about 2 KB).
const maxHeaderBytes = 64 << 10

// The producer buffer bounds: beyond them the receiver sheds load.
const (
	maxBufferedRecords = 20_000
	maxBufferedBytes   = 64 << 20
)

// duplicateCapacity bounds the memory of the duplicate fast path.
const duplicateCapacity = 100_000

// Retry-After of a 503: Kafka did not take the event in time, or the
// receiver is over capacity.
const (
	retryAfterUnavailable = "5"
	retryAfterOverload    = "1"
)

// Handler is the ingest HTTP receiver.
type Handler struct {
	cfg     Config
	client  *kgo.Client
	log     *slog.Logger
	sources map[string]*source
	unknown *source // nil: unknown sources get 404
	recent  *recentIDs
	// failures limits failed verifications per client address.
	failures *failureLimiter
	echo     *echo.Echo
	metrics  *metrics
	now      func() time.Time
	// inFlight holds a slot per request being handled.
	inFlight chan struct{}
	// bodies counts the body buffers of requests being read or handled.
	bodies bodyBudget
	tracer trace.Tracer
}

// New builds the receiver. client must produce with acks=all and
// idempotency (kgo's defaults). It does no I/O.
func New(cfg Config, client *kgo.Client, log *slog.Logger, reg prometheus.Registerer) (*Handler, error) {
	sources, err := compileSources(cfg.Sources)
	if err != nil {
		return nil, err
	}
	failures, err := newFailureLimiter()
	if err != nil {
		return nil, err
	}
	h := &Handler{
		cfg:      cfg,
		client:   client,
		log:      log.With("component", "ingest"),
		sources:  sources,
		recent:   newRecentIDs(duplicateCapacity, DuplicateWindow),
		failures: failures,
		metrics:  newMetrics(reg),
		now:      time.Now,
		inFlight: make(chan struct{}, cmp.Or(cfg.MaxInFlight, DefaultMaxInFlight)),
		tracer:   cfg.Tracing.Tracer(),
	}
	h.bodies.max = cmp.Or(cfg.BodyBudget, max(DefaultBodyBudget, 2*cfg.MaxBody))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hookstream_ingest_body_bytes",
		Help: "Bytes of body buffers held by requests being read or handled; past the body budget a request gets 503.",
	}, func() float64 { return float64(h.bodies.held.Load()) }))
	if cfg.AcceptAll || cfg.Sources.AllowUnknown {
		h.unknown, err = compileSource(Source{})
		if err != nil {
			return nil, err
		}
	}
	h.echo = h.routes()
	return h, nil
}

func (h *Handler) routes() *echo.Echo {
	e := echo.NewWithConfig(echo.Config{Logger: h.log, HTTPErrorHandler: h.renderError, IPExtractor: httpserver.ClientIP(h.cfg.TrustedProxies)})
	e.Use(middleware.Recover())
	e.Use(dropInvalidRequestID)
	e.Use(middleware.RequestID())
	e.POST("/webhooks/:source", h.receive)
	return e
}

// Route serves fn at method and path on the ingest listener besides the
// webhooks (the pull subscriptions' endpoint). Call it before Run.
func (h *Handler) Route(method, path string, fn echo.HandlerFunc) { h.echo.Add(method, path, fn) }

// ServeHTTP serves the ingest API.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.echo.ServeHTTP(w, r) }

// Run serves on cfg.Addr until ctx ends, then stops accepting and waits for
// in-flight requests (their produces are bounded by AckTimeout).
func (h *Handler) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", h.cfg.Addr)
	if err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	sc := echo.StartConfig{
		Listener:        netutil.LimitListener(ln, cmp.Or(h.cfg.MaxConns, DefaultMaxConns)),
		HideBanner:      true,
		HidePort:        true,
		GracefulTimeout: h.cfg.AckTimeout + 5*time.Second,
		BeforeServeFunc: func(s *http.Server) error {
			s.ReadHeaderTimeout = 10 * time.Second
			s.MaxHeaderBytes = maxHeaderBytes
			// The handler bounds the body itself (BodyTimeout); this
			// bounds requests that never reach it.
			s.ReadTimeout = s.ReadHeaderTimeout + cmp.Or(h.cfg.BodyTimeout, DefaultBodyTimeout)
			s.IdleTimeout = 2 * time.Minute
			httpserver.DropUnusedConns(s)
			return nil
		},
		ListenerAddrFunc: func(a net.Addr) { h.log.Info("ingest listening", "addr", a.String()) },
	}
	if err := sc.Start(ctx, h); err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	return nil
}

// apiError is a failed request: a status and a message for the provider.
type apiError struct {
	status     int
	msg        string
	retryAfter string
	violations []topics.Violation // of a 422
	err        error              // logged, never sent
}

func (e *apiError) Error() string { return e.msg }

// StatusCode makes apiError an echo.HTTPStatusCoder.
func (e *apiError) StatusCode() int { return e.status }

var (
	errUnknownSource = &apiError{status: http.StatusNotFound, msg: "unknown source"}
	errTooLarge      = &apiError{status: http.StatusRequestEntityTooLarge, msg: "payload too large"}
	errEmptyBody     = &apiError{status: http.StatusBadRequest, msg: "empty body"}
	errInvalidJSON   = &apiError{status: http.StatusBadRequest, msg: "invalid JSON payload"}
	errDeepJSON      = &apiError{status: http.StatusBadRequest, msg: "invalid JSON payload: " + topics.ErrJSONDepth.Error()}
	errNoEventID     = &apiError{status: http.StatusBadRequest, msg: "no event id in the request"}
	errSignature     = &apiError{status: http.StatusUnauthorized, msg: "invalid signature"}
	errSlowBody      = &apiError{status: http.StatusRequestTimeout, msg: "request body too slow"}
	errOverloaded    = &apiError{status: http.StatusServiceUnavailable, msg: "temporarily unavailable", retryAfter: retryAfterOverload}
)

type errorBody struct {
	Error      string             `json:"error"`
	Violations []topics.Violation `json:"violations,omitempty"`
	RequestID  string             `json:"request_id,omitempty"`
}

// answer writes {"status","id","request_id"}, the answer to a webhook
// accepted or known, encoded by hand: it is on every request's path.
func answer(c *echo.Context, code int, status, id string) error {
	rid := requestID(c)
	b := make([]byte, 0, 48+len(status)+len(id)+len(rid))
	b = append(b, `{"status":`...)
	b = topics.AppendJSONString(b, status)
	b = append(b, `,"id":`...)
	b = topics.AppendJSONString(b, id)
	b = append(b, `,"request_id":`...)
	b = topics.AppendJSONString(b, rid)
	return c.JSONBlob(code, append(b, "}\n"...))
}

func requestID(c *echo.Context) string { return c.Response().Header().Get(echo.HeaderXRequestID) }

// maxRequestID bounds a client's X-Request-ID, which every record, log
// line and answer of its request carries.
const maxRequestID = 128

// dropInvalidRequestID removes a client's X-Request-ID unless it is at
// most maxRequestID characters of [A-Za-z0-9._:-], so that the RequestID
// middleware generates a new one instead.
func dropInvalidRequestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		if h := c.Request().Header; !validRequestID(h.Get(echo.HeaderXRequestID)) {
			h.Del(echo.HeaderXRequestID)
		}
		return next(c)
	}
}

func validRequestID(id string) bool {
	if len(id) > maxRequestID {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// renderError answers every failed request with {"error", "request_id"}.
func (h *Handler) renderError(c *echo.Context, err error) {
	if r, _ := echo.UnwrapResponse(c.Response()); r != nil && r.Committed {
		return
	}
	status, msg := http.StatusInternalServerError, "internal error"
	var violations []topics.Violation
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		status, msg, violations = ae.status, ae.msg, ae.violations
		if ae.retryAfter != "" {
			c.Response().Header().Set("Retry-After", ae.retryAfter)
		}
	case echo.StatusCode(err) != 0:
		status = echo.StatusCode(err)
		msg = http.StatusText(status)
	default:
		h.log.Error("request failed", "request_id", requestID(c), "err", err)
	}
	if err := c.JSON(status, errorBody{Error: msg, Violations: violations, RequestID: requestID(c)}); err != nil {
		h.log.Debug("write error response", "request_id", requestID(c), "err", err)
	}
}

// receiveRoute is the route of receive, the name of its span.
const receiveRoute = "/webhooks/:source"

func (h *Handler) receive(c *echo.Context) error {
	name := c.Param("source")
	req := c.Request()
	ctx := h.cfg.Tracing.ExtractProvider(req.Context(), req.Header)
	ctx, span := h.tracer.Start(ctx, http.MethodPost+" "+receiveRoute, trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	src, err := h.source(name)
	if err == nil {
		err = h.handle(ctx, c, name, src)
	}
	_, status := echo.ResolveResponseStatus(c.Response(), err)
	h.metrics.answered(h.metrics.label(name, src != nil), status)
	if span.IsRecording() {
		span.SetAttributes(semconv.HTTPRequestMethodPost, semconv.HTTPRoute(receiveRoute), semconv.URLPath(req.URL.Path),
			semconv.HTTPResponseStatusCode(status))
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	}
	return err
}

// handle reads the body, then accepts the request in an in-flight slot:
// a slow sender holds its own connection and its part of the body budget,
// never a slot.
func (h *Handler) handle(ctx context.Context, c *echo.Context, name string, src *source) error {
	body, err := h.readBody(c)
	if err != nil {
		return err
	}
	defer h.bodies.release(int64(cap(body)))
	select {
	case h.inFlight <- struct{}{}:
		defer func() { <-h.inFlight }()
		return h.accept(ctx, c, name, src, body)
	default:
		h.metrics.shed.Inc()
		return errOverloaded
	}
}

func (h *Handler) source(name string) (*source, error) {
	if name == topics.OperationalSource {
		return nil, errUnknownSource // only hookstream writes its events
	}
	if s, ok := h.sources[name]; ok {
		return s, nil
	}
	if h.unknown != nil && topics.ValidName(name) {
		return h.unknown, nil
	}
	return nil, errUnknownSource
}

// accept handles a request whose body has arrived: verification first,
// then the source's rate limit, the event id, the duplicate fast path, the
// payload's schema, the size of the event to come, and the durable write,
// the record carrying the trace context of ctx.
func (h *Handler) accept(ctx context.Context, c *echo.Context, name string, src *source, body []byte) error {
	req := c.Request()
	received := h.now()
	if err := src.verifier.Verify(req.Header, body, received); err != nil {
		if limited := h.failures.fail(c.RealIP(), received); limited != nil {
			return limited
		}
		h.log.Info("rejected webhook", "source", name, "request_id", requestID(c), tracing.TraceID(ctx), "err", err)
		return errSignature
	}
	// Only verified requests spend the source's rate limit.
	if src.limiter != nil {
		if err := reserve(src.limiter, received); err != nil {
			return err
		}
	}
	contentType := req.Header.Get(echo.HeaderContentType)
	jsonErr := topics.CheckJSON(body)
	switch {
	case errors.Is(jsonErr, topics.ErrJSONDepth):
		return errDeepJSON
	case jsonErr != nil && isJSON(contentType):
		return errInvalidJSON
	}
	p := &Payload{Header: req.Header, Body: body, JSON: jsonErr == nil}
	eventID, ok := EventID(src.id, p)
	if !ok {
		return errNoEventID
	}
	key := topics.IngestKey(name, eventID)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(tracing.EventID.String(key))
	}
	if h.recent.seen(key, received) {
		h.metrics.fastDuplicates.WithLabelValues(h.metrics.label(name, true)).Inc()
		return answer(c, http.StatusOK, "duplicate", key)
	}
	eventType := EventType(src.typ, p, name)
	violations := src.validate.check(eventType, body, p.JSON)
	if len(violations) > 0 {
		action := src.validate.action()
		h.metrics.invalid.WithLabelValues(h.metrics.label(name, true), action).Inc()
		// Paths only: messages can quote the payload's values.
		h.log.Info("payload does not match the schema", "source", name, "event_id", eventID, "request_id", requestID(c), tracing.TraceID(ctx),
			"on_invalid", action, "violations", len(violations), "first_path", violations[0].Path)
		if action == OnInvalidReject {
			return &apiError{status: http.StatusUnprocessableEntity, msg: "payload does not match the schema", violations: violations}
		}
	}
	ir := &topics.IngestRecord{
		Source:      name,
		EventID:     eventID,
		EventType:   eventType,
		ReceivedAt:  received,
		RequestID:   requestID(c),
		ContentType: contentType,
		Provider:    src.provider(req.Header),
		Body:        body,
		Violations:  violations,
	}
	rec := ir.Record(h.cfg.Topic)
	h.cfg.Tracing.Inject(ctx, rec)
	if err := h.eventFits(rec, p.JSON, received); err != nil {
		return err
	}
	if err := h.produce(req.Context(), rec); err != nil {
		if errors.Is(err, kgo.ErrMaxBuffered) {
			h.metrics.shed.Inc()
			return errOverloaded
		}
		h.log.Warn("kafka did not acknowledge", "source", name, "event_id", eventID, "request_id", requestID(c), tracing.TraceID(ctx), "err", err)
		return &apiError{status: http.StatusServiceUnavailable, msg: "temporarily unavailable", retryAfter: retryAfterUnavailable, err: err}
	}
	h.recent.add(key, received)
	return answer(c, http.StatusAccepted, "accepted", key)
}

// readBody reads the body within MaxBody, BodyTimeout and the body budget,
// which holds cap(body) until the caller releases it. Memory follows the
// bytes that arrived: a Content-Length reserves at most preallocatedBody
// before they come.
func (h *Handler) readBody(c *echo.Context) ([]byte, error) {
	req := c.Request()
	if req.ContentLength > h.cfg.MaxBody {
		return nil, errTooLarge
	}
	rc := http.NewResponseController(c.Response())
	switch err := rc.SetReadDeadline(time.Now().Add(cmp.Or(h.cfg.BodyTimeout, DefaultBodyTimeout))); {
	case err == nil:
		// Lifted once the body is in, so that the connection's background
		// read cannot time out the request while it is handled. It fails
		// only on a connection that is gone, which the answer meets anyway.
		defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	case errors.Is(err, http.ErrNotSupported):
		// Not a net/http connection: the server's own ReadTimeout bounds it.
	default:
		return nil, &apiError{status: http.StatusBadRequest, msg: "could not read body", err: err}
	}
	body, err := h.readAll(http.MaxBytesReader(c.Response(), req.Body, h.cfg.MaxBody), req.ContentLength)
	var tooLarge *http.MaxBytesError
	switch {
	case errors.Is(err, errBodyBudget):
		h.metrics.shed.Inc()
		return nil, errOverloaded
	case errors.As(err, &tooLarge):
		return nil, errTooLarge
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, errSlowBody
	case err != nil:
		return nil, &apiError{status: http.StatusBadRequest, msg: "could not read body", err: err}
	case len(body) == 0:
		h.bodies.release(int64(cap(body))) // a chunked body's first buffer
		return nil, errEmptyBody
	}
	return body, nil
}

// preallocatedBody is the most readAll allocates before bytes arrive:
// typical webhooks fit it, so they are read into one allocation.
const preallocatedBody = 32 << 10

// errBodyBudget: the body budget has no room for a request's buffer.
var errBodyBudget = errors.New("body budget spent")

// readAll reads r to its end, or the announced bytes of a Content-Length
// (-1: none), into a buffer that doubles as bytes arrive instead of
// trusting the announcement with one allocation. Each allocation is first
// reserved in the body budget; on error the buffer is released, on
// success the caller releases cap(body).
func (h *Handler) readAll(r io.Reader, announced int64) ([]byte, error) {
	size := announced
	if size < 0 {
		size = h.cfg.MaxBody + 1 // r, limited to MaxBody, refuses a byte more
	}
	var body []byte
	for announced < 0 || int64(len(body)) < announced {
		if len(body) == cap(body) {
			grow := min(max(int64(len(body)), preallocatedBody), size-int64(len(body)))
			if !h.bodies.reserve(grow) {
				h.bodies.release(int64(cap(body)))
				return nil, errBodyBudget
			}
			body = append(make([]byte, 0, int64(len(body))+grow), body...)
		}
		got, err := r.Read(body[len(body):cap(body)])
		body = body[:len(body)+got]
		switch {
		case err == io.EOF && (announced < 0 || int64(len(body)) == announced):
			return body, nil
		case err == io.EOF:
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			h.bodies.release(int64(cap(body)))
			return nil, err
		}
	}
	return body, nil
}

// bodyBudget counts bytes of body buffers held, up to max.
type bodyBudget struct {
	max  int64
	held atomic.Int64
}

// reserve takes n bytes of the budget, or reports false when fewer are left.
func (b *bodyBudget) reserve(n int64) bool {
	for {
		held := b.held.Load()
		if held+n > b.max {
			return false
		}
		if b.held.CompareAndSwap(held, held+n) {
			return true
		}
	}
}

func (b *bodyBudget) release(n int64) { b.held.Add(-n) }

// produce waits, at most AckTimeout, for Kafka to acknowledge rec. On
// timeout the record may still be in flight: the provider is told to retry
// (503) and the processor drops whichever copy comes second.
func (h *Handler) produce(ctx context.Context, rec *kgo.Record) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.AckTimeout)
	defer cancel()
	start := time.Now()
	acked := make(chan error, 1)
	// TryProduce fails at once when the producer's buffer is full: under
	// overload the receiver sheds load with 503 instead of queueing.
	h.client.TryProduce(ctx, rec, func(_ *kgo.Record, err error) { acked <- err })
	select {
	case err := <-acked:
		if err == nil {
			h.metrics.ackLatency.Observe(time.Since(start).Seconds())
		}
		return err
	case <-ctx.Done():
		return fmt.Errorf("no acknowledgement within %v: %w", h.cfg.AckTimeout, ctx.Err())
	}
}

// ProducerOpts are the producer settings the receiver relies on: acks from
// all in-sync replicas with idempotence (kgo's default); records failed by
// the client once the acknowledgement wait is over, even when a request may
// have carried them, so that an event answered 503 is not written later
// when the broker returns (the rare copy that did reach the broker before
// the answer is a duplicate the processor drops by its key); no linger
// (latency over batching: batches form anyway while requests are in
// flight); batches large enough for the body limit; and a buffer of about
// a second of traffic, past which requests are shed with 503.
func ProducerOpts(cfg Config) []kgo.Opt {
	return []kgo.Opt{
		kgo.MaxBufferedRecords(maxBufferedRecords),
		kgo.MaxBufferedBytes(max(maxBufferedBytes, int(2*topics.MaxRecordBytes(cfg.MaxBody)))),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(cfg.AckTimeout),
		kgo.AllowIdempotentProduceCancellation(),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchMaxBytes(int32(topics.MaxRecordBytes(cfg.MaxBody))),
		// When a partition's leader crashes, records for it wait for a
		// metadata refresh naming the new leader. kgo's default minimum age
		// of 5s would hold that refresh past the ack timeout and answer
		// 503 to every request queued on the partition meanwhile.
		kgo.MetadataMinAge(500 * time.Millisecond),
	}
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || (len(mt) > 5 && mt[len(mt)-5:] == "+json")
}
