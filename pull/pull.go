// Package pull serves pull subscriptions: GET /subscriptions/{id}/events
// on the ingest listener, where a consumer that cannot receive webhooks
// reads what its subscription matches with its pull token. The cursor a
// consumer presents is its acknowledgment: it is committed as the
// subscription's cursor (the offsets of group <prefix>-sub-<id>, which
// lag and replay read) before the events after it are read, so repeating
// a request returns the same events and a lost answer loses nothing.
//
// It owns the cursor's format and authentication, reading the events
// topic at a cursor (read_committed, with Fetch requests of its own), the
// long-poll, the bounds on requests and answers, and the pull
// acknowledgments written to the attempts topic for the ledger. Which
// events a subscription receives and what it receives of them is
// subscriptions' (Compiled.Match and Render); the listener, its
// connections and timeouts are ingest's; dispatchers leave pull
// subscriptions alone.
package pull

import (
	"bytes"
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookstream/hookstream/internal/backoff"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/tracing"
)

// Path is the route of the endpoint, in Echo's syntax.
const Path = "/subscriptions/:id/events"

// Limits of a request.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
	MaxWait      = 30 * time.Second
)

// Defaults of Config.
const (
	// DefaultMaxRequests bounds the pull requests served at once, long
	// polls included.
	DefaultMaxRequests = 512
	// DefaultMaxRequestsPerSubscription bounds them per subscription.
	DefaultMaxRequestsPerSubscription = 8
	// DefaultMaxAnswerBytes bounds an answer's events and their trace
	// contexts, but for its first: one event is always served, however
	// large.
	DefaultMaxAnswerBytes = 4 << 20
	// DefaultMaxScan bounds the records one answer reads: a filter that
	// matches little over a long backlog answers with what it found so
	// far (maybe nothing) and a cursor past what it read.
	DefaultMaxScan = 10_000
	// DefaultBudget bounds the bytes pull requests hold at once: the
	// records read for answers and the answers being written.
	DefaultBudget = 64 << 20
	// DefaultWriteTimeout bounds the writing of an answer.
	DefaultWriteTimeout = 30 * time.Second
)

// endsEvery is how often the last stable offsets are listed while a
// long poll waits: an answer comes this long at most after its event is
// committed.
const endsEvery = 50 * time.Millisecond

// maxRounds bounds the fetches of one answer.
const maxRounds = 64

// maxLookups bounds the registry reads under way for subscriptions the
// watch has not seen (just created, or unknown): each costs Kafka a
// request, and anyone reaching the listener can name any id.
const maxLookups = 8

// Config configures the server.
type Config struct {
	Names topics.Names
	// MaxRequests and MaxRequestsPerSubscription bound the requests
	// served at once; past them a request gets 429. Defaults
	// DefaultMaxRequests and DefaultMaxRequestsPerSubscription.
	MaxRequests, MaxRequestsPerSubscription int
	// MaxAnswerBytes bounds an answer's events but its first. Default
	// DefaultMaxAnswerBytes.
	MaxAnswerBytes int
	// MaxScan bounds the records one answer reads. Default
	// DefaultMaxScan.
	MaxScan int
	// Budget bounds the bytes the server's requests hold at once: the
	// records read for answers (each fetch counted as fetchCost until its
	// records are copied into the answer) and the answers being written
	// (each event until it is written). A request the budget has no room
	// for within budgetWait gets 503. Default DefaultBudget.
	Budget int64
	// MaxRecordBytes is the events topic's record limit
	// (topics.MaxRecordBytes of the body limit): a fetch brings back a
	// batch this large whatever it asked. Default that of a 1 MiB body.
	MaxRecordBytes int64
	// WriteTimeout bounds the writing of an answer: a consumer that reads
	// it slower gives its part of the budget back. Default
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
	// Tracing exports a span per acknowledged event.
	Tracing tracing.Tracing
}

// Server serves pull subscriptions. Run follows the subscriptions and
// lists the events topic's ends for waiting requests; Events answers.
type Server struct {
	cfg      Config
	cl       *kgo.Client
	registry *subscriptions.Registry
	log      *slog.Logger
	tracer   trace.Tracer
	fetch    *fetcher
	budget   *budget
	metrics  *metrics
	now      func() time.Time

	mu    sync.Mutex
	subs  map[string]*compiled // from Run's watch; nil before it loaded
	busy  map[string]int       // requests in progress per subscription
	total int

	lookups chan struct{} // a place per registry read under way

	ends *ends
}

