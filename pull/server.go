package pull

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/tracing"
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
