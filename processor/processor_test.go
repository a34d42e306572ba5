package processor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/processor"
	"github.com/hookstream/hookstream/statestore"
	"github.com/hookstream/hookstream/topics"
)

const maxBody = 64 << 10

func ingestRecord(env *kafkatest.Env, source, id, body string) *kgo.Record {
	return kafkatest.IngestRecord(env.Names, source, id, body)
}

func produce(t *testing.T, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// instance is one running processor.
type instance struct {
	p       *processor.Processor
	cancel  context.CancelFunc
	done    chan error
	reg     *prometheus.Registry
	stopped sync.Once
}

type options struct {
	name     string // transactional id suffix
	stateDir string
	ttl      time.Duration
	// sweepInterval defaults to 200ms; sweepChunk to the processor's.
	sweepInterval time.Duration
	sweepChunk    int
	// sessionTimeout defaults to 6s; the rebalance timeout is 10s, or the
	// session timeout when that is longer.
	sessionTimeout time.Duration
	// opts are more client options (hooks).
	opts []kgo.Opt
	// log defaults to kafkatest.Logger.
	log *slog.Logger
	// store tunes the state stores (their file system).
	store statestore.Options
}

func start(t *testing.T, env *kafkatest.Env, o options) *instance {
	t.Helper()
	reg := prometheus.NewRegistry()
	if o.sweepInterval == 0 {
		o.sweepInterval = 200 * time.Millisecond
	}
	if o.sessionTimeout == 0 {
		o.sessionTimeout = 6 * time.Second
	}
	if o.log == nil {
		o.log = kafkatest.Logger(t)
	}
	p := processor.New(processor.Config{
		Names:           env.Names,
		StateDir:        o.stateDir,
		TTL:             o.ttl,
		SweepInterval:   o.sweepInterval,
		SweepChunk:      o.sweepChunk,
		MaxRecordBytes:  topics.MaxRecordBytes(maxBody),
		TransactionalID: env.Names.Prefix + "-processor-" + o.name,
		SessionTimeout:  o.sessionTimeout,
		Store:           o.store,
	}, append([]kgo.Opt{
		kgo.SeedBrokers(env.Seeds...),
		kgo.WithLogger(kslog.New(kafkatest.Logger(t))),
		kgo.RebalanceTimeout(max(10*time.Second, o.sessionTimeout)),
	}, o.opts...), o.log, reg)
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{p: p, cancel: cancel, done: make(chan error, 1), reg: reg}
	go func() { in.done <- p.Run(ctx) }()
	t.Cleanup(func() { in.stop(t) })
	return in
}

// stop cancels the processor and waits for Run; it may be called twice.
func (in *instance) stop(t *testing.T) {
	t.Helper()
	in.stopped.Do(func() {
		in.cancel()
		select {
		case err := <-in.done:
			if err != nil {
				t.Errorf("processor Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("processor did not stop within 30s")
		}
	})
}

// count reads the processor's records counter of one outcome.
func (in *instance) count(outcome string) int {
	return int(in.metric("hookstream_processor_records_total", "outcome", outcome))
}

// metric sums the series of a counter or gauge whose label has value (any
// series when label is empty).
func (in *instance) metric(name, label, value string) float64 {
	mfs, err := in.reg.Gather()
	if err != nil {
		return -1
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				match = match || (l.GetName() == label && l.GetValue() == value)
			}
			if match {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// events counts the committed events records per key.
// events counts the events records by key, operational events left out.
func events(t *testing.T, env *kafkatest.Env) map[string]int {
	t.Helper()
	out := make(map[string]int)
	for _, r := range env.Records(t, env.Names.Events) {
		if source, _ := topics.EventSourceType(r); source == topics.OperationalSource {
			continue
		}
		out[string(r.Key)]++
	}
	return out
}

// waitEvents waits until the events topic holds want distinct keys.
func waitEvents(t *testing.T, env *kafkatest.Env, want int, timeout time.Duration) map[string]int {
	t.Helper()
	var got map[string]int
	kafkatest.WaitFor(t, timeout, func() error {
		got = events(t, env)
		if len(got) < want {
			return fmt.Errorf("events: %d distinct keys, want %d", len(got), want)
		}
		return nil
	})
	return got
}

// exactlyOnce checks that each of n keys appears exactly times times.
func exactlyOnce(t *testing.T, got map[string]int, n, times int) {
	t.Helper()
	if len(got) != n {
		t.Errorf("distinct events: got %d, want %d", len(got), n)
	}
	bad := 0
	for k, c := range got {
		if c != times {
			if bad < 5 {
				t.Errorf("event %s: got %d records, want %d", k, c, times)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d events were not written exactly %d times", bad, len(got), times)
	}
}

func TestEnvelope(t *testing.T) {
	env := kafkatest.New(t, 2, maxBody)
	cl := env.Client(t)
	form := ingestRecord(env, "slack", "f1", "payload=%7B%22a%22%3A1%7D&tag=x&tag=y")
	form.Headers[4].Value = []byte("application/x-www-form-urlencoded")
	produce(t, cl, ingestRecord(env, "shop", "j1", `{"id":"j1","total":12.5}`), form)
	start(t, env, options{name: "a", stateDir: t.TempDir()})
	waitEvents(t, env, 2, 30*time.Second)

	for _, r := range env.Records(t, env.Names.Events) {
		var e map[string]any
		if err := json.Unmarshal(r.Value, &e); err != nil {
			t.Fatalf("envelope is not JSON: %v", err)
		}
		switch string(r.Key) {
		case "shop:j1":
			want := map[string]any{"id": "shop:j1", "source": "shop", "event_id": "j1", "type": "order.created",
				"content_type": "application/json", "headers": map[string]any{"x-shop": "s1"},
				"data": map[string]any{"id": "j1", "total": 12.5}}
			for k, v := range want {
				if fmt.Sprint(e[k]) != fmt.Sprint(v) {
					t.Errorf("json envelope %s: got %v, want %v", k, e[k], v)
				}
			}
			for _, k := range []string{"received_at", "processed_at"} {
				if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(e[k])); err != nil {
					t.Errorf("json envelope %s: got %v, want an RFC 3339 time", k, e[k])
				}
			}
		case "slack:f1":
			if e["data"] != nil || e["data_base64"] == nil {
				t.Errorf("form envelope: got data %v data_base64 %v, want only data_base64", e["data"], e["data_base64"])
			}
			if got := fmt.Sprint(e["form"]); got != `map[payload:{"a":1} tag:[x y]]` {
				t.Errorf("form envelope form: got %s, want payload and tag decoded", got)
			}
		default:
			t.Errorf("unexpected event %s", r.Key)
		}
	}
}

func TestExactlyOnceUnderDuplicates(t *testing.T) {
	env := kafkatest.New(t, 6, maxBody)
	cl := env.Client(t, kgo.ProducerLinger(5*time.Millisecond))
	const distinct = 5000
	a := start(t, env, options{name: "a", stateDir: t.TempDir()})
	b := start(t, env, options{name: "b", stateDir: t.TempDir()})

	// 30% of the sends repeat an earlier id; some repeats come in
	// concurrent bursts of the same id.
	var sent int
	var wg sync.WaitGroup
	var batch []*kgo.Record
	flush := func() {
		recs := batch
		batch = nil
		wg.Go(func() { produce(t, cl, recs...) })
	}
	for i := range distinct {
		batch = append(batch, ingestRecord(env, "shop", fmt.Sprintf("e%d", i), fmt.Sprintf(`{"n":%d}`, i)))
		sent++
		if i%10 < 3 {
			dup := rand.IntN(i + 1)
			burst := 1 + rand.IntN(3)
			for range burst {
				batch = append(batch, ingestRecord(env, "shop", fmt.Sprintf("e%d", dup), `{"dup":true}`))
				sent++
			}
		}
		if len(batch) >= 200 {
			flush()
		}
	}
	flush()
	wg.Wait()

	got := waitEvents(t, env, distinct, 2*time.Minute)
	exactlyOnce(t, got, distinct, 1)
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		dups := a.count("duplicate") + b.count("duplicate")
		if dups != sent-distinct {
			return fmt.Errorf("duplicates counted: got %d, want %d", dups, sent-distinct)
		}
		return nil
	})
}

// TestCrashSafety stops processors at random moments, mid-batch included,
// while a stream is produced; the events topic ends with every distinct
// event exactly once.
func TestCrashSafety(t *testing.T) {
	env := kafkatest.New(t, 4, maxBody)
	cl := env.Client(t, kgo.ProducerLinger(5*time.Millisecond))
	dir := t.TempDir()
	const distinct = 3000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < distinct; i += 100 {
			var recs []*kgo.Record
			for j := i; j < i+100; j++ {
				recs = append(recs, ingestRecord(env, "shop", fmt.Sprintf("e%d", j), `{}`))
				if j%4 == 0 {
					recs = append(recs, ingestRecord(env, "shop", fmt.Sprintf("e%d", j/2), `{}`))
				}
			}
			produce(t, cl, recs...)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	for round := range 4 {
		in := start(t, env, options{name: "crashy", stateDir: dir})
		time.Sleep(time.Duration(300+rand.IntN(700)) * time.Millisecond) // a random moment to stop at: the point of the test
		in.stop(t)
		if round == 2 {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
		}
	}
	<-done
	start(t, env, options{name: "crashy", stateDir: dir})
	got := waitEvents(t, env, distinct, 2*time.Minute)
	exactlyOnce(t, got, distinct, 1)
}

func TestRebalance(t *testing.T) {
	env := kafkatest.New(t, 6, maxBody)
	cl := env.Client(t, kgo.ProducerLinger(5*time.Millisecond))
	const distinct = 3000
	produceRange := func(from, to int) {
		var recs []*kgo.Record
		for i := from; i < to; i++ {
			recs = append(recs, ingestRecord(env, "shop", fmt.Sprintf("e%d", i), `{}`), ingestRecord(env, "shop", fmt.Sprintf("e%d", i/3), `{}`))
		}
		produce(t, cl, recs...)
	}
	a := start(t, env, options{name: "a", stateDir: t.TempDir()})
	produceRange(0, 1000)
	b := start(t, env, options{name: "b", stateDir: t.TempDir()})
	produceRange(1000, 2000)
	c := start(t, env, options{name: "c", stateDir: t.TempDir()})
	waitEvents(t, env, 2000, time.Minute)
	a.stop(t)
	produceRange(2000, distinct)
	got := waitEvents(t, env, distinct, 2*time.Minute)
	exactlyOnce(t, got, distinct, 1)

	// A rebalance aborts at most the transaction in flight when an
	// instance's partitions are revoked, in each of the (up to two, with
	// cooperative assignment) rounds of a membership change it saw while
	// running (a: b and c join, and its own leaving; b: c joins, a leaves;
	// c: a leaves).
	// On Kafka 4 (transactions v2) the first write of the transaction after
	// such an abort can be answered CONCURRENT_TRANSACTIONS while the abort
	// markers are written, and the writes pipelined behind it
	// OUT_OF_ORDER_SEQUENCE_NUMBER, which the broker logs; the client
	// resends them in order: no further abort and no new session.
	for _, in := range []struct {
		name    string
		in      *instance
		changes int
	}{{"a", a, 3}, {"b", b, 2}, {"c", c, 1}} {
		if n := in.in.metric("hookstream_processor_transactions_total", "result", "aborted"); n > float64(2*in.changes) {
			t.Errorf("instance %s: got %v aborted transactions, want at most %d (two rounds for each of the %d rebalances it saw)", in.name, n, 2*in.changes, in.changes)
		}
		if n := in.in.metric("hookstream_processor_session_restarts_total", "", ""); n != 0 {
			t.Errorf("instance %s: got %v session restarts, want 0", in.name, n)
		}
	}
}

func TestRebuildAndReplay(t *testing.T) {
	env := kafkatest.New(t, 3, maxBody)
	cl := env.Client(t)
	dir := t.TempDir()
	const distinct = 300
	var recs []*kgo.Record
	for i := range distinct {
		recs = append(recs, ingestRecord(env, "shop", fmt.Sprintf("e%d", i), `{}`))
	}
	// Duplicates in the range replayed later.
	recs = append(recs, ingestRecord(env, "shop", "e0", `{}`), ingestRecord(env, "shop", "e1", `{}`))
	produce(t, cl, recs...)
	in := start(t, env, options{name: "a", stateDir: dir})
	waitEvents(t, env, distinct, time.Minute)
	in.stop(t)

	t.Run("rebuild", func(t *testing.T) {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		in := start(t, env, options{name: "a", stateDir: dir})
		produce(t, cl, ingestRecord(env, "shop", "e5", `{}`), ingestRecord(env, "shop", "new", `{}`))
		got := waitEvents(t, env, distinct+1, time.Minute)
		in.stop(t)
		if got["shop:e5"] != 1 || got["shop:new"] != 1 {
			t.Errorf("after deleting the state: got e5 %d times and new %d times, want 1 and 1", got["shop:e5"], got["shop:new"])
		}
		if _, err := os.Stat(filepath.Join(dir)); err != nil {
			t.Errorf("state directory not recreated: %v", err)
		}
	})

	t.Run("replay", func(t *testing.T) {
		for replay := 1; replay <= 2; replay++ {
			env.ReplayProcessor(t)
			in := start(t, env, options{name: "a", stateDir: dir})
			kafkatest.WaitFor(t, time.Minute, func() error {
				if n := in.count("replayed"); n < distinct+1 {
					return fmt.Errorf("replay %d: replayed %d, want %d", replay, n, distinct+1)
				}
				return nil
			})
			in.stop(t)
			got := events(t, env)
			exactlyOnce(t, got, distinct+1, replay+1)
			if n := in.count("duplicate"); n != 3 {
				t.Errorf("duplicates dropped in replay %d: got %d, want 3 (e0, e1 and the second e5)", replay, n)
			}
			checkReplayMarks(t, env)
		}
	})
}

// checkReplayMarks checks that the n-th events record of each key, in
// its partition's order, carries the replay mark n-1 in its hs-replay
// header and its envelope, and the first none.
func checkReplayMarks(t *testing.T, env *kafkatest.Env) {
	t.Helper()
	seen := make(map[string]int)
	bad := 0
	for _, r := range env.Records(t, env.Names.Events) {
		want := seen[string(r.Key)]
		seen[string(r.Key)]++
		e, err := topics.ParseEnvelope(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		header, wantHeader := kafkatest.Headers(r)[topics.HeaderReplay], ""
		if want > 0 {
			wantHeader = fmt.Sprint(want)
		}
		if e.Replay != want || header != wantHeader {
			if bad < 5 {
				t.Errorf("%s emission %d: got replay %d and %s=%q, want %d and %q", r.Key, want+1, e.Replay, topics.HeaderReplay, header, want, wantHeader)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d events records with a wrong replay mark", bad)
	}
}

func TestFailedEventsGoToDLQAndHeal(t *testing.T) {
	env := kafkatest.New(t, 2, maxBody)
	cl := env.Client(t)
	bad := ingestRecord(env, "shop", "x1", `{}`)
	bad.Headers = bad.Headers[:1] // no hs-event-id: cannot be decoded
	produce(t, cl, bad)
	in := start(t, env, options{name: "a", stateDir: t.TempDir()})

	var dlq []*kgo.Record
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if dlq = env.Records(t, env.Names.DLQ); len(dlq) != 1 {
			return fmt.Errorf("dlq: %d records", len(dlq))
		}
		return nil
	})
	h := map[string]string{}
	for _, hd := range dlq[0].Headers {
		h[hd.Key] = string(hd.Value)
	}
	if string(dlq[0].Key) != "shop:x1" || string(dlq[0].Value) != `{}` {
		t.Errorf("dlq record: got %s=%s, want the original key and value", dlq[0].Key, dlq[0].Value)
	}
	if h[topics.HeaderErrorStage] != "decode" || !strings.Contains(h[topics.HeaderError], "hs-event-id is missing") ||
		h[topics.HeaderOrigTopic] != string(env.Names.Ingest) || h[topics.HeaderOrigOffset] != "0" ||
		h[topics.HeaderOrigPartition] == "" || h[topics.HeaderFailedAt] == "" || h[topics.HeaderSource] != "shop" {
		t.Errorf("dlq headers: got %v", h)
	}
	if n := in.count("failed"); n != 1 {
		t.Errorf("failed: got %d, want 1", n)
	}

	produce(t, cl, ingestRecord(env, "shop", "x1", `{"fixed":true}`))
	got := waitEvents(t, env, 1, 30*time.Second)
	if got["shop:x1"] != 1 {
		t.Errorf("redelivered event: got %v, want shop:x1 once", got)
	}
}

func TestTTLExpiry(t *testing.T) {
	env := kafkatest.New(t, 1, maxBody)
	cl := env.Client(t)
	in := start(t, env, options{name: "a", stateDir: t.TempDir(), ttl: time.Second})
	produce(t, cl, ingestRecord(env, "shop", "t1", `{}`))
	waitEvents(t, env, 1, 30*time.Second)
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		for _, r := range env.Records(t, env.Names.Changelog) {
			if string(r.Key) == "shop:t1" && r.Value == nil {
				return nil
			}
		}
		return fmt.Errorf("no tombstone for shop:t1 in the changelog")
	})
	produce(t, cl, ingestRecord(env, "shop", "t1", `{}`))
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if n := events(t, env)["shop:t1"]; n != 2 {
			return fmt.Errorf("shop:t1 written %d times, want 2 (accepted again after expiry)", n)
		}
		return nil
	})
	if n := in.count("processed"); n != 2 {
		t.Errorf("processed: got %d, want 2", n)
	}
}

// TestStoreFailureStopsPartition: while a partition's store cannot be
// opened (another holder has it locked) the partition stays paused, with
// the error logged and exported and nothing processed; once the store is
// free the partition restores and every event is processed exactly once. A
// corrupt store is rebuilt from the changelog.
func TestStoreFailureStopsPartition(t *testing.T) {
	env := kafkatest.New(t, 1, maxBody)
	cl := env.Client(t)
	dir := t.TempDir()
	var recs []*kgo.Record
	for i := range 20 {
		recs = append(recs, ingestRecord(env, "shop", fmt.Sprintf("e%d", i), `{}`))
	}
	produce(t, cl, recs[:10]...)
	first := start(t, env, options{name: "a", stateDir: dir})
	waitEvents(t, env, 10, 30*time.Second)
	first.stop(t)

	holder, err := statestore.Open(dir, 0, statestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	in := start(t, env, options{name: "a", stateDir: dir})
	produce(t, cl, recs[10:]...)
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if n := in.metric("hookstream_processor_store_errors_total", "", ""); n < 1 {
			return fmt.Errorf("store errors: %v", n)
		}
		if n := in.metric("hookstream_processor_partitions_restoring", "", ""); n != 1 {
			return fmt.Errorf("partitions restoring: %v, want 1 (stopped)", n)
		}
		return nil
	})
	if n := len(events(t, env)); n != 10 {
		t.Errorf("while the store failed: %d events, want the 10 from before", n)
	}
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	got := waitEvents(t, env, 20, time.Minute)
	exactlyOnce(t, got, 20, 1)
	in.stop(t)

	// Garbage in the store's files: rebuilt from the changelog, and the
	// ids it held are still duplicates.
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), "MANIFEST") {
			err = os.WriteFile(path, []byte("garbage"), 0o600)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, env, options{name: "a", stateDir: dir})
	produce(t, cl, ingestRecord(env, "shop", "e3", `{}`), ingestRecord(env, "shop", "e20", `{}`))
	got = waitEvents(t, env, 21, time.Minute)
	exactlyOnce(t, got, 21, 1)
}