// compiled is a subscription as the server uses it.
type compiled struct {
	sub    subscriptions.Subscription
	render *subscriptions.Compiled // nil but for a pull subscription
}

// New builds the server. cl reads and writes Kafka (the events topic, the
// subscriptions' cursors, the attempts topic); registry is the
// subscriptions'. It does no I/O.
func New(cfg Config, cl *kgo.Client, registry *subscriptions.Registry, log *slog.Logger, reg prometheus.Registerer) *Server {
	cfg.MaxRequests = cmp.Or(cfg.MaxRequests, DefaultMaxRequests)
	cfg.MaxRequestsPerSubscription = cmp.Or(cfg.MaxRequestsPerSubscription, DefaultMaxRequestsPerSubscription)
	cfg.MaxAnswerBytes = cmp.Or(cfg.MaxAnswerBytes, DefaultMaxAnswerBytes)
	cfg.MaxScan = cmp.Or(cfg.MaxScan, DefaultMaxScan)
	cfg.Budget = cmp.Or(cfg.Budget, DefaultBudget)
	cfg.MaxRecordBytes = cmp.Or(cfg.MaxRecordBytes, topics.MaxRecordBytes(1<<20))
	cfg.WriteTimeout = cmp.Or(cfg.WriteTimeout, DefaultWriteTimeout)
	s := &Server{
		cfg:      cfg,
		cl:       cl,
		registry: registry,
		log:      log.With("component", "pull"),
		tracer:   cfg.Tracing.Tracer(),
		fetch:    newFetcher(cl, string(cfg.Names.Events), time.Now),
		budget:   newBudget(cfg.Budget),
		now:      time.Now,
		busy:     make(map[string]int),
		lookups:  make(chan struct{}, maxLookups),
		ends:     newEnds(),
	}
	s.metrics = newMetrics(reg, s)
	return s
}

// Run follows the subscriptions, and lists the events topic's ends while
// requests wait, until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { s.ends.run(ctx, s.cl, s.cfg.Names.Events, s.log) })
	defer s.flush()
	return s.registry.Watch(ctx, s.reconcile)
}

// flush waits, a bounded time, for the acknowledgments noted so far.
func (s *Server) flush() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.cl.Flush(ctx); err != nil {
		s.log.Warn("pull acknowledgments not all recorded at shutdown", "err", err)
	}
}

func (s *Server) reconcile(subs map[string]subscriptions.Subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.subs
	s.subs = make(map[string]*compiled, len(subs))
	for id, sub := range subs {
		c := old[id]
		if c == nil || !c.sub.UpdatedAt.Equal(sub.UpdatedAt) {
			c = compile(sub)
		}
		s.subs[id] = c
	}
	for id := range old {
		if _, ok := s.subs[id]; !ok {
			s.metrics.forget(id)
		}
	}
}

// subscription returns subscription id as last watched, or as the
// registry has it when the watch has not seen it yet (just created): at
// most maxLookups such reads at once, 429 past them.
func (s *Server) subscription(ctx context.Context, id string) (*compiled, error) {
	s.mu.Lock()
	c, ok := s.subs[id]
	s.mu.Unlock()
	if ok {
		return c, nil
	}
	select {
	case s.lookups <- struct{}{}:
		defer func() { <-s.lookups }()
	default:
		return nil, refuse(http.StatusTooManyRequests, "too many requests for subscriptions not known here yet: try again")
	}
	sub, err := s.registry.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return compile(sub), nil
}

// compile is sub as the server keeps it: other kinds than pull are kept
// to be refused, their expressions left alone.
func compile(sub subscriptions.Subscription) *compiled {
	c := &compiled{sub: sub}
	if sub.Kind() == subscriptions.KindPull {
		c.render = subscriptions.Compile(sub)
	}
	return c
}

// problem is a refused request: its status and message.
type problem struct {
	status int
	msg    string
}

func (p *problem) Error() string { return p.msg }

func refuse(status int, format string, args ...any) *problem {
	return &problem{status: status, msg: fmt.Sprintf(format, args...)}
}

// Events answers GET /subscriptions/{id}/events.
func (s *Server) Events(c *echo.Context) error {
	code, err := s.events(c)
	s.metrics.requests.WithLabelValues(strconv.Itoa(code)).Inc()
	return err
}

