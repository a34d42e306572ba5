// Perfcompare measures hookstream's receiver against its durable ceiling on
// this machine, in one command run from the repository root:
//
//	go run ./tools/perfcompare [--duration 10s] [--rounds 3] [--tracing] [--json]
//
// It builds hookstream and tools/thinreceiver once, then, one server at
// a time and in alternating rounds, starts each server as its own process
// on a fresh data directory and runs the same closed-loop load against it
// (internal/loadgen, as `hookstream bench --rate 0`: 64 connections, 1 KiB
// GitHub-signed JSON):
//
//   - bare: a bare Echo handler answering 202, no Kafka (context only);
//   - thin: the thin durable receiver, the ceiling (tools/thinreceiver);
//   - ingest: `hookstream run --roles ingest`, embedded broker, a GitHub source;
//   - all: `hookstream run` with every role, where the figure is the rate the
//     whole pipeline sustains: the events the processor commits per second
//     over the round, read from the ingest topic's end offsets and the
//     processor group's committed offsets before and after.
//
// With --tracing, the last two also run exporting their spans over
// OTLP/HTTP to a receiver in this process (internal/otlptest, decoding and
// counting them), once sampling every trace and once 1% of them
// (parentbased_traceidratio 0.01), and once with OTEL_SDK_DISABLED=true,
// making no span at all, as before hookstream traced; without it, and for
// the first two, no OTEL_* variable reaches the servers, so tracing is off
// as by default: spans are made for the context they carry, and none is
// exported.
//
// It prints the median of the rounds for each server and its ratio to the
// thin durable receiver's, with the load average of the machine, and for
// the traced servers their ratio to the same server with tracing off.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/ingest"
	"github.com/hookstream/hookstream/internal/loadgen"
	"github.com/hookstream/hookstream/internal/otlptest"
	"github.com/hookstream/hookstream/tools/internal/harness"
	"github.com/hookstream/hookstream/tools/internal/program"
	"github.com/hookstream/hookstream/topics"
)

// warmUp is the unmeasured load before each measured round.
const warmUp = 2 * time.Second

// server is one of the compared servers.
type server struct {
	name, label string
	// command starts the server on the given addresses and directory.
	command func(bin string, a addrs) *exec.Cmd
	// pipeline: the figure is the processor's sustained rate.
	pipeline bool
	// off names the same server with tracing off, for a traced one.
	off string
}

type addrs struct{ http, broker, admin, dataDir, config string }

var servers = []server{
	{name: "bare", label: "bare Echo handler, 202, no Kafka (context)",
		command: func(bin string, a addrs) *exec.Cmd {
			return exec.Command(filepath.Join(bin, "thinreceiver"), "-bare", "-addr", a.http)
		}},
	{name: "thin", label: "thin durable receiver (the ceiling)",
		command: func(bin string, a addrs) *exec.Cmd {
			return exec.Command(filepath.Join(bin, "thinreceiver"), "-addr", a.http, "-data-dir", a.dataDir, "-secret", harness.Secret)
		}},
	{name: "ingest", label: "hookstream run --roles ingest",
		command: func(bin string, a addrs) *exec.Cmd { return hookstream(bin, a, "ingest") }},
	{name: "all", label: "hookstream run (every role), sustained",
		command:  func(bin string, a addrs) *exec.Cmd { return hookstream(bin, a, "ingest,processor,dispatcher") },
		pipeline: true},
}

// tracedServers are the receiver and the whole pipeline exporting their
// spans to the OTLP/HTTP receiver at endpoint, sampling every trace and
// 1%, and making no span at all.
func tracedServers(endpoint string) []server {
	var out []server
	for _, s := range []struct {
		name, label, roles string
		pipeline           bool
	}{
		{"ingest", "hookstream run --roles ingest", "ingest", false},
		{"all", "hookstream run (every role), sustained", "ingest,processor,dispatcher", true},
	} {
		for _, sampling := range []struct {
			suffix, label string
			env           []string
		}{
			{"-t100", ", traces exported, all sampled", nil},
			{"-t1", ", traces exported, 1% sampled", []string{"OTEL_TRACES_SAMPLER=parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG=0.01"}},
			{"-nospans", ", no span made (OTEL_SDK_DISABLED)", []string{"OTEL_SDK_DISABLED=true"}},
		} {
			out = append(out, server{name: s.name + sampling.suffix, label: s.label + sampling.label, pipeline: s.pipeline, off: s.name,
				command: func(bin string, a addrs) *exec.Cmd {
					cmd := hookstream(bin, a, s.roles)
					cmd.Env = append(cmd.Env, "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_SERVICE_NAME=hookstream-perfcompare")
					cmd.Env = append(cmd.Env, sampling.env...)
					return cmd
				}})
		}
	}
	return out
}

