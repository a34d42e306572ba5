package tracing_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/ingest"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/internal/otlptest"
	"github.com/hookstream/hookstream/processor"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/tracing"
	"github.com/hookstream/hookstream/webhook"
)

// tracedSubscriber answers 500 to the first fail[id] deliveries of an id,
// 200 to the others, and records the traceparent of every delivery.
type tracedSubscriber struct {
	mu     sync.Mutex
	fail   map[string]int
	parent map[string][]string // webhook-id -> traceparents, in order
}

func (s *tracedSubscriber) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("webhook-id")
	s.mu.Lock()
	s.parent[id] = append(s.parent[id], r.Header.Get("traceparent"))
	fail := len(s.parent[id]) <= s.fail[id]
	s.mu.Unlock()
	if fail {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *tracedSubscriber) traceparents(id string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.parent[id]...)
}

// run runs a component until stop is called or the test ends.
func run(t *testing.T, name string, f func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// pipelineMaxBody is the largest webhook body of the pipeline tests.
const pipelineMaxBody = 1 << 20

// receiver starts a receiver of every source, traced by tr, and returns
// its URL.
func receiver(t *testing.T, env *kafkatest.Env, tr tracing.Tracing, log *slog.Logger) string {
	t.Helper()
	cfg := ingest.Config{AcceptAll: true, MaxBody: pipelineMaxBody, AckTimeout: 10 * time.Second, Topic: env.Names.Ingest, Tracing: tr}
	h, err := ingest.New(cfg, env.Client(t, ingest.ProducerOpts(cfg)...), log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// newProcessor builds a processor traced by tr, its state in stateDir.
func newProcessor(env *kafkatest.Env, tr tracing.Tracing, log *slog.Logger, stateDir string) *processor.Processor {
	return processor.New(processor.Config{
		Names: env.Names, StateDir: stateDir, MaxRecordBytes: topics.MaxRecordBytes(pipelineMaxBody),
		TransactionalID: env.Names.Prefix + "-processor", SessionTimeout: 6 * time.Second, Tracing: tr,
	}, []kgo.Opt{kgo.SeedBrokers(env.Seeds...)}, log, prometheus.NewRegistry())
}

// dispatcher runs a dispatcher traced by tr, retrying twice after 100ms,
// and returns its registry.
func dispatcher(t *testing.T, env *kafkatest.Env, tr tracing.Tracing, log *slog.Logger) *subscriptions.Registry {
	t.Helper()
	cl := env.Client(t)
	registry := subscriptions.NewRegistry(env.ClusterOf(cl), log)
	d := dispatch.New(dispatch.Config{
		Client:   webhook.Config{AllowPrivate: true, Timeout: 2 * time.Second},
		Schedule: []time.Duration{100 * time.Millisecond, 100 * time.Millisecond},
		Tracing:  tr,
	}, topics.Cluster{Client: cl, Opts: []kgo.Opt{kgo.SeedBrokers(env.Seeds...), kgo.HeartbeatInterval(200 * time.Millisecond)}, Names: env.Names},
		registry, log, prometheus.NewRegistry())
	run(t, "dispatcher", d.Run)
	return registry
}

// replayProcessor resets the stopped processor's group to the start of
// the ingest topic, as `hookstream replay --group processor --to-earliest
// --execute` does, once the group has no member left.
func replayProcessor(t *testing.T, env *kafkatest.Env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var plan groups.Plan
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		var err error
		if plan, err = groups.PlanReplay(ctx, env.ClusterOf(env.Client(t)), "processor", "", nil, groups.Target{Earliest: true}); err != nil {
			return err
		}
		if len(plan.Members) > 0 {
			return fmt.Errorf("members still active: %v", plan.Members)
		}
		return nil
	})
	if err := groups.Execute(ctx, env.Admin(t), plan); err != nil {
		t.Fatal(err)
	}
}

// TestPipelineTrace: a webhook posted with a known traceparent is one
// trace, exported over OTLP/HTTP to a real receiver: the receiver's span
// is the provider's child, the processor's span the receiver's, the
// delivery attempt's the processor's, and the subscriber gets the
// attempt's traceparent. A duplicate (a provider's retry through another
// receiver replica) is a processor span with outcome duplicate and no
// delivery; a delivery that fails once has two attempt spans in its trace.
// A replay of the processor group processes each record again: the event
// emitted again is a new processor span in its trace, linked to the span
// of its first emission, and delivered again under it. With -v the test
// prints the traces as trees.
func TestPipelineTrace(t *testing.T) {
	recv := otlptest.New(t)
	t.Setenv("OTEL_SERVICE_NAME", "hookstream-pipeline")
	tr := otlptest.Tracing(t, recv.URL)

	env := kafkatest.New(t, 1, pipelineMaxBody)
	log, logs := kafkatest.CaptureLogs(t)
	a, b := receiver(t, env, tr, log), receiver(t, env, tr, log)
	stateDir := t.TempDir()
	stopProcessor := run(t, "processor", newProcessor(env, tr, log, stateDir).Run)

	sub := &tracedSubscriber{fail: map[string]int{"shop:2": 1, "shop:3": 3}, parent: map[string][]string{}}
	subSrv := httptest.NewServer(sub)
	t.Cleanup(subSrv.Close)
	registry := dispatcher(t, env, tr, log)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := subscriptions.Subscription{URL: subSrv.URL}
	if err := registry.Create(ctx, &s, "earliest"); err != nil {
		t.Fatalf("create subscription: %v", err)
	}

	const (
		traceA = "4bf92f3577b34da6a3ce929d0e0e4736" // shop:1
		traceB = "5bf92f3577b34da6a3ce929d0e0e4737" // shop:1 again, a duplicate
		traceC = "6bf92f3577b34da6a3ce929d0e0e4738" // shop:2, delivered at the second attempt
		traceD = "7bf92f3577b34da6a3ce929d0e0e4739" // shop:3, dead-lettered after three attempts
		client = "00f067aa0ba902b7"                 // the provider's span
	)
	post := func(url, id, traceID string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url+"/webhooks/shop", strings.NewReader(`{"n":1}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Event-Id", id)
		req.Header.Set("traceparent", "00-"+traceID+"-"+client+"-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST %s: got %d, want 202", id, resp.StatusCode)
		}
	}
	post(a, "1", traceA)
	post(b, "1", traceB)
	post(a, "2", traceC)
	post(b, "3", traceD)

	// spans waits for the trace's spans: want of each name.
	spans := func(traceID string, want map[string]int) map[string][]otlptest.Span {
		t.Helper()
		var byName map[string][]otlptest.Span
		kafkatest.WaitFor(t, 60*time.Second, func() error {
			byName = map[string][]otlptest.Span{}
			for _, s := range recv.Trace(traceID) {
				byName[s.Name] = append(byName[s.Name], s)
			}
			for name, n := range want {
				if len(byName[name]) != n {
					return fmt.Errorf("trace %s: got %d spans %q, want %d (all: %+v)", traceID, len(byName[name]), name, n, byName)
				}
			}
			return nil
		})
		return byName
	}
	processName := "process " + string(env.Names.Ingest)
	const ingestName, deliverName = "POST /webhooks/:source", "POST"

	// One trace: provider -> receiver -> processor -> attempt -> subscriber.
	got := spans(traceA, map[string]int{ingestName: 1, processName: 1, deliverName: 1})
	in, pr, de := got[ingestName][0], got[processName][0], got[deliverName][0]
	firstIn, firstPr := in, pr
	check := func(what string, got, want any) {
		t.Helper()
		if got != want {
			t.Errorf("%s: got %v, want %v", what, got, want)
		}
	}
	check("receiver span's parent", in.ParentID, client)
	check("receiver span's event", in.Attrs["hookstream.event.id"], "shop:1")
	check("receiver span's status code", in.Attrs["http.response.status_code"], "202")
	check("receiver span's service", in.Service, "hookstream-pipeline")
	check("processor span's parent", pr.ParentID, in.SpanID)
	check("processor span's outcome", pr.Attrs["hookstream.outcome"], "processed")
	check("processor span's messaging system", pr.Attrs["messaging.system"], "kafka")
	check("processor span's destination", pr.Attrs["messaging.destination.name"], string(env.Names.Ingest))
	check("processor span's offset", pr.Attrs["messaging.kafka.offset"], "0")
	check("attempt span's parent", de.ParentID, pr.SpanID)
	check("attempt span's subscription", de.Attrs["hookstream.subscription"], s.ID)
	check("attempt span's attempt", de.Attrs["hookstream.attempt"], "1")
	check("attempt span's status code", de.Attrs["http.response.status_code"], "200")
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		if got, want := sub.traceparents("shop:1"), []string{"00-" + traceA + "-" + de.SpanID + "-01"}; fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("subscriber's traceparents: got %v, want %v", got, want)
		}
		return nil
	})

	// The duplicate: processed and dropped, never delivered.
	got = spans(traceB, map[string]int{ingestName: 1, processName: 1, deliverName: 0})
	check("duplicate's outcome", got[processName][0].Attrs["hookstream.outcome"], "duplicate")
	check("duplicate's processor span's parent", got[processName][0].ParentID, got[ingestName][0].SpanID)

	// Failed, then delivered from the retry topic: two attempts, both
	// children of the processor's span.
	got = spans(traceC, map[string]int{ingestName: 1, processName: 1, deliverName: 2})
	pr = got[processName][0]
	attempts := map[string]otlptest.Span{}
	for _, s := range got[deliverName] {
		check("attempt span's parent", s.ParentID, pr.SpanID)
		attempts[s.Attrs["hookstream.attempt"]] = s
	}
	check("first attempt's status code", attempts["1"].Attrs["http.response.status_code"], "500")
	check("first attempt's span status", attempts["1"].StatusCode, int32(2))
	check("second attempt's status code", attempts["2"].Attrs["http.response.status_code"], "200")
	parents := sub.traceparents("shop:2")
	want := []string{"00-" + traceC + "-" + attempts["1"].SpanID + "-01", "00-" + traceC + "-" + attempts["2"].SpanID + "-01"}
	if fmt.Sprint(parents) != fmt.Sprint(want) {
		t.Errorf("subscriber's traceparents of shop:2: got %v, want %v", parents, want)
	}
	// Dead-lettered: three attempts, and the log line says so with the
	// trace's id.
	spans(traceD, map[string]int{ingestName: 1, processName: 1, deliverName: 3})
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		for _, line := range logs.Lines("delivery dead-lettered") {
			if line["event_id"] == "shop:3" {
				if line["trace_id"] != traceD {
					return fmt.Errorf("dead-lettered line of shop:3: got trace_id %v, want %s", line["trace_id"], traceD)
				}
				return nil
			}
		}
		return errors.New("no dead-lettered line of shop:3")
	})

	// Time passes even if spans lag: no duplicate ever reaches the subscriber.
	if got := sub.traceparents("shop:1"); len(got) != 1 {
		t.Errorf("deliveries of shop:1: got %d, want 1", len(got))
	}

	// The replay: shop:1 is emitted again by a new span in its trace, a
	// child of the receiver's like the first, linked to the first
	// emission's span, and delivered again under it; its duplicate is
	// dropped again.
	stopProcessor()
	replayProcessor(t, env)
	run(t, "processor after the replay", newProcessor(env, tr, log, stateDir).Run)
	got = spans(traceA, map[string]int{ingestName: 1, processName: 2, deliverName: 2})
	var replay otlptest.Span
	for _, s := range got[processName] {
		if s.SpanID != firstPr.SpanID {
			replay = s
		}
	}
	check("replay's outcome", replay.Attrs["hookstream.outcome"], "replayed")
	check("replay span's parent", replay.ParentID, firstIn.SpanID)
	check("replay span's links", fmt.Sprint(replay.Links), fmt.Sprint([]string{firstPr.SpanID}))
	var again otlptest.Span
	for _, s := range got[deliverName] {
		if s.ParentID == replay.SpanID {
			again = s
		}
	}
	check("attempt span after the replay", again.Attrs["hookstream.attempt"], "1")
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		if got, want := sub.traceparents("shop:1"), []string{"00-" + traceA + "-" + de.SpanID + "-01", "00-" + traceA + "-" + again.SpanID + "-01"}; fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("subscriber's traceparents of shop:1 after the replay: got %v, want %v", got, want)
		}
		return nil
	})
	got = spans(traceB, map[string]int{ingestName: 1, processName: 2, deliverName: 0})
	for _, s := range got[processName] {
		check("duplicate's outcome after the replay", s.Attrs["hookstream.outcome"], "duplicate")
	}
	for _, tc := range []struct{ what, id string }{
		{"shop:1, replayed", traceA}, {"shop:1 again, a duplicate", traceB},
		{"shop:2, delivered at the second attempt", traceC}, {"shop:3, dead-lettered", traceD},
	} {
		t.Logf("trace of %s:\n%s", tc.what, otlptest.Tree(recv.Trace(tc.id)))
	}
}