func (s *Server) events(c *echo.Context) (int, error) {
	var p *problem
	code, err := s.serve(c)
	switch {
	case err == nil:
		return code, nil
	case errors.As(err, &p):
	case errors.Is(err, context.Canceled) && c.Request().Context().Err() != nil:
		return 499, nil // the consumer left
	case errors.Is(err, errBudget):
		s.metrics.refused.Inc()
		p = &problem{status: http.StatusServiceUnavailable, msg: "too many pull answers being read or written: try again"}
		c.Response().Header().Set("Retry-After", "1")
	default:
		s.log.Error("pull request failed", "subscription", c.Param("id"), "err", err)
		p = &problem{status: http.StatusServiceUnavailable, msg: "temporarily unavailable"}
		c.Response().Header().Set("Retry-After", "1")
	}
	if p.status == http.StatusUnauthorized {
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="hookstream pull"`)
	}
	if p.status == http.StatusTooManyRequests {
		c.Response().Header().Set("Retry-After", "1")
	}
	return p.status, c.JSON(p.status, map[string]string{"error": p.msg})
}

// request is a pull request's parameters.
type request struct {
	limit  int
	wait   time.Duration
	cursor string
	given  bool // a cursor was given
}

func parseRequest(c *echo.Context) (request, error) {
	q := c.Request().URL.Query()
	r := request{limit: DefaultLimit}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return r, refuse(http.StatusBadRequest, "limit: %.32q is not a number from 1 to %d", v, MaxLimit)
		}
		r.limit = min(n, MaxLimit)
	}
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			secs, serr := strconv.Atoi(v)
			d, err = time.Duration(secs)*time.Second, serr
		}
		if err != nil || d < 0 {
			return r, refuse(http.StatusBadRequest, "wait: %.32q is not a duration such as 30s (at most %v)", v, MaxWait)
		}
		r.wait = min(d, MaxWait)
	}
	// An empty cursor is none: a consumer's first request, or a loop
	// whose cursor file is still empty.
	r.cursor = q.Get("cursor")
	r.given = r.cursor != ""
	return r, nil
}

// serve answers a request, or returns why not.
func (s *Server) serve(c *echo.Context) (int, error) {
	ctx := c.Request().Context()
	id := c.Param("id")
	sc, err := s.subscription(ctx, id)
	if errors.Is(err, subscriptions.ErrNotFound) {
		return 0, refuse(http.StatusNotFound, "unknown subscription %.100q", id)
	}
	if err != nil {
		return 0, err
	}
	sub := sc.sub
	if kind := sub.Kind(); kind != subscriptions.KindPull {
		return 0, refuse(http.StatusConflict, "subscription %s is a %s subscription: it is delivered, not pulled", id, kind)
	}
	now := s.now()
	if !authorized(c.Request(), sub, now) || len(cursorKeys(sub, now)) == 0 {
		return 0, refuse(http.StatusUnauthorized, "invalid pull token")
	}
	if !sub.Enabled {
		reason := cmp.Or(sub.DisabledReason, "disabled by an operator")
		return 0, refuse(http.StatusForbidden, "subscription %s is disabled (%s): enable it to pull", id, reason)
	}
	req, err := parseRequest(c)
	if err != nil {
		return 0, err
	}
	var cur *cursor
	seen := 0 // partitions the cursor names
	if req.given {
		got, err := decodeCursor(req.cursor, id, cursorKeys(sub, now))
		if err != nil {
			return 0, refuse(http.StatusBadRequest, "%v", err)
		}
		cur, seen = &got, len(got.to)
	}
	n, err := s.fetch.partitions(ctx, seen)
	if err != nil {
		return 0, err
	}
	if seen > n {
		return 0, refuse(http.StatusBadRequest, "%v: %d partitions, the events topic has %d", errMalformed, seen, n)
	}
	release, ok := s.admit(id)
	if !ok {
		return 0, refuse(http.StatusTooManyRequests, "too many pull requests at once (%d per subscription, %d in all): try again", s.cfg.MaxRequestsPerSubscription, s.cfg.MaxRequests)
	}
	defer release()
	sh := &share{b: s.budget}
	defer sh.release()

	committed, err := s.committed(ctx, sub, n)
	if err != nil {
		return 0, err
	}
	pos, replayed := committed, false
	if cur != nil {
		// Minted before partitions were added to the events topic: the
		// others are where the subscription stands.
		cur.widen(committed)
		rewind := ""
		if sub.Rewind != nil {
			rewind = sub.Rewind.ID
		}
		if cur.rewind == rewind {
			pos = cur.to
			if err := s.acknowledge(ctx, sc, sh, committed, *cur); err != nil {
				return 0, err
			}
		} else {
			// Minted before the subscription's last replay: committing
			// it would undo the replay. It acknowledges nothing; the
			// answer starts where the replay put the subscription.
			replayed = true
		}
	}
	a, err := s.read(ctx, sc, sh, pos, req)
	if err != nil {
		return 0, err
	}
	a.replayed = replayed
	s.metrics.events(id).Add(float64(len(a.bodies)))
	return s.reply(c, a, sh, sub, now), nil
}

// reply writes answer a, its cursor signed with sub's current token,
// within WriteTimeout: each event's bytes go back to sh once written, so
// a consumer that reads slowly holds what it has not read yet. It
// returns the status the request is counted with: 499 when the consumer
// did not take the whole answer.
func (s *Server) reply(c *echo.Context, a *answer, sh *share, sub subscriptions.Subscription, now time.Time) int {
	head, tail := []byte(`{"events":[`), a.tail(sub, now)
	size := len(head) + len(tail)
	for i, body := range a.bodies {
		size += len(body) + min(i, 1)
	}
	w := c.Response()
	w.Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	w.Header().Set(echo.HeaderContentLength, strconv.Itoa(size))
	rc := http.NewResponseController(w)
	if err := rc.SetWriteDeadline(s.now().Add(s.cfg.WriteTimeout)); err == nil {
		// Lifted once the answer is written, for the connection's next
		// request.
		defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	}
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(head); err != nil {
		return 499
	}
	left := a.bytes
	for i, body := range a.bodies {
		if i > 0 {
			if _, err := io.WriteString(w, ","); err != nil {
				return 499
			}
		}
		if _, err := w.Write(body); err != nil {
			return 499
		}
		a.bodies[i] = nil
		left -= int64(len(body))
		sh.keep(left)
	}
	if _, err := w.Write(tail); err != nil {
		return 499
	}
	return http.StatusOK
}

// authorized reports whether the request carries a pull token of sub in
// force at now (the token, or the previous one during its overlap),
// compared in constant time.
func authorized(r *http.Request, sub subscriptions.Subscription, now time.Time) bool {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return false
	}
	good := 0
	good |= subtle.ConstantTimeCompare([]byte(token), []byte(sub.Secret))
	if sub.PreviousSecret != "" && now.Before(sub.PreviousSecretUntil) {
		good |= subtle.ConstantTimeCompare([]byte(token), []byte(sub.PreviousSecret))
	}
	return good == 1 && sub.Secret != ""
}

// cursorKeys are the keys of sub's cursors in force at now: the current
// token's first, which signs new cursors.
func cursorKeys(sub subscriptions.Subscription, now time.Time) [][]byte {
	var keys [][]byte
	for _, k := range sub.Keys(now) {
		keys = append(keys, cursorKey(k))
	}
	return keys
}

// admit takes a place for a request of subscription id, false past the
// bounds; release gives it back.
func (s *Server) admit(id string) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.total >= s.cfg.MaxRequests || s.busy[id] >= s.cfg.MaxRequestsPerSubscription {
		return nil, false
	}
	s.total++
	s.busy[id]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.total--
		if s.busy[id]--; s.busy[id] == 0 {
			delete(s.busy, id)
		}
	}, true
}

// committed reads sub's committed cursor on each of the n partitions,
// with its last replay applied where the commit does not carry the
// replay's tag yet. A partition without a commit is at its start: every
// partition has one from the subscription's creation on (its start,
// committed), so one without is a partition added to the events topic
// since, or one whose commit Kafka expired (offsets.retention.minutes):
// from its start, none of its events is skipped.
func (s *Server) committed(ctx context.Context, sub subscriptions.Subscription, n int) ([]int64, error) {
	adm := kadm.NewClient(s.cl)
	topic := string(s.cfg.Names.Events)
	fetched, err := adm.FetchOffsets(ctx, string(s.cfg.Names.SubscriptionGroup(sub.ID)))
	if err == nil {
		err = fetched.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("pull: cursor of %s: %w", sub.ID, err)
	}
	pos := make([]int64, n)
	var missing bool
	for p := range pos {
		pos[p] = -1
		if o, ok := fetched.Lookup(topic, int32(p)); ok && o.At >= 0 {
			pos[p] = o.At
			if rw := sub.Rewind; rw != nil && o.Metadata != rw.Tag() {
				if at, ok := rw.Offsets[int32(p)]; ok {
					pos[p] = at
				}
			}
		}
		missing = missing || pos[p] < 0
	}
	if missing {
		starts, err := adm.ListStartOffsets(ctx, topic)
		if err == nil {
			err = starts.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("pull: start offsets: %w", err)
		}
		for p := range pos {
			if o, ok := starts.Lookup(topic, int32(p)); ok && pos[p] < 0 {
				pos[p] = o.Offset
			}
		}
	}
	return pos, nil
}

// commit commits pos as sub's cursor, tagged with its last replay.
func (s *Server) commit(ctx context.Context, sub subscriptions.Subscription, pos []int64) error {
	var offs kadm.Offsets
	for p, at := range pos {
		offs.Add(kadm.Offset{Topic: string(s.cfg.Names.Events), Partition: int32(p), At: at, LeaderEpoch: -1, Metadata: sub.Rewind.Tag()})
	}
	resp, err := kadm.NewClient(s.cl).CommitOffsets(ctx, string(s.cfg.Names.SubscriptionGroup(sub.ID)), offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("pull: commit the cursor of %s: %w", sub.ID, err)
	}
	return nil
}

// answer is what a request gets.
type answer struct {
	bodies   [][]byte // each event, copied out of the fetch that read it
	traces   [][]byte // each body's trace context, as JSON
	errs     []entryError
	to       []int64 // where the next answer begins
	from     []int64
	replayed bool
	bytes    int64 // of bodies, traces and errs: what it holds of the budget
}

// entryError is an event whose transform failed: served as an error, its
// body never.
type entryError struct {
	id        string
	partition int32
	offset    int64
	err       string
	trace     []byte // its trace context, as JSON
}

// tail is the answer's JSON after its events, its cursor signed with
// sub's current token.
func (a *answer) tail(sub subscriptions.Subscription, now time.Time) []byte {
	size := 256
	for _, tc := range a.traces {
		size += len(tc) + 1
	}
	b := bytes.NewBuffer(make([]byte, 0, size))
	b.WriteString(`],"trace_contexts":[`)
	for i, tc := range a.traces {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(tc)
	}
	rewind := ""
	if sub.Rewind != nil {
		rewind = sub.Rewind.ID
	}
	keys := cursorKeys(sub, now)
	b.WriteString(`],"cursor":`)
	b.Write(topics.AppendJSONString(nil, cursor{rewind: rewind, from: a.from, to: a.to}.encode(sub.ID, keys[0])))
	if len(a.errs) > 0 {
		b.WriteString(`,"errors":[`)
		for i, e := range a.errs {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(b, `{"id":%s,"partition":%d,"offset":%d,"error":%s,"trace_context":%s}`,
				topics.AppendJSONString(nil, e.id), e.partition, e.offset, topics.AppendJSONString(nil, e.err), e.trace)
		}
		b.WriteByte(']')
	}
	if a.replayed {
		b.WriteString(`,"replayed":true`)
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// appendObject appends m as a JSON object of strings, its keys in order.
func appendObject(b []byte, m map[string]string) []byte {
	b = append(b, '{')
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = topics.AppendJSONString(b, k)
		b = append(b, ':')
		b = topics.AppendJSONString(b, m[k])
	}
	return append(b, '}')
}

// read reads the events after pos for sub: at most req.limit, about
// MaxAnswerBytes (at least one event), MaxScan records; with none yet
// and req.wait, it waits for more until the wait ends. What it reads is
// held in sh.
func (s *Server) read(ctx context.Context, sc *compiled, sh *share, pos []int64, req request) (*answer, error) {
	deadline := s.now().Add(req.wait)
	for {
		a, more, err := s.scan(ctx, sc, sh, pos, req.limit)
		if err != nil {
			return nil, err
		}
		if len(a.bodies) > 0 || len(a.errs) > 0 || more || !s.now().Before(deadline) {
			return a, nil
		}
		pos = a.to
		if !s.ends.wait(ctx, pos, deadline, s.metrics.waiting) {
			return a, nil
		}
	}
}

// scan reads from pos once, one leader's partitions a fetch, each fetch
// held in sh until its records are taken, the answer's events after: it
// returns the answer, and whether records remained to be read when it
// stopped (limit, size, MaxScan, or no room in the budget for another
// fetch). With no room for its first fetch it fails with errBudget.
func (s *Server) scan(ctx context.Context, sc *compiled, sh *share, from []int64, limit int) (*answer, bool, error) {
	n := len(from)
	pos := slices.Clone(from)
	a := &answer{from: slices.Clone(from)}
	lso := make([]int64, n)
	for p := range lso {
		lso[p] = -1 // unknown: read
	}
	// The partitions in an order that depends only on the cursor, so
	// that a repeated request reads the same, and no partition waits for
	// the others' backlog at every request; a partition that got nothing
	// while it had records (a response full before it) goes first next,
	// and the partitions of a leader just read go last.
	order := rotation(from)
	var starved []int32
	size, scanned := 0, 0
	full, spent := false, false
	for rounds := 0; rounds < maxRounds; rounds++ {
		var round []int32
		round = append(round, starved...)
		for _, p := range order {
			if (lso[p] < 0 || pos[p] < lso[p]) && !slices.Contains(starved, p) {
				round = append(round, p)
			}
		}
		starved = starved[:0]
		if len(round) == 0 || full || scanned >= s.cfg.MaxScan {
			break
		}
		ask := max(s.cfg.MaxAnswerBytes-size, 1)
		if !sh.hold(ctx, a.bytes+fetchCost(ask, int(s.cfg.MaxRecordBytes))) {
			if err := ctx.Err(); err != nil {
				return nil, false, err
			}
			if rounds == 0 {
				return nil, false, errBudget
			}
			spent = true
			break
		}
		got, err := s.fetchRound(ctx, round, pos, ask)
		if err != nil {
			return nil, false, err
		}
		for _, f := range got {
			p := f.partition
			lso[p] = f.lso
			if full || scanned >= s.cfg.MaxScan {
				continue
			}
			if len(f.recs) == 0 && f.next == pos[p] && (f.lso < 0 || pos[p] < f.lso) {
				starved = append(starved, p)
			}
			taken := 0
			for _, r := range f.recs {
				if len(a.bodies)+len(a.errs) >= limit || scanned >= s.cfg.MaxScan {
					full = len(a.bodies)+len(a.errs) >= limit
					break
				}
				e := subscriptions.NewEvent(r)
				match, body, terr := judge(sc.render, e, s.cfg.MaxAnswerBytes)
				var tc []byte
				if match {
					tc = appendObject(nil, e.TraceContext())
				}
				if match && terr == nil && len(a.bodies) > 0 && size+len(body)+len(tc) > s.cfg.MaxAnswerBytes {
					full = true
					break
				}
				scanned++
				taken++
				pos[p] = r.Offset + 1
				switch {
				case !match:
				case terr != nil:
					ee := entryError{id: string(r.Key), partition: p, offset: r.Offset, err: terr.Error(), trace: tc}
					a.errs = append(a.errs, ee)
					a.bytes += int64(len(ee.id) + len(ee.err) + len(tc) + 64)
				default:
					a.bodies = append(a.bodies, detach(body, r.Value))
					a.traces = append(a.traces, tc)
					size += len(body) + len(tc)
					a.bytes += int64(len(body) + len(tc))
				}
			}
			if taken == len(f.recs) {
				pos[p] = f.next
			}
		}
		sh.keep(a.bytes) // the fetch's records are the answer's now, or gone
		order = readLast(order, got)
	}
	a.to = pos
	more := spent
	for p := range pos {
		more = more || lso[p] >= 0 && pos[p] < lso[p]
	}
	return a, more, nil
}

// detach returns body out of the fetch's buffers when it is the record's
// value itself (an event served as is), so that the buffers go once the
// fetch's records are taken; a transform's result is its own already.
func detach(body, value []byte) []byte {
	if len(body) > 0 && len(body) == len(value) && &body[0] == &value[0] {
		return bytes.Clone(body)
	}
	return body
}

// readLast returns order with the partitions of got at its end: the
// next fetch goes to another leader, when one has partitions to read.
func readLast(order []int32, got []fetched) []int32 {
	read := make([]int32, 0, len(got))
	for _, f := range got {
		read = append(read, f.partition)
	}
	return append(slices.DeleteFunc(order, func(p int32) bool { return slices.Contains(read, p) }), read...)
}

// fetchRound fetches the round's partitions led by the leader of its
// first from pos, asking for ask bytes, moving a position out of the log
// (gone with retention, or past the end) to its start or end first.
func (s *Server) fetchRound(ctx context.Context, round []int32, pos []int64, ask int) ([]fetched, error) {
	got, err := s.fetch.fetch(ctx, round, pos, int32(ask))
	if !errors.Is(err, errOutOfRange) {
		return got, err
	}
	if err := s.clamp(ctx, pos); err != nil {
		return nil, err
	}
	return s.fetch.fetch(ctx, round, pos, int32(ask))
}

// clamp moves each position into its partition's log.
func (s *Server) clamp(ctx context.Context, pos []int64) error {
	adm := kadm.NewClient(s.cl)
	topic := string(s.cfg.Names.Events)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("pull: start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("pull: end offsets: %w", err)
	}
	for p := range pos {
		if o, ok := starts.Lookup(topic, int32(p)); ok {
			pos[p] = max(pos[p], o.Offset)
		}
		if o, ok := ends.Lookup(topic, int32(p)); ok {
			pos[p] = min(pos[p], o.Offset)
		}
	}
	return nil
}

// judge is what sub's consumer receives of e: whether it matches, and its
// body or the transform's failure.
func judge(c *subscriptions.Compiled, e *subscriptions.Event, limit int) (bool, []byte, error) {
	if !c.Match(e).Match {
		return false, nil, nil
	}
	body, err := c.Render(e, limit)
	return true, body, err
}

// rotation is the partitions from one that depends on pos alone.
func rotation(pos []int64) []int32 {
	h := fnv.New32a()
	for _, o := range pos {
		h.Write(strconv.AppendInt(nil, o, 10))
	}
	n := len(pos)
	start := int(h.Sum32() % uint32(max(n, 1)))
	order := make([]int32, 0, n)
	for i := range n {
		order = append(order, int32((start+i)%n))
	}
	return order
}

// acknowledge commits the cursor cur presents, when it moves the
// committed one, and records the events of the answer it came with that
// it acknowledges for the first time (those after the committed cursor)
// in the attempts topic: the ledger shows them delivered, or failed with
// their transform's error.
func (s *Server) acknowledge(ctx context.Context, sc *compiled, sh *share, committed []int64, cur cursor) error {
	moved := false
	for p := range committed {
		moved = moved || cur.to[p] != committed[p]
	}
	if !moved {
		return nil
	}
	start := s.now()
	if err := s.commit(ctx, sc.sub, cur.to); err != nil {
		return err
	}
	end := s.now()
	from := make([]int64, len(committed))
	var span int64
	for p := range from {
		from[p] = max(committed[p], cur.from[p])
		span += max(cur.to[p]-from[p], 0)
	}
	if span == 0 || span > int64(s.cfg.MaxScan)*2 {
		return nil // nothing newly acknowledged, or not one answer's
	}
	s.noteAcks(ctx, sc, sh, from, cur.to, start, end)
	return nil
}

// noteAcks writes an attempt for each event sc's consumer received in
// [from, to), read again (one answer's records at most, each fetch held
// in sh while its records are read), and exports its acknowledgment
// span: the commit, from start to end. A failure is logged: the cursor
// is committed, and the ledger is a record, not a guarantee.
func (s *Server) noteAcks(ctx context.Context, sc *compiled, sh *share, from, to []int64, start, end time.Time) {
	now := end.UTC()
	pos := slices.Clone(from)
	order := rotation(from)
	wait := backoff.New(10*time.Millisecond, 100*time.Millisecond)
	for rounds := 0; rounds < 100; rounds++ {
		var round []int32
		for _, p := range order {
			if pos[p] < to[p] {
				round = append(round, p)
			}
		}
		if len(round) == 0 {
			return
		}
		var got []fetched
		err := errBudget
		if sh.hold(ctx, fetchCost(s.cfg.MaxAnswerBytes, int(s.cfg.MaxRecordBytes))) {
			got, err = s.fetch.fetch(ctx, round, pos, int32(s.cfg.MaxAnswerBytes))
		}
		if err != nil {
			sh.release()
			s.log.Warn("pull acknowledgments not recorded", "subscription", sc.sub.ID, "err", err)
			return
		}
		progressed := false
		for _, f := range got {
			p := f.partition
			for _, r := range f.recs {
				if r.Offset >= to[p] {
					break
				}
				match, _, terr := judge(sc.render, subscriptions.NewEvent(r), s.cfg.MaxAnswerBytes)
				if match {
					a := topics.Attempt{Subscription: sc.sub.ID, EventID: string(r.Key), N: 1, Outcome: topics.OutcomeDelivered, At: now}
					if terr != nil {
						a.Outcome, a.Error = topics.OutcomeFailed, terr.Error()
					}
					s.note(a)
					s.ackSpan(ctx, r, a, start, end)
				}
			}
			next := min(f.next, to[p])
			progressed = progressed || next > pos[p]
			pos[p] = next
		}
		sh.release()
		order = readLast(order, got)
		if !progressed && !wait.Wait(ctx) {
			return
		}
	}
}

// ackSpan exports the span of the acknowledgment a of events record r,
// from start to end: a child of the context r carries, as a webhook
// attempt's span is, following the messaging conventions for settling a
// message.
func (s *Server) ackSpan(ctx context.Context, r *kgo.Record, a topics.Attempt, start, end time.Time) {
	_, span := s.tracer.Start(s.cfg.Tracing.Extract(ctx, r.Headers), "ack "+r.Topic,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start))
	if span.IsRecording() {
		span.SetAttributes(semconv.MessagingSystemKafka, semconv.MessagingOperationTypeSettle, semconv.MessagingOperationName("ack"),
			semconv.MessagingDestinationName(r.Topic), semconv.MessagingDestinationPartitionID(strconv.Itoa(int(r.Partition))),
			semconv.MessagingKafkaOffset(int(r.Offset)), semconv.MessagingConsumerGroupName(string(s.cfg.Names.SubscriptionGroup(a.Subscription))),
			tracing.Subscription.String(a.Subscription), tracing.EventID.String(a.EventID), tracing.Outcome.String(a.Outcome))
		if a.Error != "" {
			span.SetStatus(codes.Error, a.Error)
		}
	}
	span.End(trace.WithTimestamp(end))
}

// note writes a to the attempts topic without waiting for it.
func (s *Server) note(a topics.Attempt) {
	s.cl.Produce(context.Background(), a.Record(s.cfg.Names.DeliveryAttempts), func(_ *kgo.Record, err error) {
		if err != nil {
			s.log.Warn("pull acknowledgment not recorded", "subscription", a.Subscription, "event_id", a.EventID, "err", err)
		}
	})
}

// metrics are the server's collectors.
type metrics struct {
	requests *prometheus.CounterVec
	served   *prometheus.CounterVec
	waiting  prometheus.Gauge
	refused  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, s *Server) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookstream_pull_requests_total",
			Help: "Pull requests answered, by status code (499: the consumer left first).",
		}, []string{"code"}),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookstream_pull_events_total",
			Help: "Events served to pull consumers, by subscription (a repeated request serves its events again).",
		}, []string{"subscription"}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hookstream_pull_waiting",
			Help: "Pull requests waiting for events (long polls).",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookstream_pull_budget_refused_total",
			Help: "Pull requests answered 503 because the byte budget had no room for them.",
		}),
	}
	reg.MustRegister(m.requests, m.served, m.waiting, m.refused, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hookstream_pull_requests_in_progress",
		Help: "Pull requests being served, long polls included; past the bound a request gets 429.",
	}, func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return float64(s.total)
	}), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hookstream_pull_budget_bytes_in_use",
		Help: "Bytes pull requests hold of the byte budget: records read for answers and answers being written; past the budget a request gets 503.",
	}, func() float64 { return float64(s.budget.inUse.Load()) }))
	return m
}

func (m *metrics) events(id string) prometheus.Counter { return m.served.WithLabelValues(id) }

func (m *metrics) forget(id string) { m.served.DeleteLabelValues(id) }

// ends lists the last stable offsets of the events topic every endsEvery
// while requests wait for them to move, once for all of them.
type ends struct {
	mu      sync.Mutex
	waiters int
	lso     map[int32]int64
	moved   chan struct{} // closed when lso changes
	wake    chan struct{}
}

func newEnds() *ends {
	return &ends{lso: make(map[int32]int64), moved: make(chan struct{}), wake: make(chan struct{}, 1)}
}

func (e *ends) run(ctx context.Context, cl *kgo.Client, topic topics.Topic, log *slog.Logger) {
	adm := kadm.NewClient(cl)
	t := time.NewTicker(endsEvery)
	defer t.Stop()
	for {
		e.mu.Lock()
		waiters := e.waiters
		e.mu.Unlock()
		if waiters == 0 {
			select {
			case <-ctx.Done():
				return
			case <-e.wake:
			}
		}
		listed, err := adm.ListCommittedOffsets(ctx, string(topic))
		if err == nil {
			err = listed.Error()
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("pull: cannot list the events topic's ends", "err", err)
		}
		if err == nil {
			lso := make(map[int32]int64)
			listed.Each(func(o kadm.ListedOffset) { lso[o.Partition] = o.Offset })
			e.mu.Lock()
			if !maps.Equal(lso, e.lso) {
				e.lso = lso
				close(e.moved)
				e.moved = make(chan struct{})
			}
			e.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// wait returns true once some partition's last stable offset is past
// pos, false when deadline or ctx came first.
func (e *ends) wait(ctx context.Context, pos []int64, deadline time.Time, gauge prometheus.Gauge) bool {
	gauge.Inc()
	defer gauge.Dec()
	e.mu.Lock()
	e.waiters++
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.waiters--
		e.mu.Unlock()
	}()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		e.mu.Lock()
		lso, moved := e.lso, e.moved
		e.mu.Unlock()
		for p, o := range pos {
			if lso[int32(p)] > o {
				return true
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return false
		case <-moved:
		}
	}
}