// hookstream runs `hookstream run --roles roles` on a's addresses, with
// this process's environment less its HOOKSTREAM_* and OTEL_* variables.
func hookstream(bin string, a addrs, roles string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(bin, "hookstream"), "run", "--roles", roles)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOOKSTREAM_") && !strings.HasPrefix(kv, "OTEL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env,
		"HOOKSTREAM_CONFIG="+a.config,
		"HOOKSTREAM_DATA_DIR="+a.dataDir,
		"HOOKSTREAM_EMBEDDED_ADDR="+a.broker,
		"HOOKSTREAM_HTTP_ADDR="+a.http,
		"HOOKSTREAM_ADMIN_ADDR="+a.admin,
		"HOOKSTREAM_LOG_LEVEL=error",
	)
	return cmd
}

// Round is one measured run against one server.
type Round struct {
	Server string         `json:"server"`
	Round  int            `json:"round"`
	Report loadgen.Report `json:"report"`
	// Pipeline is the processor's keeping up, for the server with every role.
	Pipeline *Pipeline `json:"pipeline,omitempty"`
	// SpansPerSecond are the spans the OTLP receiver got per second of
	// the measured load.
	SpansPerSecond float64 `json:"spans_per_second,omitempty"`
	// CPUPerRequest is the server process's CPU time (user and system)
	// over the measured load per request answered, or for the whole
	// pipeline per event accepted: steadier than the rates when other
	// work shares the machine.
	CPUPerRequest time.Duration `json:"cpu_per_request,omitempty"`
}

// rate is the round's figure: requests answered per second, or for the
// whole pipeline the rate it sustained.
func (r Round) rate() float64 {
	if r.Pipeline != nil {
		return r.Pipeline.Sustained()
	}
	return r.Report.PerSecond
}

// errors counts failed requests: transport errors and answers other than 2xx.
func (r Round) errors() int64 {
	n := r.Report.Errors
	for code, c := range r.Report.Status {
		if !strings.HasPrefix(code, "2") {
			n += c
		}
	}
	return n
}

func main() {
	var (
		duration    = flag.Duration("duration", 10*time.Second, "measured load per round and server")
		rounds      = flag.Int("rounds", 3, "rounds; each server's figures are the median of its rounds")
		concurrency = flag.Int("concurrency", 64, "connections (requests in flight)")
		traced      = flag.Bool("tracing", false, "also run the receiver and every role exporting traces, all and 1% sampled")
		asJSON      bool
	)
	program.JSONVar(&asJSON)
	program.Main("perfcompare", func(ctx context.Context) error {
		return run(ctx, *duration, *rounds, *concurrency, *traced, asJSON)
	})
}

func run(ctx context.Context, duration time.Duration, rounds, concurrency int, traced, asJSON bool) error {
	if rounds < 1 || duration <= 0 {
		return errors.New("--rounds and --duration must be positive")
	}
	work, err := os.MkdirTemp("", "hookstream-perfcompare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	fmt.Fprintln(os.Stderr, "building hookstream and thinreceiver")
	if _, err := harness.Build(ctx, work, "./cmd/hookstream", "./tools/thinreceiver"); err != nil {
		return err
	}
	config, err := harness.WriteSources(work)
	if err != nil {
		return err
	}
	load := loadgen.Config{Source: harness.Source, Concurrency: concurrency, Duration: duration, BodySize: 1024,
		Scheme: ingest.SchemeGitHub, Secret: harness.Secret}
	c := comparison{Duration: duration, Concurrency: concurrency, LoadBefore: harness.LoadAverage(), servers: servers}
	var spans *otlptest.Receiver
	if traced {
		var stop func()
		if spans, stop, err = serveSpans(); err != nil {
			return err
		}
		defer stop()
		c.servers = append(slices.Clone(servers), tracedServers(spans.URL)...)
	}
	for i := range rounds {
		for _, s := range c.servers {
			r, err := measure(ctx, s, work, filepath.Join(work, fmt.Sprintf("%s-%d", s.name, i)), config, load, spans)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", i+1, s.name, err)
			}
			r.Round = i + 1
			fmt.Fprintf(os.Stderr, "round %d  %-7s %8.0f/s  p99 %v  errors %d\n", r.Round, s.name, r.rate(), r.Report.Latency.P99, r.errors())
			c.Rounds = append(c.Rounds, r)
		}
	}
	c.LoadAfter = harness.LoadAverage()
	c.summarize()
	return program.Report(os.Stdout, asJSON, c, c.print)
}

