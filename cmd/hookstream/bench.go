package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/internal/loadgen"
	"github.com/hookstream/hookstream/signature"
	"github.com/hookstream/hookstream/subscriptions"
)

// benchOptions are the flags of bench.
type benchOptions struct {
	cfg       loadgen.Config
	base      string
	sink      string
	batchMax  int
	batchWait time.Duration
	// joinTimeout bounds the wait for the sink subscription's group.
	joinTimeout time.Duration
	output      string
}

func newBenchCommand() *cobra.Command {
	o := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load-test a receiver: throughput, status counts, latency percentiles, end-to-end latency",
		Long: `Bench POSTs webhooks to a hookstream receiver at an open-loop --rate (or as
fast as --concurrency allows with --rate 0) for --duration, and reports
requests/s, status counts and latency percentiles from an HDR histogram,
measured from each request's intended start time so that stalls are not
hidden.

With --sink ADDR it also runs a subscriber on ADDR, subscribes it (from now
on) through the cluster of --brokers, and reports end-to-end latency: from
an event's POST to its signed delivery, each signature verified. It sends
once a dispatcher consumes the new subscription (its group formed, every
partition assigned), within --sink-join-timeout. The subscription is
removed at the end; --sink-batch-max and --sink-batch-wait
make it a batched one, and the sink counts each event of a batch.`,
		Example: `  hookstream bench --rate 2000 --duration 30s
  hookstream bench --rate 0 --concurrency 64 --scheme github --secret s3cret
  hookstream bench --rate 1000 --sink 127.0.0.1:9100 --output json
  hookstream bench --rate 5000 --sink 127.0.0.1:9100 --sink-batch-max 100 --sink-batch-wait 100ms`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBench(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.base, "target", "http://127.0.0.1:8080", "receiver base URL")
	f.StringVar(&o.cfg.Source, "source", "bench", "source name (POST /webhooks/<source>)")
	f.Float64Var(&o.cfg.Rate, "rate", 1000, "requests per second, open loop; 0: as fast as --concurrency allows")
	f.IntVar(&o.cfg.Concurrency, "concurrency", 64, "requests in flight at most")
	f.DurationVar(&o.cfg.Duration, "duration", 10*time.Second, "how long to send")
	f.IntVar(&o.cfg.BodySize, "body-size", 1024, "JSON body size in bytes")
	f.Float64Var(&o.cfg.Duplicates, "duplicates", 0, "share of requests repeating an earlier id (0 to 1)")
	f.StringVar(&o.cfg.Scheme, "scheme", "none", "signature scheme: none, github or standard")
	f.StringVar(&o.cfg.Secret, "secret", "", "secret of the signature scheme")
	f.StringVar(&o.sink, "sink", "", "run a subscriber on this address and measure end-to-end latency")
	f.IntVar(&o.batchMax, "sink-batch-max", 1, "batch_max of the sink's subscription (events per delivery)")
	f.DurationVar(&o.batchWait, "sink-batch-wait", 0, "batch_wait of the sink's subscription")
	f.DurationVar(&o.joinTimeout, "sink-join-timeout", time.Minute, "how long to wait for a dispatcher to consume the sink's subscription before sending")
	addOutputFlag(cmd, &o.output)
	return cmd
}

