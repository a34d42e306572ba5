// Fanoutbench measures what a dispatcher costs as its subscriptions grow,
// in one command run from the repository root:
//
//	go run ./tools/fanoutbench [--subscriptions 10,100,1000] [--dispatchers 1,2] [--idle 10s]
//
// For each number of dispatchers and of subscriptions it starts, on the
// embedded broker, `hookstream run --roles ingest,processor` and that
// many `hookstream run --roles dispatcher` processes, creates the
// subscriptions (every one to one local sink, through the admin API),
// and measures each dispatcher:
//
//   - idle: once the dispatch group is stable and the dispatcher has
//     settled for --idle, its resident memory, its TCP connections to
//     the broker, its open file descriptors, and its CPU time over the
//     next --idle as a share of one core;
//   - under load: the dispatchers are stopped, --deliveries/N events (at
//     least 200) are POSTed and processed, and the dispatchers started
//     again deliver them to every subscription; deliveries per second
//     run from the first delivery the sink receives to the last, so
//     startup is not counted; each dispatcher's peak resident memory
//     (VmHWM), its most connections to the broker, and its share of the
//     deliveries (its hookstream_delivery_attempts_total).
//
// Every rate is also given against the rate with the fewest
// subscriptions and one dispatcher in the same run, the ceiling this
// design must keep. Only Linux (it reads /proc).
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
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

	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/internal/loadgen"
	"github.com/hookstream/hookstream/signature"
	"github.com/hookstream/hookstream/tools/internal/harness"
	"github.com/hookstream/hookstream/tools/internal/program"
	"github.com/hookstream/hookstream/topics"
)

// minEvents is the fewest events a load sends, whatever the subscriptions.
const minEvents = 200

type options struct {
	subscriptions []int
	dispatchers   []int
	idle          time.Duration
	deliveries    int
	rounds        int
	binary        string
	asJSON        bool
}

func main() {
	var (
		o         options
		subs, dis string
	)
	flag.StringVar(&subs, "subscriptions", "10,100,1000", "numbers of subscriptions, comma separated, each measured in turn")
	flag.StringVar(&dis, "dispatchers", "1,2", "numbers of dispatcher processes, comma separated, each measured with every number of subscriptions")
	flag.DurationVar(&o.idle, "idle", 10*time.Second, "how long a dispatcher settles before the idle figures, and how long its idle CPU is measured")
	flag.IntVar(&o.deliveries, "deliveries", 100_000, "deliveries of a load: events = deliveries / subscriptions, at least 200")
	flag.IntVar(&o.rounds, "rounds", 1, "rounds, each measuring every row in turn; the table gives the rates' medians and the other figures' worst")
	program.HookstreamVar(&o.binary)
	program.JSONVar(&o.asJSON)
	program.Main("fanoutbench", func(ctx context.Context) error {
		var err error
		if o.subscriptions, err = counts(subs); err == nil {
			o.dispatchers, err = counts(dis)
		}
		if err != nil || o.idle <= 0 || o.deliveries <= 0 || o.rounds < 1 {
			return program.Usage("--subscriptions and --dispatchers take positive counts; --idle, --deliveries and --rounds must be positive: %v", err)
		}
		return run(ctx, o)
	})
}

// counts reads a comma separated list of positive counts.
func counts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// Result is one run of the harness.
type Result struct {
	Machine    string `json:"machine"`
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
	// Rows of every round, in the order measured.
	Rows []Row `json:"rows"`
	// Summary has one row per number of subscriptions and dispatchers:
	// PerSecond and RatioToCeiling the medians over the rounds, each
	// dispatcher's figures the worst of the rounds.
	Summary []Row `json:"summary"`
}

// Row is one number of subscriptions on one number of dispatchers.
type Row struct {
	// Round is the row's round; in the summary, the rounds it sums up.
	Round         int `json:"round"`
	Subscriptions int `json:"subscriptions"`
	Dispatchers   int `json:"dispatchers"`
	Events        int `json:"events"`
	// Deliveries the sink received: Subscriptions × Events, and any
	// repeats (at least once).
	Deliveries int64         `json:"deliveries"`
	Elapsed    time.Duration `json:"elapsed"`
	PerSecond  float64       `json:"per_second"`
	// RatioToCeiling is PerSecond against its round's first row's (the
	// fewest subscriptions on the fewest dispatchers).
	RatioToCeiling float64      `json:"ratio_to_ceiling"`
	Processes      []Dispatcher `json:"dispatchers_measured"`
}