// serveSpans starts an OTLP/HTTP receiver that counts the spans it gets.
func serveSpans() (*otlptest.Receiver, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	r := &otlptest.Receiver{URL: "http://" + ln.Addr().String(), CountOnly: true}
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return r, func() { _ = srv.Close() }, nil
}

// measure starts s, waits until it accepts a signed POST, warms it up and
// runs the measured load against it, then stops it; spans, when not nil,
// counts the spans exported during the measured load.
func measure(ctx context.Context, s server, bin, dataDir, config string, load loadgen.Config, spans *otlptest.Receiver) (Round, error) {
	var a addrs
	for _, p := range []*string{&a.http, &a.broker, &a.admin} {
		addr, err := harness.FreeAddr()
		if err != nil {
			return Round{}, err
		}
		*p = addr
	}
	a.dataDir, a.config = dataDir, config
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return Round{}, err
	}
	cmd := s.command(bin, a)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return Round{}, err
	}
	defer harness.Terminate(cmd)

	load.URL = "http://" + a.http + "/webhooks/" + harness.Source
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: load.Concurrency, MaxConnsPerHost: load.Concurrency},
		Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	if err := waitReady(ctx, client, load); err != nil {
		return Round{}, err
	}
	warm := load
	warm.Duration = warmUp
	if _, err := loadgen.Run(ctx, warm, client, nil, nil); err != nil {
		return Round{}, err
	}
	r := Round{Server: s.name}
	if !s.pipeline {
		from, cpu := spanCount(spans), harness.CPUTime(cmd.Process.Pid)
		var err error
		r.Report, err = loadgen.Run(ctx, load, client, nil, nil)
		r.SpansPerSecond = float64(spanCount(spans)-from) / load.Duration.Seconds()
		r.CPUPerRequest = perEvent(harness.CPUTime(cmd.Process.Pid)-cpu, r.Report.Completed)
		return r, err
	}

	kc, err := kgo.NewClient(kgo.SeedBrokers(a.broker))
	if err != nil {
		return Round{}, err
	}
	defer kc.Close()
	adm := kadm.NewClient(kc)
	names := topics.NewNames("hookstream")
	// The processor is running once it has caught up with the warm-up.
	before, err := harness.WaitDrained(ctx, adm, names)
	if err != nil {
		return Round{}, err
	}
	start, from, cpu := time.Now(), spanCount(spans), harness.CPUTime(cmd.Process.Pid)
	if r.Report, err = loadgen.Run(ctx, load, client, nil, nil); err != nil {
		return Round{}, err
	}
	r.SpansPerSecond = float64(spanCount(spans)-from) / time.Since(start).Seconds()
	after, err := harness.ReadOffsets(ctx, adm, names)
	if err != nil {
		return Round{}, err
	}
	p := pipelineOf(before, after, time.Since(start))
	r.Pipeline = &p
	r.CPUPerRequest = perEvent(harness.CPUTime(cmd.Process.Pid)-cpu, p.Accepted)
	return r, nil
}

// perEvent is cpu per one of n events; 0 for none.
func perEvent(cpu time.Duration, n int64) time.Duration {
	if n <= 0 {
		return 0
	}
	return cpu / time.Duration(n)
}

func spanCount(r *otlptest.Receiver) int64 {
	if r == nil {
		return 0
	}
	return r.Count()
}

// waitReady polls with signed POSTs until one is answered 202.
func waitReady(ctx context.Context, client *http.Client, load loadgen.Config) error {
	probe := load
	probe.Concurrency, probe.Rate, probe.Duration = 1, 20, 200*time.Millisecond
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := loadgen.Run(ctx, probe, client, nil, nil)
		if err != nil {
			return err
		}
		if r.Status[strconv.Itoa(http.StatusAccepted)] > 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s answered no signed POST with 202 within 60s (status %v, %d errors)", load.URL, r.Status, r.Errors)
		}
	}
}

