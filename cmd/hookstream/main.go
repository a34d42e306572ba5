// Command hookstream makes webhooks reliable with Kafka. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/hookstream/hookstream/config"
	"github.com/hookstream/hookstream/ingest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal asks the command to stop; the next one ends the
	// process at once, should something keep it (a broker that does not
	// answer is waited on up to the client's request timeout).
	go func() { <-ctx.Done(); stop() }()
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hookstream:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	bi, _ := debug.ReadBuildInfo() // nil without: buildVersion says version alone
	root := &cobra.Command{
		Use:           "hookstream",
		Short:         "Reliable webhooks on Kafka: ingest, exactly-once processing, signed delivery",
		Version:       buildVersion(version, bi),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRunCommand(), newTopicsCommand(), newSubscriptionsCommand(), newSinkCommand(), newBenchCommand(), newLagCommand(), newReplayCommand(), newDLQCommand(), newEventsCommand(), newInstancesCommand(), newTokensCommand(), newAuditCommand())
	refuseUnknown(root)
	return root
}

// loadConfig reads the configuration of cmd: defaults, environment, flags,
// and the sources file they name. The error lists every problem of both,
// one a line.
func loadConfig(cmd *cobra.Command) (*config.Config, ingest.Sources, error) {
	cfg, err := config.Load(cmd.Flags(), os.LookupEnv)
	var sources ingest.Sources
	if cfg != nil && cfg.SourcesFile != "" {
		var serr error
		sources, serr = ingest.LoadSources(cfg.SourcesFile, os.LookupEnv)
		err = errors.Join(err, serr)
	}
	if err != nil {
		return nil, ingest.Sources{}, err
	}
	return cfg, sources, nil
}

// newLogger builds the process logger on w.
func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Log.Level)) // validated by config.Load
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