// restartable is an embedded broker, with persistence, that a test stops
// and starts again on the same address and data.
type restartable struct {
	t         *testing.T
	dir, addr string
	env       *kafkatest.Env
}

// newRestartable starts nothing: start starts the broker, the first time
// with hookstream's topics under prefix.
func newRestartable(t *testing.T, prefix string) *restartable {
	return &restartable{t: t, dir: t.TempDir(), addr: kafkatest.FreeAddr(t),
		env: &kafkatest.Env{Names: topics.NewNames(prefix)}}
}

func (r *restartable) start() *topics.Embedded {
	r.t.Helper()
	b, err := topics.StartEmbedded(r.dir, r.addr, kafkatest.Logger(r.t))
	if err != nil {
		r.t.Fatal(err)
	}
	if r.env.Seeds == nil {
		r.env.Seeds = []string{r.addr}
		r.env.Ensure(r.t, 2, maxBody)
	}
	return b
}

// produceRange writes the ingest records of events e<from> to e<to-1>.
func (r *restartable) produceRange(from, to int) {
	r.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.addr))
	if err != nil {
		r.t.Fatal(err)
	}
	defer cl.Close()
	produceEvents(r.t, r.env, cl, from, to)
}

// TestBrokerRestart: the broker goes away mid-stream and comes back; the
// processor starts a new session and every event is written exactly once.
func TestBrokerRestart(t *testing.T) {
	if kafkatest.Real() {
		t.Skip("stops and restarts the in-process broker")
	}
	b := newRestartable(t, "restart")
	env, broker := b.env, b.start()
	b.produceRange(0, 100)
	// The processor's clients log this once they find the broker gone.
	outage := &signalLogger{Logger: kslog.New(kafkatest.Logger(t)), msg: "unable to open connection to broker", seen: make(chan struct{})}
	start(t, env, options{name: "a", stateDir: t.TempDir(), opts: []kgo.Opt{kgo.WithLogger(outage)}})
	waitEvents(t, env, 100, 30*time.Second)

	broker.Close()
	select { // the session notices the outage
	case <-outage.seen:
	case <-time.After(30 * time.Second):
		t.Fatal("the processor did not notice the broker was gone")
	}
	broker = b.start()
	defer broker.Close()
	b.produceRange(100, 200)
	got := waitEvents(t, env, 200, time.Minute)
	exactlyOnce(t, got, 200, 1)
}