// Pipeline is how the whole pipeline kept up over a round: events accepted
// (written to the ingest topic) and processed (committed by the processor
// group), per second, and the lag between them before and after.
type Pipeline struct {
	Accepted           int64   `json:"accepted"`
	Processed          int64   `json:"processed"`
	AcceptedPerSecond  float64 `json:"accepted_per_second"`
	ProcessedPerSecond float64 `json:"processed_per_second"`
	LagBefore          int64   `json:"lag_before"`
	LagAfter           int64   `json:"lag_after"`
	// Flat: the lag grew by no more than flatShare of the events accepted.
	Flat bool `json:"lag_flat"`
}

// flatShare is the lag growth, as a share of the events accepted in a
// round, still counted as flat: a processor batch may be under way when
// the round ends.
const flatShare = 0.05

func pipelineOf(before, after harness.Offsets, elapsed time.Duration) Pipeline {
	p := Pipeline{
		Accepted:  after.End - before.End,
		Processed: after.Committed - before.Committed,
		LagBefore: before.End - before.Committed,
		LagAfter:  after.End - after.Committed,
	}
	p.AcceptedPerSecond = float64(p.Accepted) / elapsed.Seconds()
	p.ProcessedPerSecond = float64(p.Processed) / elapsed.Seconds()
	p.Flat = float64(p.LagAfter-p.LagBefore) <= flatShare*float64(p.Accepted)
	return p
}

// Sustained is the rate the pipeline kept up with: what it accepted, or,
// when the processor fell behind, what it processed.
func (p Pipeline) Sustained() float64 { return min(p.AcceptedPerSecond, p.ProcessedPerSecond) }

// comparison is a whole run.
type comparison struct {
	Duration    time.Duration `json:"duration"`
	Rounds      []Round       `json:"rounds"`
	Concurrency int           `json:"concurrency"`
	LoadBefore  string        `json:"loadavg_before"`
	LoadAfter   string        `json:"loadavg_after"`
	Servers     []summary     `json:"servers"`
	// servers are the servers measured, in the order of each round.
	servers []server
}

// summary is one server's medians over the rounds.
type summary struct {
	Name  string        `json:"name"`
	Label string        `json:"label"`
	Rate  float64       `json:"per_second"`
	P50   time.Duration `json:"p50"`
	P99   time.Duration `json:"p99"`
	// Errors is the sum over the rounds.
	Errors int64 `json:"errors"`
	// Ratio is Rate over the thin durable receiver's.
	Ratio float64 `json:"ratio_to_thin"`
	// Of the server with every role: the medians of the pipeline, and
	// whether the lag stayed flat in every round.
	AcceptedPerSecond  float64 `json:"accepted_per_second,omitempty"`
	ProcessedPerSecond float64 `json:"processed_per_second,omitempty"`
	Flat               *bool   `json:"lag_flat,omitempty"`
	// CPUPerRequest is the median of the rounds'.
	CPUPerRequest time.Duration `json:"cpu_per_request"`
	// Of a traced server: its tracing-off counterpart, Rate and
	// CPUPerRequest over that one's, and the median of the spans received
	// per second.
	Off            string  `json:"off,omitempty"`
	RatioToOff     float64 `json:"ratio_to_off,omitempty"`
	CPURatioToOff  float64 `json:"cpu_ratio_to_off,omitempty"`
	SpansPerSecond float64 `json:"spans_per_second,omitempty"`
}

