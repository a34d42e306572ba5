package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/hookstream/hookstream/config"
	"github.com/hookstream/hookstream/topics"
)

// kafkaOpts are the options every client of this process shares: seeds
// and logging into the process logger. franz-go's info logs narrate every
// transaction and rebalance step, so they show only at debug level.
func kafkaOpts(cfg *config.Config, log *slog.Logger, extra ...kgo.Opt) []kgo.Opt {
	h := log.With("component", "kafka").Handler()
	if cfg.Log.Level != "debug" {
		h = quieter{h}
	}
	return append([]kgo.Opt{
		kgo.SeedBrokers(cfg.SeedBrokers()...),
		kgo.WithLogger(kslog.New(slog.New(h))),
	}, extra...)
}

// quieter passes warnings and errors only.
type quieter struct{ slog.Handler }

func (q quieter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && q.Handler.Enabled(ctx, l)
}
func (q quieter) WithAttrs(as []slog.Attr) slog.Handler { return quieter{q.Handler.WithAttrs(as)} }
func (q quieter) WithGroup(name string) slog.Handler    { return quieter{q.Handler.WithGroup(name)} }

// connectTimeout bounds how long commands wait for an unreachable cluster.
const connectTimeout = 30 * time.Second

// cluster is what a command needs to work on the configured cluster: its
// configuration and logger, and the cluster as the services reach it (its
// shared client built from its options, which build further clients).
type cluster struct {
	cfg *config.Config
	log *slog.Logger
	topics.Cluster
}

// withCluster loads the command's configuration and runs fn with a client
// on the cluster (built without I/O, so fn can check its arguments first),
// closing it afterwards. Clients produce records as large as the body
// limit allows, since commands copy records hookstream wrote.
//
// With no brokers and no embedded address set, the client dials the
// embedded broker running on the data directory, wherever it listens. When
// fn fails and no broker could be reached, the error says that alone.
func withCluster(cmd *cobra.Command, fn func(ctx context.Context, c cluster) error) error {
	cfg, _, err := loadConfig(cmd)
	if err != nil {
		return err
	}
	if _, set := os.LookupEnv("HOOKSTREAM_EMBEDDED_ADDR"); cfg.Embedded() && !set && !cmd.Flags().Changed("embedded-addr") {
		if addr, ok := topics.RunningEmbedded(cfg.DataDir); ok {
			cfg.EmbeddedAddr = addr
		}
	}
	log := newLogger(cfg, os.Stderr)
	var dials dialOutcomes
	opts := kafkaOpts(cfg, slog.New(withoutDialFailures{log.Handler()}), kgo.ProducerBatchMaxBytes(int32(topics.MaxRecordBytes(cfg.MaxBody))), kgo.WithHooks(&dials))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	err = fn(cmd.Context(), cluster{cfg: cfg, log: log, Cluster: topics.Cluster{Client: cl, Opts: opts, Names: topics.NewNames(cfg.TopicPrefix)}})
	if err != nil && dials.unreachable() {
		seeds := strings.Join(cfg.SeedBrokers(), ",")
		if cfg.Embedded() {
			return fmt.Errorf("no Kafka broker at %s: is `hookstream run` running? set --brokers", seeds)
		}
		return fmt.Errorf("no Kafka broker reachable at %s: check --brokers (HOOKSTREAM_BROKERS)", seeds)
	}
	return err
}

// dialOutcomes records whether a client's connection attempts failed, and
// whether any succeeded.
type dialOutcomes struct {
	failed, succeeded atomic.Bool
}

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (d *dialOutcomes) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		d.failed.Store(true)
	} else {
		d.succeeded.Store(true)
	}
}

// withoutDialFailures drops the client's warnings about a failed dial: a
// command that cannot reach any broker says so in its error, once.
type withoutDialFailures struct{ slog.Handler }

func (h withoutDialFailures) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "unable to open connection to broker") {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}
func (h withoutDialFailures) WithAttrs(as []slog.Attr) slog.Handler {
	return withoutDialFailures{h.Handler.WithAttrs(as)}
}
func (h withoutDialFailures) WithGroup(name string) slog.Handler {
	return withoutDialFailures{h.Handler.WithGroup(name)}
}

// unreachable reports whether the client tried to reach a broker and never
// did.
func (d *dialOutcomes) unreachable() bool { return d.failed.Load() && !d.succeeded.Load() }

// ensureTopics creates missing topics and checks existing ones, warning
// about those replicated less than new ones would be.
func ensureTopics(ctx context.Context, cfg *config.Config, cl *kgo.Client, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	names := topics.NewNames(cfg.TopicPrefix)
	specs := topics.Specs(names, cfg.Partitions, cfg.MaxBody)
	topics.SetRetention(specs, names.DeliveryAttempts, cfg.DedupTTL)
	topics.SetRetention(specs, names.Audit, cfg.AuditRetention)
	res, err := topics.Ensure(ctx, cl, specs, cfg.ReplicationFactor)
	if err != nil {
		return fmt.Errorf("%w (brokers %s)", err, strings.Join(cfg.SeedBrokers(), ","))
	}
	for _, t := range res.Created {
		log.Info("created topic", "topic", t, "replicas", res.Replicas, "min_insync_replicas", topics.MinInSync(res.Replicas))
	}
	for _, t := range slices.Sorted(maps.Keys(res.UnderReplicated)) {
		log.Warn("topic has fewer replicas than configured: a broker's loss can lose or block its writes; raise them with a partition reassignment",
			"topic", t, "replicas", res.UnderReplicated[t], "want", res.Replicas)
	}
	return nil
}