// batchWritten calls f after each batch the client writes (kgo calls
// hooks on a goroutine of their own: f does not hold up the client).
type batchWritten func(topic string)

func (f batchWritten) OnProduceBatchWritten(_ kgo.BrokerMetadata, topic string, _ int32, _ kgo.ProduceBatchMetrics) {
	f(topic)
}

// TestBrokerOutagePastTransactionTimeout: the broker stops in the middle
// of a transaction and comes back after the transaction timeout, which
// aborts that transaction under the processor; the processor notices,
// starts a new session, and every event is still written exactly once.
func TestBrokerOutagePastTransactionTimeout(t *testing.T) {
	if kafkatest.Real() {
		t.Skip("stops and restarts the in-process broker")
	}
	b := newRestartable(t, "txnabort")
	env, broker := b.env, b.start()
	b.produceRange(0, 100)
	// The broker stops as soon as the first events batch written after
	// arming is acknowledged: the transaction is open then, unless the
	// rest of it was quicker than the stop.
	var armed atomic.Bool
	midTxn := make(chan struct{})
	var once sync.Once
	const sessionTimeout = 6 * time.Second // the transaction timeout too
	start(t, env, options{name: "a", stateDir: t.TempDir(), sessionTimeout: sessionTimeout, opts: []kgo.Opt{
		kgo.WithHooks(batchWritten(func(topic string) {
			if topic == string(env.Names.Events) && armed.Load() {
				once.Do(func() { close(midTxn) })
			}
		})),
	}})
	waitEvents(t, env, 100, 30*time.Second)

	armed.Store(true)
	b.produceRange(100, 200)
	<-midTxn
	broker.Close()
	time.Sleep(sessionTimeout * 3 / 2) // the outage outlasts the transaction timeout
	broker = b.start()
	defer broker.Close()
	b.produceRange(200, 300)
	got := waitEvents(t, env, 300, time.Minute)
	exactlyOnce(t, got, 300, 1)
}

