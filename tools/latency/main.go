// Latency measures hookstream's end-to-end latency on a Kafka cluster, stage
// by stage, in one command run from the repository root:
//
//	go run ./tools/latency --brokers HOST:PORT,... [--rates 200,5000] [--duration 20s] [--rounds 1]
//
// It builds hookstream (or takes --hookstream), then for each round and
// rate starts `hookstream run` (every role) on the cluster under a topic
// prefix of its own, warms it up with `hookstream bench --sink`, and runs
// the measured `hookstream bench --sink` at the rate: the bench's ack and
// end-to-end percentiles cover every event. The stages come from the
// spans hookstream exports to an OTLP receiver the harness runs, a share
// of the events sampled (--traced per second at most):
//
//   - ack: the receiver's span, from the POST to Kafka's acknowledgement;
//   - received→processed: from the POST to the start of its processing;
//   - processed→committed: the processing span, which ends with its
//     transaction's commit (from then on visible to read_committed);
//   - committed→delivered: to the end of the sink's 2xx answer;
//   - end to end: from the POST to the delivery, over the traced events.
//
// After each measurement it measures the ceiling at the same rate (see
// Ceiling; --ceiling=false skips it): the bare exactly-once pipeline on
// the same cluster, a Kafka producer, a transactional copy and a
// read_committed consumer, and prints hookstream's end to end against it.
//
// It prints each measurement and, per rate, the medians over the rounds,
// then deletes the topics it created.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
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

	"github.com/hookstream/hookstream/internal/loadgen"
	"github.com/hookstream/hookstream/tools/internal/harness"
	"github.com/hookstream/hookstream/tools/internal/program"
)

type options struct {
	brokers   string
	rates     []float64
	duration  time.Duration
	warmUp    time.Duration
	rounds    int
	traced    float64
	binary    string
	prefix    string
	keepTopic bool
	asJSON    bool
	ceiling   bool
}

func main() {
	var (
		o     options
		rates string
	)
	flag.StringVar(&o.brokers, "brokers", "", "Kafka seed brokers, comma separated (required)")
	flag.StringVar(&rates, "rates", "200,5000", "events per second, comma separated, each measured in turn")
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "measured load per rate and round")
	flag.DurationVar(&o.warmUp, "warm-up", 5*time.Second, "unmeasured load before each measured one")
	flag.IntVar(&o.rounds, "rounds", 1, "rounds; the summary is the median of the rounds")
	flag.Float64Var(&o.traced, "traced", 100, "events traced per second at most (the sample the stages come from)")
	program.HookstreamVar(&o.binary)
	flag.StringVar(&o.prefix, "prefix", "", "topic prefix (default: latency-<unix time>, its topics deleted at the end)")
	program.JSONVar(&o.asJSON)
	flag.BoolVar(&o.ceiling, "ceiling", true, "after each measurement, measure the bare exactly-once pipeline at the same rate (Ceiling)")
	program.Main("latency", func(ctx context.Context) error {
		for _, r := range strings.Split(rates, ",") {
			v, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
			if err != nil || v <= 0 {
				return program.Usage("--rates: %q is not a positive rate", r)
			}
			o.rates = append(o.rates, v)
		}
		if o.brokers == "" || o.rounds < 1 || o.duration <= 0 || o.traced <= 0 {
			return program.Usage("--brokers is required; --rounds, --duration and --traced must be positive")
		}
		if o.prefix == "" {
			o.prefix = fmt.Sprintf("latency-%d", time.Now().Unix())
			o.keepTopic = false
		} else {
			o.keepTopic = true
		}
		return run(ctx, o)
	})
}

