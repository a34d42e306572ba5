package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/attempts"
	"github.com/hookstream/hookstream/config"
	"github.com/hookstream/hookstream/deadletter"
	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/ingest"
	"github.com/hookstream/hookstream/processor"
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
commands on the same data directory find it without flags.

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
		broker, err := topics.StartEmbedded(cfg.DataDir, cfg.EmbeddedAddr, log)
		if err != nil {
			return err
		}
		defer broker.Close()
		log.Warn("using the embedded development broker (single node, not for production); set HOOKSTREAM_BROKERS for a Kafka cluster",
			"addr", broker.Addr(), "data", cfg.DataDir)
	}
	if cfg.Delivery.AllowPrivate {
		log.Warn("deliveries to loopback and private addresses are allowed (HOOKSTREAM_DELIVERY_ALLOW_PRIVATE)")
	}
	if cfg.SourcesFile == "" {
		log.Warn("no HOOKSTREAM_CONFIG: every source is accepted without signature verification")
	}
	if cfg.SecretKey == nil {
		log.Warn("subscriber secrets are stored unencrypted in the subscriptions topic; set HOOKSTREAM_SECRET_KEY (openssl rand -base64 32)")
	}
	if !cfg.Delivery.RequireHTTPS {
		log.Warn("subscriber URLs may be plain http (HOOKSTREAM_DELIVERY_REQUIRE_HTTPS=false)")
	}
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

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	adminClient, err := kgo.NewClient(kafkaOpts(cfg, log, topics.Instrument(reg, "hookstream-admin")...)...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	adm := kadm.NewClient(adminClient)
	defer adminClient.Close()
	if err := ensureTopics(ctx, cfg, adminClient, log); err != nil {
		return err
	}
	names := topics.NewNames(cfg.TopicPrefix)
	registry := subscriptions.NewRegistry(adminClient, kafkaOpts(cfg, log), names, log).Secure(security)
	reg.MustRegister(groups.NewCollector(adminClient, names, func(ctx context.Context) (map[string]bool, error) {
		subs, err := registry.List(ctx)
		if err != nil {
			return nil, err
		}
		ids := make(map[string]bool, len(subs))
		for id := range subs {
			ids[id] = true
		}
		return ids, nil
	}, log))

	srv := admin.New(admin.Config{Addr: cfg.AdminAddr, AdvertisedAddr: cfg.AdminAdvertisedAddr, Token: cfg.AdminToken, Roles: roles}, reg, log)
	srv.AddCheck("broker", brokerCheck(adm))
	tally := attempts.NewTally(kafkaOpts(cfg, log), names, log)
	counts := stats.NewTally(kafkaOpts(cfg, log), names, log)
	var (
		rejected func() map[string]int64 // this instance's receiver's, when it runs one
		local    *processor.Processor    // this instance's, when it runs one
	)

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return tally.Run(ctx) })
	g.Go(func() error { return counts.Run(ctx) })
	if slices.Contains(roles, "ingest") {
		icfg := ingest.Config{
			Addr:           cfg.HTTPAddr,
			Sources:        sources,
			AcceptAll:      cfg.SourcesFile == "",
			MaxBody:        cfg.MaxBody,
			AckTimeout:     cfg.AckTimeout,
			Topic:          names.Ingest,
			TrustedProxies: cfg.TrustedProxies,
			Tracing:        tr,
		}
		producer, err := kgo.NewClient(kafkaOpts(cfg, log, slices.Concat(ingest.ProducerOpts(icfg),
			topics.Instrument(reg, "hookstream-ingest"))...)...)
		if err != nil {
			return fmt.Errorf("kafka client: %w", err)
		}
		defer producer.Close() // after the receiver has drained, before the broker stops
		h, err := ingest.New(icfg, producer, log, reg)
		if err != nil {
			return err
		}
		rejected = h.Rejected
		g.Go(func() error { return h.Run(ctx) })
	}
	if slices.Contains(roles, "processor") {
		pcfg, err := processorConfig(cfg, names)
		if err != nil {
			return err
		}
		pcfg.Tracing = tr
		p := processor.New(pcfg, kafkaOpts(cfg, log), log, reg)
		srv.AddCheck("processor", p.Ready)
		local = p
		g.Go(func() error { return p.Run(ctx) })
	}
	if slices.Contains(roles, "dispatcher") {
		// Every subscription must be readable before deliveries start; those
		// written before the key was set, or with the previous key, are
		// rewritten with the current one.
		resealed, err := registry.Reseal(ctx)
		if err != nil {
			return err
		}
		if resealed > 0 {
			log.Info("re-encrypted subscriber secrets with HOOKSTREAM_SECRET_KEY", "subscriptions", resealed)
		}
		producer, err := kgo.NewClient(kafkaOpts(cfg, log, slices.Concat(
			topics.Instrument(reg, "hookstream-dispatcher"),
			[]kgo.Opt{kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchMaxBytes(int32(topics.MaxHandOffBytes(cfg.MaxBody)))})...)...)
		if err != nil {
			return fmt.Errorf("kafka client: %w", err)
		}
		defer producer.Close()
		d := dispatch.New(dispatch.Config{
			Names: names,
			Client: dispatch.ClientConfig{
				Timeout:      cfg.Delivery.Timeout,
				AllowPrivate: cfg.Delivery.AllowPrivate,
				RequireHTTPS: cfg.Delivery.RequireHTTPS,
				UserAgent:    "hookstream/" + version,
			},
			Schedule:        cfg.Delivery.Schedule,
			BreakerCooldown: cfg.Delivery.BreakerCooldown,
			DisableAfter:    cfg.Delivery.DisableAfter,
			MaxRecordBytes:  topics.MaxHandOffBytes(cfg.MaxBody),
			// Only an instance id given is sure to be unique: two
			// dispatchers under one would fence each other.
			InstanceID: cfg.InstanceID,
			Tracing:    tr,
		}, kafkaOpts(cfg, log), producer, registry, log, reg)
		srv.AddCheck("dispatcher", d.Ready)
		g.Go(func() error { return d.Run(ctx) })
	}
	subscriptions.API{Registry: registry, Attempts: tally, Kafka: adminClient, Opts: kafkaOpts(cfg, log), Names: names}.Mount(srv)
	deadletter.API{Kafka: adminClient, Opts: kafkaOpts(cfg, log), Names: names}.Mount(srv)
	stats.API{Stats: counts, Attempts: tally, Registry: registry, Rejected: rejected, Kafka: adminClient, Names: names}.Mount(srv)
	processor.NewStoryQuery(local, registry, adminClient, kafkaOpts(cfg, log), names, log).Mount(srv)
	g.Go(func() error { return srv.Run(ctx) })
	log.Info("hookstream running", "roles", roles, "brokers", cfg.SeedBrokers(), "admin", cfg.AdminAddr)
	if err := g.Wait(); err != nil {
		return err
	}
	log.Info("hookstream stopped")
	return nil
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
		AdminAddr:       cmp.Or(cfg.AdminAdvertisedAddr, cfg.AdminAddr),
	}, nil
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