// runBench sends the load, with a sink subscribed when o.sink is set, and
// prints the report.
func runBench(cmd *cobra.Command, o *benchOptions) error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	o.cfg.URL = o.base + "/webhooks/" + o.cfg.Source
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: o.cfg.Concurrency,
		MaxConnsPerHost:     o.cfg.Concurrency,
	}, Timeout: 30 * time.Second}
	var s *loadgen.Sink
	if o.sink != "" {
		var batch subscriptions.Patch
		if cmd.Flags().Changed("sink-batch-max") {
			batch.BatchMax = &o.batchMax
		}
		if cmd.Flags().Changed("sink-batch-wait") {
			batch.BatchWait = ptr(subscriptions.Duration(o.batchWait))
		}
		if err := batch.Validate(); err != nil {
			return err
		}
		s = loadgen.NewSink()
		stop, err := startBenchSink(cmd, o.sink, s, batch, o.joinTimeout)
		if err != nil {
			return err
		}
		defer stop()
	}
	progress := func(p loadgen.Progress) {
		fmt.Fprintf(os.Stderr, "\r%5.0fs  %d done  %d errors  %d delivered", p.Elapsed.Seconds(), p.Completed, p.Errors, p.Delivered)
	}
	report, err := loadgen.Run(cmd.Context(), o.cfg, client, s, progress)
	fmt.Fprintln(os.Stderr)
	if err != nil {
		return err
	}
	if s != nil {
		ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
		e2e := s.Wait(ctx)
		cancel()
		report.EndToEnd = &e2e
		report.Undelivered = s.Missing()
	}
	if o.output == "json" {
		return writeJSON(cmd.OutOrStdout(), report)
	}
	return printReport(cmd.OutOrStdout(), report)
}

// startBenchSink serves s on addr and subscribes it, batched as batch says, with
// s verifying its signatures; stop removes both.
func startBenchSink(cmd *cobra.Command, addr string, s *loadgen.Sink, batch subscriptions.Patch, joinTimeout time.Duration) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--sink: %w", err)
	}
	secret := signature.NewSecret()
	key, err := signature.DecodeSecret(secret)
	if err != nil {
		return nil, err
	}
	s.Keys = [][]byte{key}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	var id string
	err = withClusterRegistry(cmd, func(ctx context.Context, c cluster, r *subscriptions.Registry) error {
		sub := subscriptions.Subscription{URL: "http://" + ln.Addr().String() + "/", Description: "hookstream bench sink", MaxInFlight: 64,
			Secret: secret}
		batch.Apply(&sub)
		if err := r.Create(ctx, &sub, "latest"); err != nil {
			return err
		}
		id = sub.ID
		c.record(ctx, change{action: "subscription.create", target: id, status: http.StatusCreated, fields: append(fieldNames(batch), "description", "max_in_flight", "secret", "url")})
		// Events sent before a dispatcher reads the events topic would
		// wait for the dispatch group to form (seconds on a cluster) and
		// count that wait as latency.
		if err := groups.WaitAssigned(cmd.Context(), c.Admin(), c.Names.DispatchGroup(), c.Names.Events, joinTimeout); err != nil {
			return fmt.Errorf("--sink: %w; is a dispatcher running? (subscription %s)", err, id)
		}
		return nil
	})
	stop = func() {
		if id != "" {
			remove := func(ctx context.Context, c cluster, r *subscriptions.Registry) error {
				if err := r.Delete(ctx, id); err != nil {
					return err
				}
				c.record(ctx, change{action: "subscription.delete", target: id, status: http.StatusNoContent})
				return nil
			}
			if err := withClusterRegistry(cmd, remove); err != nil {
				fmt.Fprintln(os.Stderr, "hookstream: remove the bench subscription:", err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx) // the serve error below says what went wrong, if anything
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "hookstream: sink:", err)
		}
	}
	if err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

func printReport(w io.Writer, r loadgen.Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "sent\t%d\n", r.Sent)
	fmt.Fprintf(tw, "completed\t%d in %v (%.0f/s)\n", r.Completed, r.Elapsed.Round(time.Millisecond), r.PerSecond)
	fmt.Fprintf(tw, "errors\t%d\n", r.Errors)
	for code, n := range r.Status {
		fmt.Fprintf(tw, "status %s\t%d\n", code, n)
	}
	row := func(name string, p loadgen.Percentiles) {
		fmt.Fprintf(tw, "%s\tp50 %v  p90 %v  p99 %v  p99.9 %v  max %v  (n=%d)\n", name, p.P50, p.P90, p.P99, p.P999, p.Max, p.Count)
	}
	row("ack latency", r.Latency)
	if r.EndToEnd != nil {
		row("end to end", *r.EndToEnd)
		fmt.Fprintf(tw, "undelivered\t%d\n", r.Undelivered)
	}
	return tw.Flush()
}