// signalLogger is the test's kgo logger, which also closes a channel the
// first time the client logs msg (at info level or above).
type signalLogger struct {
	kgo.Logger
	msg  string
	once sync.Once
	seen chan struct{}
}

func (l *signalLogger) Level() kgo.LogLevel { return kgo.LogLevelInfo }

func (l *signalLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	if msg == l.msg {
		l.once.Do(func() { close(l.seen) })
	}
	l.Logger.Log(level, msg, keyvals...)
}

// TestMembershipLostMidTransaction: the group coordinator answers a
// heartbeat with UNKNOWN_MEMBER_ID while a transaction is open (as after a
// session expiry or a coordinator move), so the client's group management
// fails and waits for the poll to allow a rebalance, while the end of the
// transaction waits for a heartbeat that no longer comes. The processor
// gives the transaction up at its timeout and starts a new session; every
// event is written exactly once.
func TestMembershipLostMidTransaction(t *testing.T) {
	env := kafkatest.New(t, 2, maxBody)
	if env.Cluster == nil {
		t.Skip("injects a broker error into the in-process broker")
	}
	cl := env.Client(t)
	heartbeatFailed := &signalLogger{Logger: kslog.New(kafkatest.Logger(t)), msg: "heartbeat errored", seen: make(chan struct{})}
	in := start(t, env, options{name: "a", stateDir: t.TempDir(), opts: []kgo.Opt{kgo.WithLogger(heartbeatFailed)}})
	produceEvents(t, env, cl, 0, 25)
	waitEvents(t, env, 25, 30*time.Second)

	// Once armed, the processor's next write is held (its transaction
	// open) until the heartbeat has failed.
	var armed atomic.Bool
	midTxn, release := make(chan struct{}), make(chan struct{})
	var held, failed sync.Once
	t.Cleanup(func() { held.Do(func() {}); failed.Do(func() {}) })
	env.Cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		env.Cluster.KeepControl()
		r := req.(*kmsg.ProduceRequest)
		if armed.Load() && r.TransactionID != nil {
			held.Do(func() {
				close(midTxn)
				env.Cluster.SleepControl(func() { <-release })
			})
		}
		return nil, nil, false
	})
	env.Cluster.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		env.Cluster.KeepControl()
		r := req.(*kmsg.HeartbeatRequest)
		resp := r.ResponseKind().(*kmsg.HeartbeatResponse)
		fail := false
		select {
		case <-midTxn:
			failed.Do(func() {
				resp.ErrorCode = kerr.UnknownMemberID.Code
				fail = true
			})
		default:
		}
		return resp, nil, fail
	})
	armed.Store(true)
	produceEvents(t, env, cl, 25, 50)
	<-midTxn
	<-heartbeatFailed.seen
	close(release)
	got := waitEvents(t, env, 50, time.Minute)
	exactlyOnce(t, got, 50, 1)
	if n := in.metric("hookstream_processor_session_restarts_total", "", ""); n < 1 {
		t.Errorf("session restarts: got %v, want at least 1", n)
	}
}

