package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/hookstream/hookstream/config"
	"github.com/hookstream/hookstream/topics"
)

// kafkaOpts are the options every client of this process shares: seeds,
// logging into the process logger and, when metrics is set, kprom hooks.
func kafkaOpts(cfg *config.Config, log *slog.Logger, metrics *kprom.Metrics, extra ...kgo.Opt) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.SeedBrokers()...),
		kgo.WithLogger(kslog.New(log.With("component", "kafka"))),
	}
	if metrics != nil {
		opts = append(opts, kgo.WithHooks(metrics))
	}
	return append(opts, extra...)
}

// connectTimeout bounds how long commands wait for an unreachable cluster.
const connectTimeout = 30 * time.Second

// newAdmin returns an admin client; the caller closes the *kgo.Client.
func newAdmin(cfg *config.Config, log *slog.Logger, metrics *kprom.Metrics) (*kgo.Client, *kadm.Client, error) {
	cl, err := kgo.NewClient(kafkaOpts(cfg, log, metrics)...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka client: %w", err)
	}
	return cl, kadm.NewClient(cl), nil
}

// ensureTopics creates missing topics and checks existing ones.
func ensureTopics(ctx context.Context, cfg *config.Config, adm *kadm.Client, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	names := topics.NewNames(cfg.TopicPrefix)
	created, err := topics.Ensure(ctx, adm, topics.Specs(names, cfg.Partitions, cfg.MaxBody))
	if err != nil {
		return fmt.Errorf("%w (brokers %s)", err, strings.Join(cfg.SeedBrokers(), ","))
	}
	for _, t := range created {
		log.Info("created topic", "topic", t)
	}
	return nil
}
