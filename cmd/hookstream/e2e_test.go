package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// The end-to-end tests run the hookstream binary as a user does: built
// once by TestMain, configured through its environment, spoken to over
// HTTP and Kafka, stopped with signals.

// hookstreamBin is the binary under test, built by TestMain.
var hookstreamBin string

func TestMain(m *testing.M) { os.Exit(buildAndRun(m)) }

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "hookstream-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	hookstreamBin = filepath.Join(dir, "hookstream")
	if out, err := exec.Command("go", "build", "-o", hookstreamBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go build: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// process is one running hookstream process.
type process struct {
	name   string
	cmd    *exec.Cmd
	output *syncBuffer   // stdout and stderr
	exited chan struct{} // closed once the process has been waited for
}

// startProcess starts the binary with args and env on top of this
// process's environment stripped of HOOKSTREAM_* variables. At cleanup the
// process is killed if still alive, and its output logged if the test
// failed.
func startProcess(t *testing.T, name string, env map[string]string, args ...string) *process {
	t.Helper()
	p := &process{name: name, output: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(hookstreamBin, args...)
	p.cmd.Env = environ(env)
	p.cmd.Stdout, p.cmd.Stderr = p.output, p.output
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait() // the exit status is read from ProcessState
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.kill(t)
		if t.Failed() {
			t.Logf("output of %s (%s):\n%s", p.name, p.state(), p.output)
		}
	})
	return p
}

func environ(env map[string]string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOOKSTREAM_") {
			out = append(out, kv)
		}
	}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// mustBeAlive fails the test at once if the process has exited.
func (p *process) mustBeAlive(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		t.Fatalf("%s exited unexpectedly: %s; its last lines:\n%s", p.name, p.state(), p.output.tail(5))
	default:
	}
}

// state describes the exit status, or says the process still runs.
func (p *process) state() string {
	select {
	case <-p.exited:
		return p.cmd.ProcessState.String()
	default:
		return "still running"
	}
}

// stop sends SIGTERM and returns the exit code; it fails the test if the
// process is still running after timeout.
func (p *process) stop(t *testing.T, timeout time.Duration) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM %s: %v", p.name, err)
	}
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("%s still running %v after SIGTERM", p.name, timeout)
		return -1
	}
}

// kill sends SIGKILL unless the process has exited, and waits for it.
func (p *process) kill(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Kill() // fails only if it exited meanwhile
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Errorf("%s still running 10s after SIGKILL", p.name)
	}
}

// syncBuffer is a bytes.Buffer safe for the process's output copier and
// the test to use at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tail returns the last n lines.
func (b *syncBuffer) tail(n int) string {
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// embedded is a `hookstream run` deployment on its embedded broker: the
// data directory and addresses stay the same across restarts.
type embedded struct {
	dataDir, brokerAddr, httpAddr, adminAddr string
	kafka                                    *kafkatest.Env
	// extra settings, beside the addresses and data directory.
	extra map[string]string
}

func newEmbedded(t *testing.T) *embedded {
	t.Helper()
	d := &embedded{dataDir: t.TempDir(), brokerAddr: kafkatest.FreeAddr(t), httpAddr: kafkatest.FreeAddr(t), adminAddr: kafkatest.FreeAddr(t)}
	d.kafka = &kafkatest.Env{Seeds: []string{d.brokerAddr}, Names: topics.NewNames("hookstream")}
	return d
}

func (d *embedded) env() map[string]string {
	env := map[string]string{
		"HOOKSTREAM_DATA_DIR":      d.dataDir,
		"HOOKSTREAM_EMBEDDED_ADDR": d.brokerAddr,
		"HOOKSTREAM_HTTP_ADDR":     d.httpAddr,
		"HOOKSTREAM_ADMIN_ADDR":    d.adminAddr,
	}
	maps.Copy(env, d.extra)
	return env
}

// run starts `hookstream run` and waits until /readyz answers 200.
func (d *embedded) run(t *testing.T, name string) *process {
	t.Helper()
	return d.runRoles(t, name, "ingest,processor,dispatcher")
}

// runRoles starts `hookstream run --roles roles` and waits until /readyz
// answers 200.
func (d *embedded) runRoles(t *testing.T, name, roles string) *process {
	t.Helper()
	p := startProcess(t, name, d.env(), "run", "--roles", roles)
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		p.mustBeAlive(t)
		status, body, err := httpGet("http://" + d.adminAddr + "/readyz")
		if err != nil {
			return err
		}
		if status != http.StatusOK {
			return fmt.Errorf("/readyz: got %d %s, want 200", status, body)
		}
		return nil
	})
	return p
}