func (c *comparison) summarize() {
	c.Servers = nil
	for _, s := range c.servers {
		var rates, p50, p99, accepted, processed, spans, cpu []float64
		sum := summary{Name: s.name, Label: s.label, Off: s.off}
		flat := true
		for _, r := range c.Rounds {
			if r.Server != s.name {
				continue
			}
			rates = append(rates, r.rate())
			p50 = append(p50, float64(r.Report.Latency.P50))
			p99 = append(p99, float64(r.Report.Latency.P99))
			spans = append(spans, r.SpansPerSecond)
			cpu = append(cpu, float64(r.CPUPerRequest))
			sum.Errors += r.errors()
			if r.Pipeline != nil {
				accepted = append(accepted, r.Pipeline.AcceptedPerSecond)
				processed = append(processed, r.Pipeline.ProcessedPerSecond)
				flat = flat && r.Pipeline.Flat
			}
		}
		sum.Rate, sum.P50, sum.P99 = harness.Median(rates), time.Duration(harness.Median(p50)), time.Duration(harness.Median(p99))
		sum.CPUPerRequest = time.Duration(harness.Median(cpu))
		if s.off != "" {
			sum.SpansPerSecond = harness.Median(spans)
		}
		if s.pipeline {
			sum.AcceptedPerSecond, sum.ProcessedPerSecond, sum.Flat = harness.Median(accepted), harness.Median(processed), &flat
		}
		c.Servers = append(c.Servers, sum)
	}
	thin := c.server("thin").Rate
	for i, s := range c.Servers {
		if thin > 0 {
			c.Servers[i].Ratio = s.Rate / thin
		}
		if s.Off != "" {
			off := c.server(s.Off)
			if off.Rate > 0 {
				c.Servers[i].RatioToOff = s.Rate / off.Rate
			}
			if off.CPUPerRequest > 0 {
				c.Servers[i].CPURatioToOff = float64(s.CPUPerRequest) / float64(off.CPUPerRequest)
			}
		}
	}
}

func (c *comparison) server(name string) summary {
	i := slices.IndexFunc(c.Servers, func(s summary) bool { return s.Name == name })
	return c.Servers[i]
}

// The targets of the receiver against the thin durable receiver.
const (
	ingestTarget    = 0.9
	ingestP99Target = 10 * time.Millisecond
	allTarget       = 0.7
)

func (c *comparison) print(w io.Writer) error {
	fmt.Fprintf(w, "%d rounds of %v per server, %d connections, closed loop, 1 KiB GitHub-signed JSON; medians of the rounds\n",
		len(c.Rounds)/len(c.servers), c.Duration, c.Concurrency)
	fmt.Fprintf(w, "load average (/proc/loadavg) before: %s; after: %s\n\n", c.LoadBefore, c.LoadAfter)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "server\treq/s\tp50\tp99\terrors\tvs thin\tCPU per request")
	for _, s := range c.Servers {
		if s.Off != "" {
			continue
		}
		fmt.Fprintf(tw, "%s: %s\t%.0f\t%v\t%v\t%d\t%.2f\t%v\n", s.Name, s.Label, s.Rate,
			s.P50.Round(10*time.Microsecond), s.P99.Round(10*time.Microsecond), s.Errors, s.Ratio, s.CPUPerRequest.Round(100*time.Nanosecond))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	all, ingestS := c.server("all"), c.server("ingest")
	fmt.Fprintf(w, "\nevery role: accepted %.0f/s, processed %.0f/s, lag flat in every round: %v (req/s above: the sustained rate)\n",
		all.AcceptedPerSecond, all.ProcessedPerSecond, *all.Flat)
	fmt.Fprintf(w, "target --roles ingest >= %.1f of thin with p99 <= %v: %s (%.2f, p99 %v)\n", ingestTarget, ingestP99Target,
		met(ingestS.Ratio >= ingestTarget && ingestS.P99 <= ingestP99Target), ingestS.Ratio, ingestS.P99.Round(10*time.Microsecond))
	fmt.Fprintf(w, "target every role sustained, lag flat, >= %.1f of thin: %s (%.2f)\n", allTarget,
		met(*all.Flat && all.Ratio >= allTarget), all.Ratio)
	return c.printTraced(w)
}

// printTraced prints the traced servers against the same servers with
// tracing off, if any ran.
func (c *comparison) printTraced(w io.Writer) error {
	if !slices.ContainsFunc(c.Servers, func(s summary) bool { return s.Off != "" }) {
		return nil
	}
	fmt.Fprintln(w, "\ntracing: spans exported over OTLP/HTTP to a receiver in this process, against the same server with tracing off")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "server\treq/s\tp50\tp99\terrors\tvs off\tvs thin\tCPU per request\tCPU vs off\tspans/s received")
	for _, s := range c.Servers {
		if s.Off == "" {
			continue
		}
		fmt.Fprintf(tw, "%s: %s\t%.0f\t%v\t%v\t%d\t%.2f\t%.2f\t%v\t%.2f\t%.0f\n", s.Name, s.Label, s.Rate,
			s.P50.Round(10*time.Microsecond), s.P99.Round(10*time.Microsecond), s.Errors, s.RatioToOff, s.Ratio,
			s.CPUPerRequest.Round(100*time.Nanosecond), s.CPURatioToOff, s.SpansPerSecond)
	}
	return tw.Flush()
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}