func run(ctx context.Context, o options) error {
	work, err := os.MkdirTemp("", "hookstream-latency-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	bin, err := harness.Hookstream(ctx, work, o.binary)
	if err != nil {
		return err
	}
	config, err := harness.WriteSources(work)
	if err != nil {
		return err
	}
	spans, err := newReceiver()
	if err != nil {
		return err
	}
	defer spans.close()
	if !o.keepTopic {
		defer deleteTopics(o.brokers, o.prefix)
	}
	res := result{Brokers: o.brokers, Duration: o.duration, LoadBefore: harness.LoadAverage()}
	for round := 1; round <= o.rounds; round++ {
		for _, rate := range o.rates {
			m, err := measure(ctx, o, bin, work, config, spans, rate)
			if err != nil {
				return fmt.Errorf("round %d, %.0f/s: %w", round, rate, err)
			}
			m.Round = round
			if o.ceiling {
				c, err := ceiling(ctx, strings.Split(o.brokers, ","), fmt.Sprintf("%s-c%d-%.0f", o.prefix, round, rate), rate, o.warmUp, o.duration)
				if err != nil {
					return fmt.Errorf("round %d, %.0f/s, the bare pipeline: %w", round, rate, err)
				}
				m.Ceiling = &c
			}
			fmt.Fprintf(os.Stderr, "round %d  %5.0f/s  %s\n", round, rate, m.line())
			res.Measurements = append(res.Measurements, m)
		}
	}
	res.LoadAfter = harness.LoadAverage()
	res.summarize(o.rates)
	return program.Report(os.Stdout, o.asJSON, res, res.print)
}

// measure runs hookstream on the cluster, warms it up and measures one rate.
func measure(ctx context.Context, o options, bin, work, config string, spans *receiver, rate float64) (Measurement, error) {
	var addrs [3]string
	for i := range addrs {
		var err error
		if addrs[i], err = harness.FreeAddr(); err != nil {
			return Measurement{}, err
		}
	}
	httpAddr, adminAddr, sinkAddr := addrs[0], addrs[1], addrs[2]
	dataDir, err := os.MkdirTemp(work, "data-")
	if err != nil {
		return Measurement{}, err
	}
	env := harness.Environ(map[string]string{
		"HOOKSTREAM_BROKERS":      o.brokers,
		"HOOKSTREAM_TOPIC_PREFIX": o.prefix,
		"HOOKSTREAM_CONFIG":       config,
		"HOOKSTREAM_DATA_DIR":     dataDir,
		"HOOKSTREAM_HTTP_ADDR":    httpAddr,
		"HOOKSTREAM_ADMIN_ADDR":   adminAddr,
		"HOOKSTREAM_LOG_LEVEL":    "error",
		// The sink listens on loopback.
		"HOOKSTREAM_DELIVERY_ALLOW_PRIVATE": "true",
		"OTEL_EXPORTER_OTLP_ENDPOINT":       spans.url,
		"OTEL_TRACES_SAMPLER":               "parentbased_traceidratio",
		"OTEL_TRACES_SAMPLER_ARG":           strconv.FormatFloat(min(1, o.traced/rate), 'f', -1, 64),
		"OTEL_BSP_SCHEDULE_DELAY":           "100",
		"OTEL_BSP_MAX_QUEUE_SIZE":           "65536",
	})
	logFile, err := os.Create(filepath.Join(work, "hookstream.log"))
	if err != nil {
		return Measurement{}, err
	}
	defer logFile.Close()
	srv := exec.Command(bin, "run")
	srv.Env, srv.Stdout, srv.Stderr = env, logFile, logFile
	if err := srv.Start(); err != nil {
		return Measurement{}, err
	}
	defer harness.Terminate(srv)

	bench := func(d time.Duration, out io.Writer) error {
		cmd := exec.CommandContext(ctx, bin, "bench", "--target", "http://"+httpAddr, "--source", harness.Source, "--scheme", "github",
			"--secret", harness.Secret, "--rate", strconv.FormatFloat(rate, 'f', -1, 64), "--concurrency", "256", "--duration", d.String(),
			"--sink", sinkAddr, "--output", "json")
		var stderr strings.Builder
		cmd.Env, cmd.Stdout, cmd.Stderr = env, out, &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("bench: %w: %s", err, lastLine(stderr.String()))
		}
		return nil
	}
	if err := harness.WaitReady(ctx, adminAddr, 120*time.Second); err != nil {
		b, _ := os.ReadFile(logFile.Name())
		return Measurement{}, fmt.Errorf("%w\n%s", err, lastLine(string(b)))
	}
	if err := bench(o.warmUp, io.Discard); err != nil {
		return Measurement{}, fmt.Errorf("warm-up %w", err)
	}
	start := time.Now()
	var out strings.Builder
	if err := bench(o.duration, &out); err != nil {
		return Measurement{}, err
	}
	m := Measurement{Rate: rate, SampleRatio: min(1, o.traced/rate)}
	if err := json.Unmarshal([]byte(out.String()), &m.Bench); err != nil {
		return Measurement{}, fmt.Errorf("bench output %q: %w", out.String(), err)
	}
	spans.settle(ctx)
	m.Stages = stagesOf(spans.since(start))
	return m, nil
}