// postGitHub posts a GitHub-style delivery to /webhooks/github.
func (d *embedded) postGitHub(t *testing.T, delivery, body string) (int, map[string]string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+d.httpAddr+"/webhooks/github", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Delivery", delivery)
	req.Header.Set("X-GitHub-Event", "push")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST /webhooks/github: %v", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST /webhooks/github: read body: %v", err)
	}
	var out map[string]string
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("POST /webhooks/github: body %q is not a JSON object of strings: %v", raw, err)
	}
	return resp.StatusCode, out
}

// mustAccept posts a delivery and checks the 202 answer.
func (d *embedded) mustAccept(t *testing.T, delivery, body string) {
	t.Helper()
	status, resp := d.postGitHub(t, delivery, body)
	if status != http.StatusAccepted || resp["status"] != "accepted" || resp["id"] != "github:"+delivery {
		t.Fatalf("POST delivery %s: got %d %v, want 202 with status accepted and id github:%s", delivery, status, resp, delivery)
	}
}

func httpGet(url string) (int, string, error) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw), err
}

// waitProcessed waits until the processor group has committed every record
// of the ingest topic (its lag is zero), failing at once if p dies.
func waitProcessed(t *testing.T, env *kafkatest.Env, p *process, timeout time.Duration) {
	t.Helper()
	cl := env.Client(t)
	lags := groups.New(env.ClusterOf(cl), subscriptions.NewRegistry(env.ClusterOf(cl), kafkatest.Logger(t)))
	topic := string(env.Names.Ingest)
	kafkatest.WaitFor(t, timeout, func() error {
		p.mustBeAlive(t)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// Lag skips the commit markers a caught-up group leaves ahead of
		// it: processors write operational events to the ingest topic in
		// their transactions.
		gl, err := lags.Lags(ctx, "processor")
		if err != nil {
			return err
		}
		var lag int64
		for _, g := range gl {
			for _, pl := range g.Partitions {
				if pl.Topic == topic {
					lag += pl.Lag
				}
			}
		}
		if lag > 0 {
			return fmt.Errorf("processor group: lag %d on %s", lag, topic)
		}
		return nil
	})
}

// countKeys counts the committed records of topic by key.
func countKeys(t *testing.T, env *kafkatest.Env, topic topics.Topic) map[string]int {
	t.Helper()
	out := make(map[string]int)
	for _, r := range env.Records(t, topic) {
		out[string(r.Key)]++
	}
	return out
}

