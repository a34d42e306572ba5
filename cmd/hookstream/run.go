package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/hookstream/hookstream/access"
	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/attempts"
	"github.com/hookstream/hookstream/audit"
	"github.com/hookstream/hookstream/config"
	"github.com/hookstream/hookstream/console"
	"github.com/hookstream/hookstream/deadletter"
	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/events"
	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/ingest"
	"github.com/hookstream/hookstream/instances"
	"github.com/hookstream/hookstream/processor"
	"github.com/hookstream/hookstream/pull"
	"github.com/hookstream/hookstream/stats"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/tracing"
)

// allRoles are the roles run starts by default.
var allRoles = []string{"ingest", "processor", "dispatcher"}

func newRunCommand() *cobra.Command {
	var roles string
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run hookstream's roles (default all); starts the embedded broker when no brokers are set",
		Long: `Run starts the roles of hookstream in this process.

With no brokers configured (HOOKSTREAM_BROKERS empty) it first starts the
embedded development broker on HOOKSTREAM_EMBEDDED_ADDR, persisted under
HOOKSTREAM_DATA_DIR/kafka, so one command runs everything. While it runs,
its address is in HOOKSTREAM_DATA_DIR/kafka.addr, where other hookstream
commands on the same data directory find it without flags. On the embedded
broker the ingest listener takes webhooks from this host only
(127.0.0.1:8080); set HOOKSTREAM_HTTP_ADDR=0.0.0.0:8080 (or --http-addr) to
take them from other hosts. With brokers it listens on :8080.

Every setting is an environment variable and a flag; flags win.`,
		Example: `  # everything, on the embedded broker
  hookstream run

  # only the receiver, against a Kafka cluster
  HOOKSTREAM_BROKERS=kafka-1:9092,kafka-2:9092 hookstream run --roles ingest`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, sources, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			selected, err := parseRoles(roles)
			if err != nil {
				return err
			}
			return run(cmd.Context(), cfg, sources, selected, newLogger(cfg, os.Stderr))
		},
	}
	cmd.Flags().StringVar(&roles, "roles", strings.Join(allRoles, ","), "roles to run, comma separated: "+strings.Join(allRoles, ", "))
	config.RegisterFlags(cmd.Flags(), config.Common, config.Topology, config.Server, config.Admin)
	return cmd
}

func parseRoles(s string) ([]string, error) {
	var out []string
	for _, r := range strings.Split(s, ",") {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		if !slices.Contains(allRoles, r) {
			return nil, fmt.Errorf("--roles: unknown role %q (want %s)", r, strings.Join(allRoles, ", "))
		}
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--roles: no role given (want %s)", strings.Join(allRoles, ", "))
	}
	return out, nil
}

// run starts the selected roles and blocks until ctx ends or one fails.
func run(ctx context.Context, cfg *config.Config, sources ingest.Sources, roles []string, log *slog.Logger) error {
	if cfg.Embedded() {
		broker, err := startEmbedded(cfg, log)
		if err != nil {
			return err
		}
		defer broker.Close()
	}
	warnUnsafe(cfg, log)
	security, err := subscriptionSecurity(cfg)
	if err != nil {
		return err
	}
	tr, stopTracing, err := tracing.Setup(ctx)
	if err != nil {
		return err
	}
	defer func() { // after every component, to export their last spans
		if err := stopTracing(context.Background()); err != nil {
			log.Warn("tracing: spans not exported at shutdown", "err", err)
		}
	}()
	n, err := newNode(ctx, cfg, roles, security, tr, log)
	if err != nil {
		return err
	}
	defer n.close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, ctx := errgroup.WithContext(ctx)
	if err := n.start(ctx, g, sources, roles); err != nil {
		// Stop what already started before the error is printed, so it
		// is the last line and nothing outlives the broker.
		cancel()
		_ = g.Wait()
		return err
	}
	log.Info("hookstream running", "roles", roles, "brokers", cfg.SeedBrokers(), "admin", cfg.AdminAddr)
	if slices.Contains(roles, "ingest") && admin.LoopbackHost(cfg.HTTPAddr) {
		_, port, _ := net.SplitHostPort(cfg.HTTPAddr) // validated by config.Load
		log.Info("the ingest listener takes webhooks from this host only; set HOOKSTREAM_HTTP_ADDR=0.0.0.0:"+port+" to take them from others",
			"addr", cfg.HTTPAddr)
	}
	if err := g.Wait(); err != nil {
		return err
	}
	log.Info("hookstream stopped")
	return nil
}

