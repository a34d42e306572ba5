package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/hookstream/hookstream/ingest"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/processor"
	"github.com/hookstream/hookstream/topics"
)

const maxBody = 64 << 10

// pipeline is hookstream's ingest and processor on a test broker.
type pipeline struct {
	env      *kafkatest.Env
	stateDir string
	// stopProcessor stops the running processor.
	stopProcessor func()
}

func newPipeline(t *testing.T) *pipeline {
	t.Helper()
	pl := &pipeline{env: kafkatest.New(t, 3, maxBody), stateDir: t.TempDir()}
	pl.startProcessor(t)
	return pl
}

func (pl *pipeline) startProcessor(t *testing.T) {
	t.Helper()
	p := processor.New(processor.Config{
		Names:           pl.env.Names,
		StateDir:        pl.stateDir,
		MaxRecordBytes:  topics.MaxRecordBytes(maxBody),
		TransactionalID: pl.env.Names.Prefix + "-processor-a",
		SessionTimeout:  6 * time.Second,
	}, []kgo.Opt{kgo.SeedBrokers(pl.env.Seeds...), kgo.WithLogger(kslog.New(kafkatest.Logger(t)))},
		kafkatest.Logger(t), prometheus.NewRegistry())
	pl.stopProcessor = runUntilStopped(t, "processor", p.Run)
}

// ingest starts a receiver replica: replicas share no memory of what they
// accepted, so a provider's retry through another one reaches Kafka again.
func (pl *pipeline) ingest(t *testing.T) string {
	t.Helper()
	cfg := ingest.Config{AcceptAll: true, MaxBody: maxBody, AckTimeout: 10 * time.Second, Topic: pl.env.Names.Ingest}
	h, err := ingest.New(cfg, pl.env.Client(t, ingest.ProducerOpts(cfg)...), kafkatest.Logger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// post sends a GitHub delivery to a receiver and checks its answer.
func post(t *testing.T, url, delivery string, wantStatus int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/webhooks/github", strings.NewReader(`{"delivery":"`+delivery+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Delivery", delivery)
	req.Header.Set("X-GitHub-Event", "push")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST delivery %s: %v", delivery, err)
	}
	resp.Body.Close()
	if resp.StatusCode != wantStatus {
		t.Fatalf("POST delivery %s: got %d, want %d", delivery, resp.StatusCode, wantStatus)
	}
}

// replayProcessor replays the ingest topic from its start, as `hookstream
// replay --group processor --to-earliest --execute` does with the
// processors stopped.
func (pl *pipeline) replayProcessor(t *testing.T) {
	t.Helper()
	pl.stopProcessor()
	resetToStart(t, pl.env, pl.env.Names.ProcessorGroup(), pl.env.Names.Ingest)
	pl.startProcessor(t)
}

func resetToStart(t *testing.T, env *kafkatest.Env, group topics.Group, topic topics.Topic) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := env.Admin(t)
	starts, err := adm.ListStartOffsets(ctx, string(topic))
	if err != nil {
		t.Fatal(err)
	}
	if err := adm.CommitAllOffsets(ctx, string(group), starts.Offsets()); err != nil {
		t.Fatalf("reset the offsets of %s: %v", group, err)
	}
}

// runUntilStopped runs fn until the returned stop is called (or the test
// ends), and checks that it returned nil.
func runUntilStopped(t *testing.T, name string, fn func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s: %v", name, err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("%s did not stop within 30s", name)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// handlings counts the calls of the handler per envelope id, across runs.
type handlings struct {
	mu     sync.Mutex
	counts map[string]int
	marks  map[string]int // the replay mark of each handled envelope
}

func (h *handlings) handle(_ *pebble.Batch, e *envelope) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts[e.ID]++
	h.marks[e.ID] = e.Replay
	return nil
}

// check fails t unless exactly the ids want were each handled once, as
// first emissions.
func (h *handlings) check(t *testing.T, want []string) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.counts) != len(want) {
		t.Errorf("handled %d distinct ids, want %d", len(h.counts), len(want))
	}
	for _, id := range want {
		if h.counts[id] != 1 || h.marks[id] != 0 {
			t.Errorf("%s: handled %d times (replay mark %d), want once, as its first emission", id, h.counts[id], h.marks[id])
		}
	}
}

func (h *handlings) distinct() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.counts)
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func githubIDs(deliveries ...[]string) []string {
	var out []string
	for _, ds := range deliveries {
		for _, d := range ds {
			out = append(out, "github:"+d)
		}
	}
	return out
}

// TestHandlesEachEventOnce runs the reference consumer against the real
// pipeline: provider retries (through the same receiver and another
// replica), a processor replay, a restart and a reset of the consumer's
// own group. Each event is handled exactly once, and a restart resumes
// where it stopped.
func TestHandlesEachEventOnce(t *testing.T) {
	pl := newPipeline(t)
	env := pl.env
	replicaA, replicaB := pl.ingest(t), pl.ingest(t)
	group := topics.Group(env.Names.Prefix + "-billing-sync")
	cfg := config{brokers: env.Seeds, topic: string(env.Names.Events), group: string(group),
		storeDir: t.TempDir(), forgetAfter: defaultForgetAfter}
	h := &handlings{counts: map[string]int{}, marks: map[string]int{}}
	startConsumer := func() func() {
		return runUntilStopped(t, "consumer", func(ctx context.Context) error { return run(ctx, cfg, h.handle, kafkatest.Logger(t)) })
	}

	first := ids("e", 20)
	for _, d := range first {
		post(t, replicaA, d, http.StatusAccepted)
	}
	for _, d := range first[:10] {
		post(t, replicaB, d, http.StatusAccepted) // written again: the processor drops it
	}
	post(t, replicaA, first[0], http.StatusOK) // the receiver's own fast path
	stop := startConsumer()
	kafkatest.WaitFor(t, time.Minute, func() error {
		if n := h.distinct(); n < len(first) {
			return fmt.Errorf("handled %d distinct ids, want %d", n, len(first))
		}
		return nil
	})
	env.WaitCommitted(t, group, env.Names.Events)
	stop()
	h.check(t, githubIDs(first))

	// The processor replays every event while the consumer is down, and
	// new events arrive; the restarted consumer handles only the new ones.
	pl.replayProcessor(t)
	second := ids("f", 5)
	for _, d := range second {
		post(t, replicaB, d, http.StatusAccepted)
	}
	kafkatest.WaitFor(t, time.Minute, func() error {
		replays, fresh := 0, 0
		for _, r := range env.Records(t, env.Names.Events) {
			switch {
			case kafkatest.Headers(r)[topics.HeaderReplay] == "1":
				replays++
			case strings.HasPrefix(string(r.Key), "github:f"):
				fresh++
			}
		}
		if replays != len(first) || fresh != len(second) {
			return fmt.Errorf("events: %d replays and %d new events, want %d and %d", replays, fresh, len(first), len(second))
		}
		return nil
	})
	stop = startConsumer()
	env.WaitCommitted(t, group, env.Names.Events)
	stop()
	h.check(t, githubIDs(first, second))

	// The team resets its own group to the start: everything is read
	// again, nothing is handled again.
	resetToStart(t, env, group, env.Names.Events)
	stop = startConsumer()
	env.WaitCommitted(t, group, env.Names.Events)
	stop()
	h.check(t, githubIDs(first, second))
}