// exactlyOnce checks that got holds each of want exactly once and nothing
// else, naming the first few offenders.
func exactlyOnce(t *testing.T, got map[string]int, want []string) {
	t.Helper()
	var bad []string
	wanted := make(map[string]bool, len(want))
	for _, k := range want {
		wanted[k] = true
		if got[k] != 1 {
			bad = append(bad, fmt.Sprintf("%s: %d records", k, got[k]))
		}
	}
	for k, n := range got {
		if !wanted[k] {
			bad = append(bad, fmt.Sprintf("%s: %d records, want none", k, n))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		t.Errorf("events: %d of %d keys not written exactly once (%d distinct keys seen), first offenders: %s",
			len(bad), len(want), len(got), strings.Join(bad[:min(len(bad), 10)], "; "))
	}
}

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(a, b []byte) bool {
	var va, vb any
	return json.Unmarshal(a, &va) == nil && json.Unmarshal(b, &vb) == nil && reflect.DeepEqual(va, vb)
}

// describedTopic is what a user reads in `topics describe --output json`.
type describedTopic struct {
	Topic      string `json:"topic"`
	Exists     bool   `json:"exists"`
	Partitions int    `json:"partitions"`
	// Offsets is end minus start summed over partitions: the record count
	// of a topic written without transactions, like ingest.
	Offsets int64 `json:"offsets"`
}

// TestRunEndToEnd follows one webhook through `hookstream run` on the
// embedded broker: accepted, durable in ingest, processed into events,
// visible to `topics describe`, and a clean SIGTERM shutdown.
func TestRunEndToEnd(t *testing.T) {
	t.Parallel()
	d := newEmbedded(t)
	p := d.run(t, "hookstream run")
	names := d.kafka.Names

	if status, body, err := httpGet("http://" + d.adminAddr + "/healthz"); err != nil || status != http.StatusOK {
		t.Errorf("/healthz: got %d %s (%v), want 200", status, body, err)
	}

	const delivery = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
	const key = "github:" + delivery
	body := `{"ref":"refs/heads/main","after":"abc123","repository":{"full_name":"octo/hello"}}`
	status, resp := d.postGitHub(t, delivery, body)
	if status != http.StatusAccepted {
		t.Fatalf("POST /webhooks/github: got %d %v, want 202", status, resp)
	}
	if resp["status"] != "accepted" || resp["id"] != key {
		t.Errorf("POST /webhooks/github: got status %q id %q, want accepted and %s", resp["status"], resp["id"], key)
	}

	// 202 means durable: the record is in ingest already.
	recs := d.kafka.Records(t, names.Ingest)
	if len(recs) != 1 {
		t.Fatalf("%s: got %d records, want 1", names.Ingest, len(recs))
	}
	if got := string(recs[0].Key); got != key {
		t.Errorf("ingest key: got %q, want %q", got, key)
	}
	if got := string(recs[0].Value); got != body {
		t.Errorf("ingest value: got %q, want the raw body %q", got, body)
	}
	if h := kafkatest.Headers(recs[0]); h[topics.HeaderSource] != "github" || h[topics.HeaderEventID] != delivery {
		t.Errorf("ingest headers: got %s=%q %s=%q, want github and %s",
			topics.HeaderSource, h[topics.HeaderSource], topics.HeaderEventID, h[topics.HeaderEventID], delivery)
	}

	waitProcessed(t, d.kafka, p, 30*time.Second)
	events := d.kafka.Records(t, names.Events)
	if len(events) != 1 || string(events[0].Key) != key {
		var keys []string
		for _, r := range events {
			keys = append(keys, string(r.Key))
		}
		t.Fatalf("%s: got keys %v, want exactly [%s]", names.Events, keys, key)
	}
	var env struct {
		ID      string          `json:"id"`
		Source  string          `json:"source"`
		EventID string          `json:"event_id"`
		Data    json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(events[0].Value, &env); err != nil {
		t.Fatalf("envelope %s is not JSON: %v", events[0].Value, err)
	}
	if env.ID != key || env.Source != "github" || env.EventID != delivery {
		t.Errorf("envelope: got id %q source %q event_id %q, want %s, github, %s", env.ID, env.Source, env.EventID, key, delivery)
	}
	if !jsonEqual(env.Data, []byte(body)) {
		t.Errorf("envelope data: got %s, want %s", env.Data, body)
	}

	// The CLI finds the running broker through HOOKSTREAM_EMBEDDED_ADDR.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	describe := exec.CommandContext(ctx, hookstreamBin, "topics", "describe", "--output", "json")
	describe.Env = environ(map[string]string{"HOOKSTREAM_EMBEDDED_ADDR": d.brokerAddr})
	var stderr bytes.Buffer
	describe.Stderr = &stderr
	out, err := describe.Output()
	if err != nil {
		t.Fatalf("hookstream topics describe: %v\n%s", err, stderr.String())
	}
	var infos []describedTopic
	if err := json.Unmarshal(out, &infos); err != nil {
		t.Fatalf("topics describe --output json: %v\n%s", err, out)
	}
	i := slices.IndexFunc(infos, func(ti describedTopic) bool { return ti.Topic == string(names.Ingest) })
	if i < 0 {
		t.Fatalf("topics describe: got %s, want a %s entry", out, names.Ingest)
	}
	if got := infos[i]; !got.Exists || got.Partitions != 12 || got.Offsets != 1 {
		t.Errorf("topics describe %s: got %+v, want it to exist with 12 partitions and 1 offset (its record)", names.Ingest, got)
	}

	if code := p.stop(t, 20*time.Second); code != 0 {
		t.Errorf("exit code after SIGTERM: got %d, want 0", code)
	}
	log := p.output.String()
	if !strings.Contains(log, "hookstream stopped") {
		t.Errorf("log after SIGTERM: got no %q line", "hookstream stopped")
	}
	// Started without HOOKSTREAM_SECRET_KEY, it says secrets are stored as is.
	if want := "subscriber secrets are stored unencrypted"; !strings.Contains(log, want) {
		t.Errorf("log without HOOKSTREAM_SECRET_KEY: got no %q warning", want)
	}
}

// TestRunKeepsRecordsAcrossRestart stops `hookstream run` with SIGTERM and
// starts it again on the same data directory: the embedded broker kept
// what it acknowledged, ingest accepts again, and the processor's dedup
// state survived (a provider retry of an old event is not re-emitted).
func TestRunKeepsRecordsAcrossRestart(t *testing.T) {
	t.Parallel()
	d := newEmbedded(t)
	names := d.kafka.Names
	first := d.run(t, "first hookstream run")
	want := []string{"github:restart-1", "github:restart-2", "github:restart-3"}
	for i, k := range want {
		d.mustAccept(t, strings.TrimPrefix(k, "github:"), fmt.Sprintf(`{"n":%d}`, i))
	}
	waitProcessed(t, d.kafka, first, 30*time.Second)
	if code := first.stop(t, 20*time.Second); code != 0 {
		t.Fatalf("first run: exit code after SIGTERM: got %d, want 0", code)
	}

	second := d.run(t, "second hookstream run")
	keys := func() []string {
		var out []string
		for k := range countKeys(t, d.kafka, names.Ingest) {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	if got := keys(); !slices.Equal(got, want) {
		t.Fatalf("%s after restart: got keys %v, want %v", names.Ingest, got, want)
	}
	d.mustAccept(t, "restart-4", `{"n":4}`)
	want = append(want, "github:restart-4")
	if got := keys(); !slices.Equal(got, want) {
		t.Errorf("%s after a new POST: got keys %v, want %v", names.Ingest, got, want)
	}
	// A provider retry of an event accepted before the restart.
	if status, resp := d.postGitHub(t, "restart-1", `{"n":0}`); status/100 != 2 {
		t.Errorf("retry of restart-1: got %d %v, want a 2xx", status, resp)
	}
	waitProcessed(t, d.kafka, second, 30*time.Second)
	exactlyOnce(t, countKeys(t, d.kafka, names.Events), want)
	if code := second.stop(t, 20*time.Second); code != 0 {
		t.Errorf("second run: exit code after SIGTERM: got %d, want 0", code)
	}
}

// processedRecords sums hookstream_processor_records_total over outcomes
// from the process's /metrics.
func processedRecords(adminAddr string) (float64, error) {
	return metricSum(adminAddr, "hookstream_processor_records_total")
}

// metricSum sums metric name over its labels from the process's /metrics.
func metricSum(adminAddr, name string) (float64, error) {
	status, body, err := httpGet("http://" + adminAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	if status != http.StatusOK {
		return 0, fmt.Errorf("/metrics: got %d, want 200", status)
	}
	var sum float64
	for line := range strings.Lines(body) {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("/metrics: %q: %w", line, err)
		}
		sum += v
	}
	return sum, nil
}

// TestProcessorSurvivesSIGKILL is the exactly-once proof with real process
// kills: a stream of events with duplicates is produced to ingest while a
// `hookstream run --roles processor` process is killed with SIGKILL at a
// random moment after it starts processing, three times, once with its
// data directory deleted before the restart (state rebuilt from the
// changelog). In the end the events topic holds every distinct event
// exactly once.
//
// The restarted process has the same instance id (its data directory is
// the same), so it takes the dead member's place in the group at once.
func TestProcessorSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	const (
		partitions = 6
		distinct   = 3000
		kills      = 3
		perRound   = distinct / (kills + 1)
		batch      = 50
	)
	env := kafkatest.New(t, partitions, 1<<20)
	producer := env.Client(t, kgo.ProducerLinger(5*time.Millisecond))
	dataDir := filepath.Join(t.TempDir(), "data")
	adminAddr := kafkatest.FreeAddr(t)
	procEnv := map[string]string{
		"HOOKSTREAM_BROKERS":      strings.Join(env.Seeds, ","),
		"HOOKSTREAM_TOPIC_PREFIX": env.Names.Prefix,
		"HOOKSTREAM_PARTITIONS":   strconv.Itoa(partitions),
		"HOOKSTREAM_DATA_DIR":     dataDir,
		"HOOKSTREAM_ADMIN_ADDR":   adminAddr,
		"HOOKSTREAM_HTTP_ADDR":    kafkatest.FreeAddr(t), // unused by the processor role
	}

	// produceRound writes ids [from, to) in batches, each id followed with
	// probability 1/4 by a duplicate of an earlier id (earlier rounds
	// included), and returns how many records it wrote.
	produceRound := func(from, to int) (int, error) {
		sent := 0
		for i := from; i < to; i += batch {
			var recs []*kgo.Record
			for j := i; j < min(i+batch, to); j++ {
				recs = append(recs, kafkatest.IngestRecord(env.Names, "shop", fmt.Sprintf("e%d", j), fmt.Sprintf(`{"n":%d}`, j)))
				if rand.IntN(4) == 0 {
					dup := rand.IntN(j + 1)
					recs = append(recs, kafkatest.IngestRecord(env.Names, "shop", fmt.Sprintf("e%d", dup), fmt.Sprintf(`{"n":%d,"retry":true}`, dup)))
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := producer.ProduceSync(ctx, recs...).FirstErr()
			cancel()
			if err != nil {
				return sent, fmt.Errorf("produce: %w", err)
			}
			sent += len(recs)
			time.Sleep(30 * time.Millisecond) // pace the stream
		}
		return sent, nil
	}

	var proc *process
	var wg sync.WaitGroup
	defer wg.Wait() // a failed test still lets the producer finish
	sent := 0
	for round := range kills + 1 {
		if round == 2 {
			if err := os.RemoveAll(dataDir); err != nil {
				t.Fatalf("delete the data directory: %v", err)
			}
		}
		proc = startProcess(t, fmt.Sprintf("processor %d", round), procEnv, "run", "--roles", "processor")
		started := time.Now()

		var n int
		var produceErr error
		wg.Go(func() { n, produceErr = produceRound(round*perRound, (round+1)*perRound) })

		if round < kills {
			// Kill at a random moment once this process processes records.
			kafkatest.WaitFor(t, 90*time.Second, func() error {
				proc.mustBeAlive(t)
				got, err := processedRecords(adminAddr)
				if err != nil {
					return err
				}
				if got == 0 {
					return errors.New("processor has processed no record yet")
				}
				return nil
			})
			assigned := time.Since(started)
			time.Sleep(time.Duration(rand.IntN(600)) * time.Millisecond) // a random moment to kill it at: the point of the test
			done, _ := processedRecords(adminAddr)
			proc.kill(t)
			t.Logf("processor %d: processing %v after start, killed after %.0f records", round, assigned.Round(time.Millisecond), done)
		}
		wg.Wait()
		if produceErr != nil {
			t.Fatal(produceErr)
		}
		sent += n
	}
	t.Logf("produced %d records for %d distinct events", sent, distinct)

	waitProcessed(t, env, proc, 2*time.Minute)
	want := make([]string, distinct)
	for i := range want {
		want[i] = fmt.Sprintf("shop:e%d", i)
	}
	exactlyOnce(t, countKeys(t, env, env.Names.Events), want)
	if dlq := env.Records(t, env.Names.DLQ); len(dlq) != 0 {
		t.Errorf("%s: got %d records, want none", env.Names.DLQ, len(dlq))
	}
	if code := proc.stop(t, 20*time.Second); code != 0 {
		t.Errorf("last processor: exit code after SIGTERM: got %d, want 0", code)
	}
}