// TestStopEndsTheTransactionInHand: a processor stopped while its
// transaction waits for the broker ends that transaction before it exits,
// rather than leaving it open (holding read_committed readers of the
// partitions it wrote) until the broker times it out.
func TestStopEndsTheTransactionInHand(t *testing.T) {
	env := kafkatest.New(t, 2, maxBody)
	if env.Cluster == nil {
		t.Skip("holds a write in the in-process broker")
	}
	cl := env.Client(t)
	in := start(t, env, options{name: "a", stateDir: t.TempDir()})
	produceEvents(t, env, cl, 0, 10)
	waitEvents(t, env, 10, 30*time.Second)

	var armed atomic.Bool
	midTxn, release := make(chan struct{}), make(chan struct{})
	var held sync.Once
	t.Cleanup(func() { held.Do(func() {}) })
	env.Cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		env.Cluster.KeepControl()
		if armed.Load() && req.(*kmsg.ProduceRequest).TransactionID != nil {
			held.Do(func() {
				close(midTxn)
				env.Cluster.SleepControl(func() { <-release })
			})
		}
		return nil, nil, false
	})
	armed.Store(true)
	produceEvents(t, env, cl, 10, 20)
	<-midTxn
	in.cancel()
	close(release)
	in.stop(t)

	adm := env.Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, topic := range []topics.Topic{env.Names.Events, env.Names.Changelog} {
		ends, err := adm.ListEndOffsets(ctx, string(topic))
		if err != nil {
			t.Fatal(err)
		}
		stable, err := adm.ListCommittedOffsets(ctx, string(topic))
		if err != nil {
			t.Fatal(err)
		}
		ends.Each(func(o kadm.ListedOffset) {
			if s, _ := stable.Lookup(o.Topic, o.Partition); s.Offset != o.Offset {
				t.Errorf("%s/%d after the stop: last stable offset %d, end %d: a transaction was left open", o.Topic, o.Partition, s.Offset, o.Offset)
			}
		})
	}
}