// Measurement is one rate measured once.
type Measurement struct {
	Round       int            `json:"round"`
	Rate        float64        `json:"rate"`
	SampleRatio float64        `json:"sample_ratio"`
	Bench       loadgen.Report `json:"bench"`
	Stages      Stages         `json:"stages"`
	// Ceiling is the bare exactly-once pipeline at the same rate, right
	// after.
	Ceiling *Ceiling `json:"ceiling,omitempty"`
}

// sustained reports whether the pipeline kept up: every request answered
// without error, at the rate asked, and every event delivered.
func (m Measurement) sustained() bool {
	b := m.Bench
	return b.Errors == 0 && b.Completed == b.Sent && b.PerSecond >= 0.95*m.Rate && b.EndToEnd != nil && b.Undelivered == 0
}

func (m Measurement) line() string {
	e2e := loadgen.Percentiles{}
	if m.Bench.EndToEnd != nil {
		e2e = *m.Bench.EndToEnd
	}
	line := fmt.Sprintf("%.0f req/s, %d errors, %d undelivered, ack p50/p99 %s/%s, end to end p50/p99 %s/%s (n=%d); traced %d: %s",
		m.Bench.PerSecond, m.Bench.Errors, m.Bench.Undelivered, ms(m.Bench.Latency.P50), ms(m.Bench.Latency.P99),
		ms(e2e.P50), ms(e2e.P99), e2e.Count, m.Stages.Traced, m.Stages.String())
	if c := m.Ceiling; c != nil {
		line += fmt.Sprintf("; bare pipeline (n=%d): ack %s/%s, end to end %s/%s", c.Events, ms(c.Ack.P50), ms(c.Ack.P99),
			ms(c.EndToEnd.P50), ms(c.EndToEnd.P99))
	}
	return line
}

// Stage is one stage's percentiles over the traced events.
type Stage struct {
	Name string        `json:"name"`
	P50  time.Duration `json:"p50"`
	P99  time.Duration `json:"p99"`
}

// Stages are the stages of the traced events.
type Stages struct {
	Traced int     `json:"traced"`
	Stages []Stage `json:"stages"`
}

func (s Stages) String() string {
	var b strings.Builder
	for _, st := range s.Stages {
		fmt.Fprintf(&b, "%s %s/%s  ", st.Name, ms(st.P50), ms(st.P99))
	}
	return strings.TrimSpace(b.String())
}

// stageNames in order; each is a span's time (stagesOf).
var stageNames = []string{"ack", "received→processed", "processed→committed", "committed→delivered", "end to end"}

// stagesOf are the stages of the traces that have all three spans: the
// receiver's (server), the processing's (consumer; the committed one, the
// last to end) and the delivery's (client; the first to succeed).
func stagesOf(spans []span) Stages {
	type trace struct{ recv, proc, deliv *span }
	traces := map[string]*trace{}
	for i := range spans {
		s := &spans[i]
		t := traces[s.traceID]
		if t == nil {
			t = &trace{}
			traces[s.traceID] = t
		}
		switch s.kind {
		case kindServer:
			t.recv = s
		case kindConsumer:
			if s.ok && (t.proc == nil || s.end > t.proc.end) {
				t.proc = s
			}
		case kindClient:
			if s.ok && (t.deliv == nil || s.end < t.deliv.end) {
				t.deliv = s
			}
		}
	}
	samples := make([][]float64, len(stageNames))
	n := 0
	for _, t := range traces {
		if t.recv == nil || t.proc == nil || t.deliv == nil {
			continue
		}
		n++
		for i, d := range []uint64{t.recv.end - t.recv.start, t.proc.start - t.recv.start, t.proc.end - t.proc.start,
			t.deliv.end - t.proc.end, t.deliv.end - t.recv.start} {
			samples[i] = append(samples[i], float64(int64(d)))
		}
	}
	out := Stages{Traced: n}
	for i, name := range stageNames {
		out.Stages = append(out.Stages, Stage{Name: name, P50: time.Duration(quantile(samples[i], 0.5)), P99: time.Duration(quantile(samples[i], 0.99))})
	}
	return out
}

// quantile of xs (nearest rank); 0 for none.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Sorted(slices.Values(xs))
	i := int(q*float64(len(xs))+0.5) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// result is a whole run.
type result struct {
	Brokers      string        `json:"brokers"`
	Duration     time.Duration `json:"duration"`
	LoadBefore   string        `json:"loadavg_before"`
	LoadAfter    string        `json:"loadavg_after"`
	Measurements []Measurement `json:"measurements"`
	Summary      []summary     `json:"summary"`
}