// start starts the selected roles, the tallies, the console and the admin
// server in g.
func (n *node) start(ctx context.Context, g *errgroup.Group, sources ingest.Sources, roles []string) error {
	g.Go(func() error { return n.tally.Run(ctx) })
	g.Go(func() error { return n.counts.Run(ctx) })
	g.Go(func() error { return n.access.Run(ctx) })
	var (
		receiver func() map[string]stats.Answers // this instance's receiver's answers, when it runs one
		ledger   events.Ledger                   // this instance's processor's, when it runs one
	)
	if slices.Contains(roles, "ingest") {
		h, err := n.startIngest(sources)
		if err != nil {
			return err
		}
		receiver = receiverAnswers(h)
		puller := pull.New(pull.Config{Names: n.Names, MaxRecordBytes: topics.MaxRecordBytes(n.cfg.MaxBody), Tracing: n.tr}, n.Client, n.registry, n.log, n.reg)
		h.Route(http.MethodGet, pull.Path, puller.Events)
		g.Go(func() error { return puller.Run(ctx) })
		g.Go(func() error { return inUse(h.Run(ctx), "ingest listener", "HOOKSTREAM_HTTP_ADDR", n.cfg.HTTPAddr) })
	}
	if slices.Contains(roles, "processor") {
		p, err := n.startProcessor()
		if err != nil {
			return err
		}
		ledger = p
		g.Go(func() error { return p.Run(ctx) })
	}
	if slices.Contains(roles, "dispatcher") {
		d, err := n.startDispatcher(ctx)
		if err != nil {
			return err
		}
		g.Go(func() error { return d.Run(ctx) })
	}
	ui, err := n.mount(receiver, ledger)
	if err != nil {
		return err
	}
	g.Go(func() error { return ui.Run(ctx) })
	g.Go(func() error { return inUse(n.srv.Run(ctx), "admin listener", "HOOKSTREAM_ADMIN_ADDR", n.cfg.AdminAddr) })
	return nil
}

// inUse is err, when it is a listener's address being taken, as a
// sentence naming the listener and its variable and saying what to do.
func inUse(err error, listener, env, addr string) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return err
	}
	return fmt.Errorf("another hookstream seems to be running already: the %s's address %s (%s) is in use; stop it, or give this one another address", listener, addr, env)
}

// startEmbedded starts the embedded development broker.
func startEmbedded(cfg *config.Config, log *slog.Logger) (*topics.Embedded, error) {
	broker, err := topics.StartEmbedded(cfg.DataDir, cfg.EmbeddedAddr, log)
	if err != nil {
		return nil, inUse(err, "embedded broker", "HOOKSTREAM_EMBEDDED_ADDR", cfg.EmbeddedAddr)
	}
	log.Info("using the embedded development broker (single node, not for production); set HOOKSTREAM_BROKERS for a Kafka cluster",
		"addr", broker.Addr(), "data", cfg.DataDir)
	return broker, nil
}

// warnUnsafe says which settings weaken a guard: warnings on a Kafka
// cluster, and on the embedded development broker, where they are the
// defaults a developer's machine runs with, information.
func warnUnsafe(cfg *config.Config, log *slog.Logger) {
	level := slog.LevelWarn
	if cfg.Embedded() {
		level = slog.LevelInfo
	}
	say := func(msg string) { log.Log(context.Background(), level, msg) }
	if cfg.Delivery.AllowPrivate {
		say("deliveries to loopback and private addresses are allowed (HOOKSTREAM_DELIVERY_ALLOW_PRIVATE)")
	}
	if cfg.SourcesFile == "" {
		say("no HOOKSTREAM_CONFIG: every source is accepted without signature verification")
	}
	if cfg.SecretKey == nil {
		say("subscriber secrets are stored unencrypted in the subscriptions topic; set HOOKSTREAM_SECRET_KEY (openssl rand -base64 32)")
	}
	if !cfg.Delivery.RequireHTTPS {
		say("subscriber URLs may be plain http (HOOKSTREAM_DELIVERY_REQUIRE_HTTPS=false)")
	}
}

// node is what the roles of one process share: the metrics registry,
// tracing, the cluster (its shared client is the admin client), the admin
// server, the subscriptions registry and the tallies behind the admin API.
type node struct {
	cfg *config.Config
	log *slog.Logger
	reg *prometheus.Registry
	tr  tracing.Tracing
	topics.Cluster
	registry *subscriptions.Registry
	srv      *admin.Server
	tally    *attempts.Tally
	counts   *stats.Tally
	access   *access.Service
	// producers are the roles' producers, closed in reverse order before
	// the admin client.
	producers []*kgo.Client
}