// restarts records the retry_in of each session restart the processor
// logs, and passes every record on.
type restarts struct {
	slog.Handler
	mu    *sync.Mutex
	waits *[]string
}

func (h restarts) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "processor session failed; starting a new one" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "retry_in" {
				h.mu.Lock()
				*h.waits = append(*h.waits, a.Value.String())
				h.mu.Unlock()
			}
			return true
		})
	}
	return h.Handler.Handle(ctx, r)
}

func (h restarts) WithAttrs(as []slog.Attr) slog.Handler {
	h.Handler = h.Handler.WithAttrs(as)
	return h
}

// TestRestartAfterAWorkingSessionIsPrompt: sessions that fail one after
// the other back off longer each time, but a session that worked
// (committed transactions) before it failed is followed by a new one
// after the first, shortest wait, not after its predecessors' longest.
func TestRestartAfterAWorkingSessionIsPrompt(t *testing.T) {
	env := kafkatest.New(t, 2, maxBody)
	if env.Cluster == nil {
		t.Skip("injects broker errors into the in-process broker")
	}
	// The first two sessions cannot start: their producer is refused.
	var refused atomic.Int32
	env.Cluster.ControlKey(int16(kmsg.InitProducerID), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.InitProducerIDRequest)
		if r.TransactionalID == nil || refused.Add(1) > 2 {
			env.Cluster.KeepControl()
			return nil, nil, false
		}
		env.Cluster.KeepControl()
		resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return resp, nil, true
	})
	var mu sync.Mutex
	var waits []string
	log := slog.New(restarts{Handler: kafkatest.Logger(t).Handler(), mu: &mu, waits: &waits})
	cl := env.Client(t)
	start(t, env, options{name: "a", stateDir: t.TempDir(), log: log})
	produceEvents(t, env, cl, 0, 10)
	waitEvents(t, env, 10, 30*time.Second)

	// The working session's commit fails: it was fenced.
	env.Cluster.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		resp := req.(*kmsg.EndTxnRequest).ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.ProducerFenced.Code
		return resp, nil, true
	})
	produceEvents(t, env, cl, 10, 20)
	exactlyOnce(t, waitEvents(t, env, 20, 30*time.Second), 20, 1)
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"1s", "2s", "1s"}; fmt.Sprint(waits) != fmt.Sprint(want) {
		t.Errorf("waits before each new session: got %v, want %v", waits, want)
	}
}