// Dispatcher is one dispatcher process's figures.
type Dispatcher struct {
	IdleRSS     int64   `json:"idle_rss_bytes"`
	IdleSockets int     `json:"idle_broker_connections"`
	IdleFDs     int     `json:"idle_fds"`
	IdleCPU     float64 `json:"idle_cpu_share_of_a_core"`
	PeakRSS     int64   `json:"peak_rss_bytes"`
	LoadSockets int     `json:"most_broker_connections_under_load"`
	// Share of the deliveries this dispatcher made.
	Share float64 `json:"share_of_deliveries"`
	// CPUPerDelivery is the CPU time (user and system) the dispatcher
	// used under load, from its start to the last delivery, per delivery
	// it made: steadier than the rate when other work shares the
	// machine.
	CPUPerDelivery time.Duration `json:"cpu_per_delivery"`
}

func run(ctx context.Context, o options) error {
	work, err := os.MkdirTemp("", "hookstream-fanoutbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	bin, err := harness.Hookstream(ctx, work, o.binary)
	if err != nil {
		return err
	}
	res := Result{Machine: machine(), LoadBefore: harness.LoadAverage()}
	for round := 1; round <= o.rounds; round++ {
		var first float64
		for _, d := range o.dispatchers {
			for _, n := range o.subscriptions {
				b := bench{o: o, bin: bin, subscriptions: n, dispatchers: d}
				row, err := b.measure(ctx, work)
				if err != nil {
					return fmt.Errorf("round %d, %d subscriptions on %d dispatchers: %w", round, n, d, err)
				}
				row.Round = round
				if first == 0 {
					first = row.PerSecond
				}
				if first > 0 {
					row.RatioToCeiling = row.PerSecond / first
				}
				fmt.Fprintf(os.Stderr, "round %d: %d subscriptions, %d dispatchers: %.0f deliveries/s (%.2f of the round's first row); load %s\n",
					round, n, d, row.PerSecond, row.RatioToCeiling, harness.LoadAverage())
				res.Rows = append(res.Rows, row)
			}
		}
	}
	res.LoadAfter = harness.LoadAverage()
	res.Summary = summarize(res.Rows)
	return program.Report(os.Stdout, o.asJSON, res, res.print)
}

// bench is one row being measured.
type bench struct {
	o                          options
	bin                        string
	subscriptions, dispatchers int

	dir, broker, httpAddr, adminAddr, secretKey, config string
	sink                                                *loadgen.Sink
	sinkURL, subscriberSecret                           string
}

func (b *bench) measure(ctx context.Context, work string) (Row, error) {
	row := Row{Subscriptions: b.subscriptions, Dispatchers: b.dispatchers, Events: max(minEvents, b.o.deliveries/b.subscriptions)}
	var err error
	if b.dir, err = os.MkdirTemp(work, fmt.Sprintf("s%d-d%d-", b.subscriptions, b.dispatchers)); err != nil {
		return row, err
	}
	if err := b.prepare(); err != nil {
		return row, err
	}
	pipeline, err := b.start("pipeline", "ingest,processor", b.adminAddr, map[string]string{
		"HOOKSTREAM_EMBEDDED_ADDR": b.broker, "HOOKSTREAM_HTTP_ADDR": b.httpAddr,
	})
	if err != nil {
		return row, err
	}
	defer harness.Terminate(pipeline)
	stopSink, err := b.serveSink()
	if err != nil {
		return row, err
	}
	defer stopSink()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.broker))
	if err != nil {
		return row, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := b.subscribe(ctx); err != nil {
		return row, err
	}

	// Idle.
	procs, err := b.startDispatchers(ctx, adm)
	if err != nil {
		return row, err
	}
	row.Processes = make([]Dispatcher, len(procs))
	stopAll := func() {
		for _, p := range procs {
			harness.Terminate(p.cmd)
		}
	}
	if err := sleep(ctx, b.o.idle); err != nil {
		stopAll()
		return row, err
	}
	cpu := make([]time.Duration, len(procs))
	for i, p := range procs {
		cpu[i] = harness.CPUTime(p.cmd.Process.Pid)
	}
	if err := sleep(ctx, b.o.idle); err != nil {
		stopAll()
		return row, err
	}
	for i, p := range procs {
		d := &row.Processes[i]
		pid := p.cmd.Process.Pid
		d.IdleCPU = float64(harness.CPUTime(pid)-cpu[i]) / float64(b.o.idle)
		m, err := harness.MemoryOf(pid)
		if err == nil {
			d.IdleRSS = m.RSS
			d.IdleSockets, d.IdleFDs, err = harness.Sockets(pid, port(b.broker))
		}
		if err != nil {
			stopAll()
			return row, err
		}
	}
	stopAll()

	// Under load.
	accepted, err := b.send(ctx, row.Events)
	if err != nil {
		return row, err
	}
	if _, err := harness.WaitDrained(ctx, adm, topics.NewNames("hookstream")); err != nil {
		return row, err
	}
	want := int64(b.subscriptions) * accepted
	before := b.sink.Deliveries()
	if procs, err = b.startDispatchers(ctx, adm); err != nil {
		return row, err
	}
	defer stopAll()
	var first, last time.Time
	deadline := time.Now().Add(10 * time.Minute)
	for tick := 0; ; tick++ {
		got := b.sink.Deliveries() - before
		now := time.Now()
		if got > 0 && first.IsZero() {
			first = now
		}
		if tick%50 == 0 { // every second
			for i, p := range procs {
				n, _, _ := harness.Sockets(p.cmd.Process.Pid, port(b.broker))
				row.Processes[i].LoadSockets = max(row.Processes[i].LoadSockets, n)
			}
		}
		if got >= want && b.sink.Missing() == 0 {
			last, row.Deliveries = now, got
			break
		}
		if now.After(deadline) {
			return row, fmt.Errorf("%d of %d deliveries within 10 minutes", got, want)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return row, err
		}
	}
	row.Elapsed = last.Sub(first)
	if row.Elapsed > 0 {
		row.PerSecond = float64(row.Deliveries) / row.Elapsed.Seconds()
	}
	var total float64
	made := make([]float64, len(procs))
	for i, p := range procs {
		m, err := harness.MemoryOf(p.cmd.Process.Pid)
		if err != nil {
			return row, err
		}
		row.Processes[i].PeakRSS = m.Peak
		cpu[i] = harness.CPUTime(p.cmd.Process.Pid)
		if made[i], err = deliveriesMade(ctx, p.admin); err != nil {
			return row, err
		}
		total += made[i]
	}
	for i := range procs {
		if total > 0 {
			row.Processes[i].Share = made[i] / total
		}
		if made[i] > 0 {
			row.Processes[i].CPUPerDelivery = time.Duration(float64(cpu[i]) / made[i])
		}
	}
	return row, nil
}

