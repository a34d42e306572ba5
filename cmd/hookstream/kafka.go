package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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

// newAdmin returns an admin client; the caller closes the *kgo.Client.
func newAdmin(cfg *config.Config, log *slog.Logger, extra ...kgo.Opt) (*kgo.Client, *kadm.Client, error) {
	cl, err := kgo.NewClient(kafkaOpts(cfg, log, extra...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka client: %w", err)
	}
	return cl, kadm.NewClient(cl), nil
}

// ensureTopics creates missing topics and checks existing ones.
func ensureTopics(ctx context.Context, cfg *config.Config, cl *kgo.Client, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	names := topics.NewNames(cfg.TopicPrefix)
	created, err := topics.Ensure(ctx, cl, topics.Specs(names, cfg.Partitions, cfg.MaxBody))
	if err != nil {
		return fmt.Errorf("%w (brokers %s)", err, strings.Join(cfg.SeedBrokers(), ","))
	}
	for _, t := range created {
		log.Info("created topic", "topic", t)
	}
	return nil
}