// TestSessionRestartsAfterFailedCommit: the broker answers one EndTxn with
// a fatal error (the producer was fenced); the processor starts a new
// session, which aborts the open transaction, and every event is still
// written exactly once.
func TestSessionRestartsAfterFailedCommit(t *testing.T) {
	env := kafkatest.New(t, 2, maxBody)
	if env.Cluster == nil {
		t.Skip("injects a broker error into the in-process broker")
	}
	cl := env.Client(t)
	var recs []*kgo.Record
	for i := range 50 {
		recs = append(recs, ingestRecord(env, "shop", fmt.Sprintf("e%d", i), `{}`))
	}
	produce(t, cl, recs[:25]...)
	in := start(t, env, options{name: "a", stateDir: t.TempDir()})
	waitEvents(t, env, 25, 30*time.Second)

	env.Cluster.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		resp := req.(*kmsg.EndTxnRequest).ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.ProducerFenced.Code
		return resp, nil, true
	})
	produce(t, cl, recs[25:]...)
	got := waitEvents(t, env, 50, time.Minute)
	exactlyOnce(t, got, 50, 1)
	if n := in.metric("hookstream_processor_session_restarts_total", "", ""); n < 1 {
		t.Errorf("session restarts: got %v, want at least 1", n)
	}
}

// TestUnconfirmedCommitRestartsTheSession: the broker commits a
// transaction but answers its EndTxn with UNKNOWN_SERVER_ERROR, so the
// processor cannot know that it committed (kgo reports "not committed, no
// error"). Taking it for an abort would rewind to the offsets before it and
// emit its events again from stores that lack its changes; instead the
// processor starts a new session, which reads the group's committed offsets
// and restores the stores from the changelog, and every event is written
// exactly once.
func TestUnconfirmedCommitRestartsTheSession(t *testing.T) {
	env := kafkatest.New(t, 2, maxBody)
	if env.Cluster == nil {
		t.Skip("injects a broker error into the in-process broker")
	}
	cl := env.Client(t)
	in := start(t, env, options{name: "a", stateDir: t.TempDir()})
	produceEvents(t, env, cl, 0, 25)
	waitEvents(t, env, 25, 30*time.Second)

	// Once armed, the processor's next commit is carried out by a copy of
	// its EndTxn, sent while the original waits, and the original is
	// answered UNKNOWN_SERVER_ERROR.
	var armed, copied atomic.Bool
	committed := make(chan error, 1)
	env.Cluster.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		env.Cluster.KeepControl()
		r := req.(*kmsg.EndTxnRequest)
		if copied.Load() || !r.Commit || !armed.CompareAndSwap(true, false) {
			return nil, nil, false
		}
		copied.Store(true)
		env.Cluster.SleepControl(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c := *r
			resp, err := c.RequestWith(ctx, cl)
			if err == nil {
				err = kerr.ErrorForCode(resp.ErrorCode)
			}
			committed <- err
		})
		copied.Store(false)
		env.Cluster.DropControl()
		resp := r.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.UnknownServerError.Code
		return resp, nil, true
	})
	armed.Store(true)
	produceEvents(t, env, cl, 25, 50)
	if err := <-committed; err != nil {
		t.Fatalf("committing the processor's transaction: %v", err)
	}
	waitEvents(t, env, 50, time.Minute)
	// Records produced after the unconfirmed commit come after its batch
	// in every partition: once they are all written, so is any second
	// emission of that batch.
	produceEvents(t, env, cl, 50, 80)
	exactlyOnce(t, waitEvents(t, env, 80, time.Minute), 80, 1)
	if n := in.metric("hookstream_processor_session_restarts_total", "", ""); n < 1 {
		t.Errorf("session restarts: got %v, want at least 1", n)
	}
}