// summary is one rate's medians over the rounds.
type summary struct {
	Rate      float64 `json:"rate"`
	Rounds    int     `json:"rounds"`
	Sustained int     `json:"rounds_sustained"`
	PerSecond float64 `json:"requests_per_second"`
	// Rows: the client's ack and end to end over every event, then the
	// stages of the traced events.
	Rows []Stage `json:"rows"`
	// ToCeiling50 and ToCeiling99 are the medians over the rounds of the
	// end to end (client, every event) against the bare pipeline's of the
	// same round, at p50 and p99.
	ToCeiling50 float64 `json:"to_ceiling_p50,omitempty"`
	ToCeiling99 float64 `json:"to_ceiling_p99,omitempty"`
}

func (r *result) summarize(rates []float64) {
	for _, rate := range rates {
		s := summary{Rate: rate}
		rows := map[string][2][]float64{}
		add := func(name string, p50, p99 time.Duration) {
			v := rows[name]
			v[0], v[1] = append(v[0], float64(p50)), append(v[1], float64(p99))
			rows[name] = v
		}
		var perSecond, to50, to99 []float64
		for _, m := range r.Measurements {
			if m.Rate != rate {
				continue
			}
			if e, c := m.Bench.EndToEnd, m.Ceiling; e != nil && c != nil && c.EndToEnd.P50 > 0 && c.EndToEnd.P99 > 0 {
				to50 = append(to50, float64(e.P50)/float64(c.EndToEnd.P50))
				to99 = append(to99, float64(e.P99)/float64(c.EndToEnd.P99))
			}
			s.Rounds++
			if m.sustained() {
				s.Sustained++
			}
			perSecond = append(perSecond, m.Bench.PerSecond)
			add("ack (client, every event)", m.Bench.Latency.P50, m.Bench.Latency.P99)
			if e := m.Bench.EndToEnd; e != nil {
				add("end to end (client, every event)", e.P50, e.P99)
			}
			for _, st := range m.Stages.Stages {
				add(st.Name, st.P50, st.P99)
			}
			if c := m.Ceiling; c != nil {
				add(c.Ack.Name, c.Ack.P50, c.Ack.P99)
				add(c.EndToEnd.Name, c.EndToEnd.P50, c.EndToEnd.P99)
			}
		}
		s.PerSecond = quantile(perSecond, 0.5)
		s.ToCeiling50, s.ToCeiling99 = harness.Median(to50), harness.Median(to99)
		for _, name := range append(append([]string{"ack (client, every event)", "end to end (client, every event)"}, stageNames...), "ceiling ack", "ceiling end to end") {
			if v, ok := rows[name]; ok {
				s.Rows = append(s.Rows, Stage{Name: name, P50: time.Duration(harness.Median(v[0])), P99: time.Duration(harness.Median(v[1]))})
			}
		}
		r.Summary = append(r.Summary, s)
	}
}

func (r *result) print(w io.Writer) error {
	fmt.Fprintf(w, "cluster %s; %v per rate and round; load average (/proc/loadavg) before: %s; after: %s\n",
		r.Brokers, r.Duration, r.LoadBefore, r.LoadAfter)
	for _, s := range r.Summary {
		fmt.Fprintf(w, "\n%.0f events/s: %.0f req/s, sustained in %d of %d rounds; medians of the rounds\n", s.Rate, s.PerSecond, s.Sustained, s.Rounds)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "stage\tp50\tp99\t")
		for _, row := range s.Rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t\n", row.Name, ms(row.P50), ms(row.P99))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if s.ToCeiling50 > 0 {
			fmt.Fprintf(w, "end to end against the bare pipeline's of the same round (median of the rounds): p50 %.2f×, p99 %.2f×\n",
				s.ToCeiling50, s.ToCeiling99)
		}
	}
	return nil
}

// ms is d in milliseconds, one decimal.
func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}

// deleteTopics deletes the topics of prefix.
func deleteTopics(brokers, prefix string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	listed, err := adm.ListTopics(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "latency: list topics to delete:", err)
		return
	}
	var names []string
	for _, t := range listed.Names() {
		if strings.HasPrefix(t, prefix+"-") || strings.HasPrefix(t, prefix+".") {
			names = append(names, t)
		}
	}
	if _, err := adm.DeleteTopics(ctx, names...); err != nil {
		fmt.Fprintln(os.Stderr, "latency: delete topics:", err)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
