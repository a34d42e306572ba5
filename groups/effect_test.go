package groups_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/processor"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/webhook"
)

// running starts fn's Run and returns a function that stops it.
func running(t *testing.T, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func replay(t *testing.T, env *kafkatest.Env, group string, target groups.Target) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm, cl := env.Admin(t), env.Client(t)
	var plan groups.Plan
	// The stopped consumers leave the group as they close; until then the
	// plan names them.
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		var err error
		plan, err = groups.PlanReplay(ctx, env.ClusterOf(cl), group, "", nil, target)
		if err != nil {
			return err
		}
		if len(plan.Members) > 0 {
			return fmt.Errorf("members still active: %v", plan.Members)
		}
		return nil
	})
	if err := groups.Execute(ctx, adm, plan); err != nil {
		t.Fatal(err)
	}
}

func countEvents(t *testing.T, env *kafkatest.Env) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, r := range env.Records(t, env.Names.Events) {
		out[string(r.Key)]++
	}
	return out
}

// TestReplayToTimeReemits: replaying the processor group --to-time re-reads
// exactly the records at or after that time, and the processor re-emits
// each of them once with its original id.
func TestReplayToTimeReemits(t *testing.T) {
	env := kafkatest.New(t, 2, 1<<20)
	cl := env.Client(t)
	now := time.Now()
	var recs []*kgo.Record
	for i := range 6 {
		r := kafkatest.IngestRecord(env.Names, "shop", fmt.Sprintf("e%d", i), `{}`)
		r.Timestamp = now.Add(-3 * time.Hour)
		if i >= 3 {
			r.Timestamp = now.Add(-time.Hour)
		}
		recs = append(recs, r)
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	newProcessor := func() *processor.Processor {
		return processor.New(processor.Config{
			Names: env.Names, StateDir: t.TempDir(), MaxRecordBytes: topics.MaxRecordBytes(1 << 20),
			TransactionalID: env.Names.Prefix + "-processor-a", SessionTimeout: 6 * time.Second,
		}, []kgo.Opt{kgo.SeedBrokers(env.Seeds...)}, kafkatest.Logger(t), prometheus.NewRegistry())
	}
	stop := running(t, newProcessor().Run)
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if n := len(countEvents(t, env)); n != 6 {
			return fmt.Errorf("%d events", n)
		}
		return nil
	})
	stop()

	replay(t, env, string(env.Names.ProcessorGroup()), groups.Target{Time: now.Add(-2 * time.Hour)})
	running(t, newProcessor().Run) // a fresh state dir: the changelog still knows every id
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		got := countEvents(t, env)
		for i := range 6 {
			want := 1
			if i >= 3 {
				want = 2
			}
			if n := got[fmt.Sprintf("shop:e%d", i)]; n != want {
				return fmt.Errorf("shop:e%d written %d times, want %d (events %v)", i, n, want, got)
			}
		}
		return nil
	})
}

// TestReplaySubscriptionRedeliversToItOnly: replaying one subscription's
// group redelivers to that subscriber, and to no other.
func TestReplaySubscriptionRedeliversToItOnly(t *testing.T) {
	env := kafkatest.New(t, 2, 1<<20)
	cl := env.Client(t)
	log := kafkatest.Logger(t)
	opts := []kgo.Opt{kgo.SeedBrokers(env.Seeds...)}
	registry := subscriptions.NewRegistry(env.ClusterOf(cl), log)
	var mu sync.Mutex
	got := map[string]map[string]int{"a": {}, "b": {}}
	subscriber := func(name string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got[name][r.Header.Get("webhook-id")]++
			mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(srv.Close)
		s := subscriptions.Subscription{URL: srv.URL}
		if err := registry.Create(context.Background(), &s, "earliest"); err != nil {
			t.Fatal(err)
		}
		return s.ID
	}
	a, b := subscriber("a"), subscriber("b")
	for i := range 3 {
		e := &topics.Envelope{ID: fmt.Sprintf("shop:%d", i), Source: "shop", EventID: fmt.Sprint(i), Type: "t", ReceivedAt: time.Now(), ProcessedAt: time.Now(), Data: []byte(`{}`)}
		v, _ := e.Marshal()
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: string(env.Names.Events), Key: []byte(e.ID), Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	newDispatcher := func() *dispatch.Dispatcher {
		return dispatch.New(dispatch.Config{Client: webhook.Config{AllowPrivate: true}}, topics.Cluster{Client: cl, Opts: opts, Names: env.Names}, registry, log, prometheus.NewRegistry())
	}
	deliveries := func(name string, want int) func() error {
		return func() error {
			mu.Lock()
			defer mu.Unlock()
			for i := range 3 {
				if n := got[name][fmt.Sprintf("shop:%d", i)]; n != want {
					return fmt.Errorf("%s got shop:%d %d times, want %d", name, i, n, want)
				}
			}
			return nil
		}
	}
	stop := running(t, newDispatcher().Run)
	kafkatest.WaitFor(t, 30*time.Second, deliveries("a", 1))
	kafkatest.WaitFor(t, 30*time.Second, deliveries("b", 1))
	// Both groups commit their three deliveries before the dispatcher
	// stops: one answered but not yet committed would be delivered again,
	// as at-least-once allows, and be taken for the replay's.
	adm := env.Admin(t)
	for _, id := range []string{a, b} {
		group := env.Names.SubscriptionGroup(id)
		kafkatest.WaitFor(t, 30*time.Second, func() error {
			fetched, err := adm.FetchOffsets(context.Background(), string(group))
			if err != nil {
				return err
			}
			var n int64
			fetched.Each(func(o kadm.OffsetResponse) { n += max(o.At, 0) })
			if n != 3 {
				return fmt.Errorf("%s committed %d records, want 3", group, n)
			}
			return nil
		})
	}
	stop()

	replay(t, env, string(env.Names.SubscriptionGroup(a)), groups.Target{Earliest: true})
	running(t, newDispatcher().Run)
	kafkatest.WaitFor(t, 30*time.Second, deliveries("a", 2))
	time.Sleep(500 * time.Millisecond) // room for a wrong redelivery to b
	if err := deliveries("b", 1)(); err != nil {
		t.Error(err)
	}
}