// TestStateOfAnotherChangelogIsRebuilt: a state directory kept while the
// topics change under it (another HOOKSTREAM_TOPIC_PREFIX, or the topics
// deleted and created anew) holds stores that reflect another changelog.
// Restoring the new changelog from such a store's checkpoint would skip
// its first records, and the events they remember would pass as new: the
// store is rebuilt from the start of its own changelog instead.
func TestStateOfAnotherChangelogIsRebuilt(t *testing.T) {
	dir := t.TempDir()
	other := kafkatest.New(t, 1, maxBody)
	produce(t, other.Client(t), ingestRecord(other, "shop", "x0", `{}`), ingestRecord(other, "shop", "x1", `{}`))
	in := start(t, other, options{name: "a", stateDir: dir})
	waitEvents(t, other, 2, time.Minute)
	in.stop(t)

	env := kafkatest.New(t, 1, maxBody)
	cl := env.Client(t)
	const distinct = 50
	var recs []*kgo.Record
	for i := range distinct {
		recs = append(recs, ingestRecord(env, "shop", fmt.Sprintf("e%d", i), `{}`))
	}
	produce(t, cl, recs...)
	in = start(t, env, options{name: "a", stateDir: t.TempDir()})
	waitEvents(t, env, distinct, time.Minute)
	in.stop(t)

	// The provider retries the first events; the processor starts on the
	// state directory of the other topics.
	produce(t, cl, ingestRecord(env, "shop", "e0", `{}`), ingestRecord(env, "shop", "e1", `{}`), ingestRecord(env, "shop", "new", `{}`))
	in = start(t, env, options{name: "a", stateDir: dir})
	got := waitEvents(t, env, distinct+1, time.Minute)
	kafkatest.WaitFor(t, time.Minute, func() error {
		if n := in.count("duplicate"); n != 2 {
			return fmt.Errorf("duplicates dropped: %d, want 2 (e0 and e1)", n)
		}
		return nil
	})
	in.stop(t)
	exactlyOnce(t, events(t, env), distinct+1, 1)
	if got["shop:e0"] != 1 || got["shop:new"] != 1 {
		t.Errorf("got e0 %d times and new %d times, want once each", got["shop:e0"], got["shop:new"])
	}
}