// prepare picks the addresses and keys and writes the sources file.
func (b *bench) prepare() error {
	for _, addr := range []*string{&b.broker, &b.httpAddr, &b.adminAddr} {
		var err error
		if *addr, err = harness.FreeAddr(); err != nil {
			return err
		}
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key) // crypto/rand never fails on Linux
	b.secretKey = base64.StdEncoding.EncodeToString(key)
	var err error
	b.config, err = harness.WriteSources(b.dir)
	return err
}

// process is a running hookstream process and its admin address.
type process struct {
	cmd   *exec.Cmd
	admin string
}

// start runs `hookstream run --roles roles` with its own data directory
// and admin address, and waits until it is ready.
func (b *bench) start(name, roles, adminAddr string, env map[string]string) (*exec.Cmd, error) {
	data, err := os.MkdirTemp(b.dir, name+"-")
	if err != nil {
		return nil, err
	}
	set := map[string]string{
		"HOOKSTREAM_CONFIG":                 b.config,
		"HOOKSTREAM_DATA_DIR":               data,
		"HOOKSTREAM_ADMIN_ADDR":             adminAddr,
		"HOOKSTREAM_SECRET_KEY":             b.secretKey,
		"HOOKSTREAM_LOG_LEVEL":              "error",
		"HOOKSTREAM_DELIVERY_ALLOW_PRIVATE": "true", // the sink listens on loopback
	}
	for k, v := range env {
		set[k] = v
	}
	log, err := os.Create(filepath.Join(data, "hookstream.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(b.bin, "run", "--roles", roles)
	cmd.Env, cmd.Stdout, cmd.Stderr = harness.Environ(set), log, log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if err := harness.WaitReady(context.Background(), adminAddr, 2*time.Minute); err != nil {
		harness.Terminate(cmd)
		out, _ := os.ReadFile(log.Name())
		return nil, fmt.Errorf("%s: %w\n%s", name, err, out)
	}
	return cmd, nil
}

// startDispatchers starts the dispatchers and waits until the dispatch
// group is stable with every one of them a member and every partition
// assigned.
func (b *bench) startDispatchers(ctx context.Context, adm *kadm.Client) ([]process, error) {
	var procs []process
	for i := range b.dispatchers {
		addr, err := harness.FreeAddr()
		if err != nil {
			return procs, err
		}
		cmd, err := b.start(fmt.Sprintf("dispatcher%d", i+1), "dispatcher", addr, map[string]string{"HOOKSTREAM_BROKERS": b.broker})
		if err != nil {
			for _, p := range procs {
				harness.Terminate(p.cmd)
			}
			return nil, err
		}
		procs = append(procs, process{cmd: cmd, admin: addr})
	}
	names := topics.NewNames("hookstream")
	for {
		if err := groups.WaitAssigned(ctx, adm, names.DispatchGroup(), names.Events, 2*time.Minute); err != nil {
			return procs, err
		}
		described, err := adm.DescribeGroups(ctx, string(names.DispatchGroup()))
		if err == nil && len(described[string(names.DispatchGroup())].Members) == b.dispatchers {
			return procs, nil
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return procs, err
		}
	}
}

// serveSink serves the sink every subscription delivers to.
func (b *bench) serveSink() (stop func(), err error) {
	b.subscriberSecret = signature.NewSecret()
	key, err := signature.DecodeSecret(b.subscriberSecret)
	if err != nil {
		return nil, err
	}
	b.sink = loadgen.NewSink()
	b.sink.Keys = [][]byte{key}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b.sinkURL = "http://" + ln.Addr().String() + "/"
	srv := &http.Server{Handler: b.sink, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }() // ends when Close below ends it
	return func() { _ = srv.Close() }, nil
}

// subscribe creates the subscriptions through the admin API, as a user
// would: each with the default max_in_flight (16).
func (b *bench) subscribe(ctx context.Context) error {
	for i := range b.subscriptions {
		body, _ := json.Marshal(map[string]any{
			"url": b.sinkURL, "secret": b.subscriberSecret, "from": "latest", // max_in_flight: the default
			"description": fmt.Sprintf("fanoutbench %d", i+1),
		})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+b.adminAddr+"/api/subscriptions", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		answer, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("creating subscription %d: %s: %s", i+1, resp.Status, answer)
		}
	}
	return nil
}

// send POSTs events webhooks and returns how many were accepted.
func (b *bench) send(ctx context.Context, events int) (int64, error) {
	const rate = 2000
	report, err := loadgen.Run(ctx, loadgen.Config{
		URL: "http://" + b.httpAddr + "/webhooks/" + harness.Source, Source: harness.Source, Rate: rate, Concurrency: 64,
		Duration: time.Duration(events) * time.Second / rate, BodySize: 1024, Scheme: "github", Secret: harness.Secret,
	}, http.DefaultClient, b.sink, nil)
	if err != nil {
		return 0, err
	}
	accepted := int64(report.Status[strconv.Itoa(http.StatusAccepted)])
	if accepted == 0 || report.Errors > 0 {
		return 0, fmt.Errorf("load: %d accepted, %d errors, status %v", accepted, report.Errors, report.Status)
	}
	return accepted, nil
}

// deliveriesMade reads the successful delivery attempts a dispatcher's
// /metrics reports, over every subscription.
func deliveriesMade(ctx context.Context, adminAddr string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+adminAddr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var total float64
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 64<<10), 1<<20)
	for lines.Scan() {
		line := lines.Text()
		if !strings.HasPrefix(line, "hookstream_delivery_attempts_total{") || !strings.Contains(line, `outcome="success"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("%s/metrics: %q: %w", adminAddr, line, err)
		}
		total += v
	}
	return total, lines.Err()
}

// summarize gives one row per number of subscriptions and dispatchers,
// in the order first measured: the rates' medians over the rounds, the
// other figures' worst.
func summarize(rows []Row) []Row {
	var out []Row
	for _, r := range rows {
		i := slices.IndexFunc(out, func(o Row) bool { return o.Subscriptions == r.Subscriptions && o.Dispatchers == r.Dispatchers })
		if i < 0 {
			out = append(out, Row{Subscriptions: r.Subscriptions, Dispatchers: r.Dispatchers, Events: r.Events,
				Processes: make([]Dispatcher, len(r.Processes))})
			i = len(out) - 1
		}
		s := &out[i]
		s.Round++
		s.Deliveries, s.Elapsed = s.Deliveries+r.Deliveries, s.Elapsed+r.Elapsed
		for j, p := range r.Processes {
			w := &s.Processes[j]
			w.IdleRSS, w.PeakRSS = max(w.IdleRSS, p.IdleRSS), max(w.PeakRSS, p.PeakRSS)
			w.IdleSockets, w.LoadSockets, w.IdleFDs = max(w.IdleSockets, p.IdleSockets), max(w.LoadSockets, p.LoadSockets), max(w.IdleFDs, p.IdleFDs)
			w.IdleCPU, w.Share = max(w.IdleCPU, p.IdleCPU), max(w.Share, p.Share)
			w.CPUPerDelivery = max(w.CPUPerDelivery, p.CPUPerDelivery)
		}
	}
	for i := range out {
		var rates, ratios []float64
		for _, r := range rows {
			if r.Subscriptions == out[i].Subscriptions && r.Dispatchers == out[i].Dispatchers {
				rates, ratios = append(rates, r.PerSecond), append(ratios, r.RatioToCeiling)
			}
		}
		out[i].PerSecond, out[i].RatioToCeiling = harness.Median(rates), harness.Median(ratios)
	}
	return out
}

func (r Result) print(w io.Writer) error {
	fmt.Fprintf(w, "machine: %s\nload average before: %s, after: %s\n\n", r.Machine, r.LoadBefore, r.LoadAfter)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "%d rounds: deliveries/s and the ratio are medians, the other figures the worst round's\n", r.Summary[0].Round)
	fmt.Fprintln(tw, "subscriptions\tdispatchers\tidle RSS\tpeak RSS\tbroker connections (idle/load)\tfds\tidle CPU\tCPU per delivery\tdeliveries\tdeliveries/s\tvs first row\tshare")
	for _, row := range r.Summary {
		for i, d := range row.Processes {
			lead := fmt.Sprintf("%d\t%d", row.Subscriptions, row.Dispatchers)
			rate := fmt.Sprintf("%d × %d\t%.0f\t%.2f", row.Subscriptions, row.Events, row.PerSecond, row.RatioToCeiling)
			if i > 0 {
				lead, rate = "\t", "\t\t"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d\t%.1f%%\t%v\t%s\t%.2f\n", lead, mib(d.IdleRSS), mib(d.PeakRSS), d.IdleSockets, d.LoadSockets,
				d.IdleFDs, 100*d.IdleCPU, d.CPUPerDelivery.Round(time.Microsecond), rate, d.Share)
		}
	}
	return tw.Flush()
}

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

// machine names the CPU and counts its cores and memory.
func machine() string {
	model, cores := "", 0
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			name, value, _ := strings.Cut(line, ":")
			switch strings.TrimSpace(name) {
			case "model name":
				model = strings.TrimSpace(value)
			case "processor":
				cores++
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if first, _, ok := strings.Cut(string(b), "\n"); ok {
			mem = strings.Join(strings.Fields(first)[1:], " ")
		}
	}
	return fmt.Sprintf("%d cores (%s), %s memory", cores, model, mem)
}

// port is the port of a host:port address.
func port(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

// sleep waits d or until ctx ends, and says which.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