// newNode builds what the roles share, once the topics are in place.
func newNode(ctx context.Context, cfg *config.Config, roles []string, security subscriptions.Security, tr tracing.Tracing, log *slog.Logger) (*node, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cl, err := kgo.NewClient(kafkaOpts(cfg, log, topics.Instrument(reg, "hookstream-admin")...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	if err := ensureTopics(ctx, cfg, cl, log); err != nil {
		cl.Close()
		return nil, err
	}
	names := topics.NewNames(cfg.TopicPrefix)
	c := topics.Cluster{Client: cl, Opts: kafkaOpts(cfg, log), Names: names}
	registry := subscriptions.NewRegistry(c, log).Secure(security).Replicas(cfg.ReplicationFactor).Instrument(reg)
	reg.MustRegister(groups.NewCollector(groups.New(c, registry), log))
	srv := admin.New(admin.Config{Addr: cfg.AdminAddr, AdvertisedAddr: cfg.AdminAdvertisedAddr, Token: cfg.AdminToken, Roles: roles, TrustedProxies: cfg.TrustedProxies}, reg, log)
	srv.AddCheck("broker", brokerCheck(kadm.NewClient(cl)))
	return &node{
		cfg: cfg, log: log, reg: reg, tr: tr, Cluster: c, registry: registry, srv: srv,
		tally:  attempts.NewTally(c, log),
		counts: stats.NewTally(c, log),
		access: access.New(access.Config{MaxTokens: cfg.MaxTokens}, c, log, reg),
	}, nil
}

// close closes the roles' producers, after their roles have stopped, then
// the admin client.
func (n *node) close() {
	for _, p := range slices.Backward(n.producers) {
		p.Close()
	}
	n.Client.Close()
}

// producer builds a producer with opts on top of the process's, closed by
// close.
func (n *node) producer(opts ...kgo.Opt) (*kgo.Client, error) {
	cl, err := n.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	n.producers = append(n.producers, cl)
	return cl, nil
}

// receiverAnswers is what the console charts and /api/stats shows of
// receiver h: its answers per source since it started.
func receiverAnswers(h *ingest.Handler) func() map[string]stats.Answers {
	return func() map[string]stats.Answers {
		sources := h.Stats().Sources
		out := make(map[string]stats.Answers, len(sources))
		for name, s := range sources {
			out[name] = stats.Answers(s)
		}
		return out
	}
}

// startIngest builds the receiver of sources.
func (n *node) startIngest(sources ingest.Sources) (*ingest.Handler, error) {
	icfg := ingest.Config{
		Addr:           n.cfg.HTTPAddr,
		Sources:        sources,
		AcceptAll:      n.cfg.SourcesFile == "",
		MaxBody:        n.cfg.MaxBody,
		AckTimeout:     n.cfg.AckTimeout,
		Topic:          n.Names.Ingest,
		TrustedProxies: n.cfg.TrustedProxies,
		Tracing:        n.tr,
	}
	producer, err := n.producer(slices.Concat(ingest.ProducerOpts(icfg), topics.Instrument(n.reg, "hookstream-ingest"))...)
	if err != nil {
		return nil, err
	}
	return ingest.New(icfg, producer, n.log, n.reg)
}

// startProcessor builds the processor, ready checked by the admin server.
func (n *node) startProcessor() (*processor.Processor, error) {
	pcfg, err := processorConfig(n.cfg, n.Names)
	if err != nil {
		return nil, err
	}
	pcfg.Tracing = n.tr
	p := processor.New(pcfg, n.Opts, n.log, n.reg)
	n.srv.AddCheck("processor", p.Ready)
	return p, nil
}

// startDispatcher builds the dispatcher, ready checked by the admin
// server.
func (n *node) startDispatcher(ctx context.Context) (*dispatch.Dispatcher, error) {
	// Every subscription must be readable before deliveries start; those
	// written before the key was set, or with the previous key, are
	// rewritten with the current one.
	resealed, err := n.registry.Reseal(ctx)
	if err != nil {
		return nil, err
	}
	if resealed > 0 {
		n.log.Info("re-encrypted subscriber secrets with HOOKSTREAM_SECRET_KEY", "subscriptions", resealed)
	}
	producer, err := n.producer(slices.Concat(
		topics.Instrument(n.reg, "hookstream-dispatcher"),
		[]kgo.Opt{kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchMaxBytes(int32(topics.MaxHandOffBytes(n.cfg.MaxBody)))})...)
	if err != nil {
		return nil, err
	}
	d := dispatch.New(dispatch.Config{
		Client:          deliveryClientConfig(n.cfg),
		Schedule:        n.cfg.Delivery.Schedule,
		BreakerCooldown: n.cfg.Delivery.BreakerCooldown,
		DisableAfter:    n.cfg.Delivery.DisableAfter,
		MaxRecordBytes:  topics.MaxHandOffBytes(n.cfg.MaxBody),
		ExprShare:       n.cfg.Delivery.ExprCPUShare,
		// Only an instance id given is sure to be unique: two
		// dispatchers under one would fence each other.
		InstanceID: n.cfg.InstanceID,
		Tracing:    n.tr,
	}, topics.Cluster{Client: producer, Opts: kafkaOpts(n.cfg, n.log, kgo.ClientID(topics.MemberClientID("dispatcher", advertisedAdmin(n.cfg)))), Names: n.Names},
		n.registry, n.log, n.reg)
	n.srv.AddCheck("dispatcher", d.Ready)
	return d, nil
}

// mount builds each component's service and mounts its routes on the
// admin server, then the console's, which calls the same services, and
// returns the console; receiver and ledger are this instance's receiver's
// answers and its processor's ledger, when it runs them.
func (n *node) mount(receiver func() map[string]stats.Answers, ledger events.Ledger) (*console.Console, error) {
	subs := subscriptions.New(n.registry, n.tally, deliveryClientConfig(n.cfg).UserAgent)
	dlq, insts, grps := deadletter.New(n.Cluster), instances.New(n.Cluster), groups.New(n.Cluster, n.registry)
	dlq.Teams(n.registry)
	n.access.Mount(n.srv)
	trail := audit.New(n.Cluster, n.log, n.reg)
	trail.Mount(n.srv)
	subs.Mount(n.srv)
	dlq.Mount(n.srv)
	stats.New(n.counts, n.tally, grps, receiver).Mount(n.srv)
	grps.Mount(n.srv)
	insts.Mount(n.srv)
	evs := events.New(n.Cluster, n.registry, events.NewStoryQuery(ledger, n.registry, n.Cluster, n.cfg.TraceURL, n.log))
	evs.Mount(n.srv)
	ui, err := console.New(console.Config{Subscriptions: subs, Attempts: n.tally, Stats: n.counts, Receiver: receiver,
		Cluster: n.Cluster, DeadLetters: dlq, Events: evs, Groups: grps, Instances: insts, Log: n.log,
		Audit: trail})
	if err != nil {
		return nil, err
	}
	ui.Mount(n.srv)
	return ui, nil
}

// processorConfig is the processor's part of cfg. Its transactional id
// is <prefix>-processor-<instance id>: HOOKSTREAM_INSTANCE_ID, or by
// default the host name and data directory.
func processorConfig(cfg *config.Config, names topics.Names) (processor.Config, error) {
	instance := cfg.InstanceID
	if instance == "" {
		var err error
		if instance, err = instanceID(cfg.DataDir); err != nil {
			return processor.Config{}, err
		}
	}
	return processor.Config{
		Names:           names,
		StateDir:        filepath.Join(cfg.DataDir, "state", "processor"),
		TTL:             cfg.DedupTTL,
		MaxRecordBytes:  topics.MaxRecordBytes(cfg.MaxBody),
		TransactionalID: string(names.ProcessorGroup()) + "-" + instance,
		AdminAddr:       advertisedAdmin(cfg),
	}, nil
}

// advertisedAdmin is the admin address this instance advertises in its
// group members' client ids (topics.MemberClientID), where the others
// reach its admin listener.
func advertisedAdmin(cfg *config.Config) string {
	return cmp.Or(cfg.AdminAdvertisedAddr, cfg.AdminAddr)
}

// instanceID names this process, when HOOKSTREAM_INSTANCE_ID does not,
// stably across restarts and uniquely per host and data directory (two
// processes cannot share one: the state stores lock it), so a restarted
// processor fences its predecessor's open transaction at once.
func instanceID(dataDir string) (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("instance id: %w", err)
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return "", fmt.Errorf("instance id: %w", err)
	}
	sum := sha256.Sum256([]byte(abs))
	return host + "-" + hex.EncodeToString(sum[:4]), nil
}

// brokerCheck reports whether the cluster answers metadata requests.
func brokerCheck(adm *kadm.Client) admin.Check {
	return func(ctx context.Context) (bool, any) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		m, err := adm.BrokerMetadata(ctx)
		if err != nil {
			return false, map[string]string{"error": err.Error()}
		}
		return true, map[string]any{"brokers": len(m.Brokers), "cluster": m.Cluster}
	}
}
