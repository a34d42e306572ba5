package deadletter_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/hookstream/hookstream/deadletter"
	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/processor"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/webhook"
)

const maxBody = 64 << 10

// fixture is a broker with hookstream's topics and the client options
// deadletter gets.
type fixture struct {
	env *kafkatest.Env
	cl  *kgo.Client
	// manual writes records to the partition they name.
	manual *kgo.Client
	opts   []kgo.Opt
}

// cluster is the fixture's broker as a component reaches it, under names.
func (fx *fixture) cluster(names topics.Names) topics.Cluster {
	return topics.Cluster{Client: fx.cl, Opts: fx.opts, Names: names}
}

func newFixture(t *testing.T, partitions int32) *fixture {
	t.Helper()
	env := kafkatest.New(t, partitions, maxBody)
	return &fixture{
		env:    env,
		cl:     env.Client(t),
		manual: env.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner())),
		opts:   []kgo.Opt{kgo.SeedBrokers(env.Seeds...), kgo.WithLogger(kslog.New(kafkatest.Logger(t)))},
	}
}

func (fx *fixture) produce(t *testing.T, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := fx.manual.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

func (fx *fixture) list(t *testing.T, kind deadletter.Kind, f deadletter.Filter) []deadletter.Letter {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	letters, err := deadletter.New(fx.cluster(fx.env.Names)).List(ctx, kind, f)
	if err != nil {
		t.Fatalf("List %s: %v", kind, err)
	}
	return letters
}

func (fx *fixture) redrive(t *testing.T, kind deadletter.Kind, f deadletter.Filter) (copied, skipped int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	copied, skipped, err := deadletter.New(fx.cluster(fx.env.Names)).Redrive(ctx, kind, f)
	if err != nil {
		t.Fatalf("Redrive %s: %v", kind, err)
	}
	return copied, skipped
}

// processorLetter is the dead letter the processor writes for an ingest
// record key shop:<id> that failed at failedAt: the original key, value
// and headers plus the error headers, in the ingest record's partition.
func processorLetter(names topics.Names, partition int32, id string, failedAt time.Time) *kgo.Record {
	return &kgo.Record{
		Topic:     string(names.DLQ),
		Partition: partition,
		Key:       []byte("shop:" + id),
		Value:     []byte(`{"id":"` + id + `"}`),
		Headers: []kgo.RecordHeader{
			{Key: topics.HeaderSource, Value: []byte("shop")},
			{Key: topics.HeaderEventID, Value: []byte(id)},
			{Key: topics.HeaderEventType, Value: []byte("order.created")},
			{Key: topics.HeaderReceivedAt, Value: []byte(failedAt.UTC().Format(topics.TimeFormat))},
			{Key: topics.HeaderContentType, Value: []byte("application/json")},
			{Key: "hs-h-x-shop", Value: []byte("s1")},
			{Key: topics.HeaderError, Value: []byte("process: the state store was unavailable")},
			{Key: topics.HeaderErrorStage, Value: []byte(topics.StageProcess)},
			{Key: topics.HeaderOrigTopic, Value: []byte(names.Ingest)},
			{Key: topics.HeaderOrigPartition, Value: []byte(strconv.Itoa(int(partition)))},
			{Key: topics.HeaderOrigOffset, Value: []byte("17")},
			{Key: topics.HeaderFailedAt, Value: []byte(failedAt.UTC().Format(topics.TimeFormat))},
		},
	}
}

// redriven returns the records of topic that a redrive wrote, by the
// letter they name.
func redriven(t *testing.T, env *kafkatest.Env, topic topics.Topic) map[string][]*kgo.Record {
	t.Helper()
	out := make(map[string][]*kgo.Record)
	for _, r := range env.Records(t, topic) {
		if from := kafkatest.Headers(r)[topics.HeaderRedrivenFrom]; from != "" {
			out[from] = append(out[from], r)
		}
	}
	return out
}

func countKeys(t *testing.T, env *kafkatest.Env, topic topics.Topic) map[string]int {
	t.Helper()
	out := make(map[string]int)
	for _, r := range env.Records(t, topic) {
		out[string(r.Key)]++
	}
	return out
}

func keys(letters []deadletter.Letter) []string {
	out := make([]string, len(letters))
	for i, l := range letters {
		out[i] = l.Key
	}
	return out
}

func startProcessor(t *testing.T, fx *fixture) {
	t.Helper()
	p := processor.New(processor.Config{
		Names:           fx.env.Names,
		StateDir:        t.TempDir(),
		MaxRecordBytes:  topics.MaxRecordBytes(maxBody),
		TransactionalID: fx.env.Names.Prefix + "-processor-a",
		SessionTimeout:  6 * time.Second,
	}, fx.opts, kafkatest.Logger(t), prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("processor Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("processor did not stop within 30s")
		}
	})
}

// TestProcessorRedrive: a dead letter whose cause was fixed is redriven to
// ingest, and the running processor writes its event exactly once; the
// same redrive again copies nothing.
func TestProcessorRedrive(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, 2)
	names := fx.env.Names
	failedAt := time.Now().Add(-time.Hour).UTC()
	fx.produce(t, processorLetter(names, 1, "r1", failedAt))
	startProcessor(t, fx)

	letters := fx.list(t, deadletter.Processor, deadletter.Filter{})
	if len(letters) != 1 {
		t.Fatalf("List: got %d letters, want 1", len(letters))
	}
	l := letters[0]
	if l.Kind != deadletter.Processor || l.Key != "shop:r1" || l.Partition != 1 || l.Offset != 0 || l.Stage != topics.StageProcess ||
		l.Error != "process: the state store was unavailable" || !l.FailedAt.Equal(failedAt) || l.Redriven ||
		string(l.Value) != `{"id":"r1"}` || l.Headers[topics.HeaderSource] != "shop" {
		t.Errorf("List: got %+v, want shop:r1 at 1/0, stage process, its error, failed at %v, not redriven", l, failedAt)
	}

	if copied, skipped := fx.redrive(t, deadletter.Processor, deadletter.Filter{}); copied != 1 || skipped != 0 {
		t.Errorf("Redrive: got %d copied, %d skipped, want 1 and 0", copied, skipped)
	}
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if n := countKeys(t, fx.env, names.Events)["shop:r1"]; n != 1 {
			return fmt.Errorf("events: shop:r1 written %d times", n)
		}
		return nil
	})
	if got := fx.list(t, deadletter.Processor, deadletter.Filter{}); len(got) != 1 || !got[0].Redriven {
		t.Errorf("List after Redrive: got %+v, want the one letter, redriven", got)
	}

	if copied, skipped := fx.redrive(t, deadletter.Processor, deadletter.Filter{}); copied != 0 || skipped != 1 {
		t.Errorf("second Redrive: got %d copied, %d skipped, want 0 and 1", copied, skipped)
	}
	from := string(names.DLQ) + "/1/0"
	copies := redriven(t, fx.env, names.Ingest)
	if len(copies) != 1 || len(copies[from]) != 1 {
		t.Fatalf("%s: got redriven copies %v, want one copy of %s", names.Ingest, copies, from)
	}
	c := copies[from][0]
	h := kafkatest.Headers(c)
	want := map[string]string{
		topics.HeaderSource:       "shop",
		topics.HeaderEventID:      "r1",
		topics.HeaderEventType:    "order.created",
		topics.HeaderReceivedAt:   failedAt.Format(topics.TimeFormat),
		topics.HeaderContentType:  "application/json",
		"hs-h-x-shop":             "s1",
		topics.HeaderRedrivenFrom: from,
	}
	if string(c.Key) != "shop:r1" || string(c.Value) != `{"id":"r1"}` || fmt.Sprint(h) != fmt.Sprint(want) {
		t.Errorf("redriven copy: got %s=%s headers %v, want shop:r1={\"id\":\"r1\"} headers %v", c.Key, c.Value, h, want)
	}
	fx.env.WaitCommitted(t, names.ProcessorGroup(), names.Ingest)
	if n := countKeys(t, fx.env, names.Events)["shop:r1"]; n != 1 {
		t.Errorf("events after the second redrive: shop:r1 written %d times, want 1", n)
	}

	// The event says where it came from, in its header and its envelope.
	events := redriven(t, fx.env, names.Events)
	if len(events[from]) != 1 {
		t.Fatalf("%s: got records marked redriven %v, want shop:r1 from %s", names.Events, events, from)
	}
	e, err := topics.ParseEnvelope(events[from][0].Value)
	if err != nil {
		t.Fatal(err)
	}
	if e.ID != "shop:r1" || e.RedrivenFrom != from || e.Replay != 0 {
		t.Errorf("envelope: got id %s redriven_from %q replay %d, want shop:r1 redriven from %s, no replay", e.ID, e.RedrivenFrom, e.Replay, from)
	}
}

// healing is a subscriber that answers 500 until healed, then 200, and
// counts the successful deliveries per webhook-id.
type healing struct {
	srv     *httptest.Server
	healthy atomic.Bool
	mu      sync.Mutex
	ok      map[string]int
	failed  int
}

func newHealing(t *testing.T) *healing {
	s := &healing{ok: make(map[string]int)}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.healthy.Load() {
			s.failed++
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		s.ok[r.Header.Get("webhook-id")]++
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *healing) delivered(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ok[id]
}

func startDispatcher(t *testing.T, fx *fixture, registry *subscriptions.Registry, schedule []time.Duration) {
	t.Helper()
	d := dispatch.New(dispatch.Config{
		Client:          webhook.Config{Timeout: 2 * time.Second, AllowPrivate: true, UserAgent: "hookstream/test"},
		Schedule:        schedule,
		BreakerFailures: 1000,
		DisableAfter:    time.Hour,
	}, topics.Cluster{Client: fx.cl, Opts: fx.opts, Names: fx.env.Names}, registry, kafkatest.Logger(t), prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dispatcher Run: %v", err)
		}
	})
}

// TestDeliveryRedrive: a delivery that exhausted its attempts while the
// subscriber failed is redriven once the subscriber is healthy, and the
// subscriber receives it; the same redrive again adds nothing.
func TestDeliveryRedrive(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, 3)
	names := fx.env.Names
	registry := subscriptions.NewRegistry(fx.cluster(names), kafkatest.Logger(t))
	schedule := []time.Duration{20 * time.Millisecond, 20 * time.Millisecond}
	startDispatcher(t, fx, registry, schedule)
	sink := newHealing(t)
	sub := subscriptions.Subscription{URL: sink.srv.URL}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := registry.Create(ctx, &sub, "earliest"); err != nil {
		t.Fatalf("create subscription: %v", err)
	}

	e := &topics.Envelope{ID: "shop:d1", Source: "shop", EventID: "d1", Type: "order", ReceivedAt: time.Now().UTC(),
		ProcessedAt: time.Now().UTC(), Data: []byte(`{"n":1}`)}
	v, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := fx.cl.ProduceSync(ctx, &kgo.Record{Topic: string(names.Events), Key: []byte(e.ID), Value: v}).FirstErr(); err != nil {
		t.Fatalf("produce event: %v", err)
	}

	var letters []deadletter.Letter
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if letters = fx.list(t, deadletter.Delivery, deadletter.Filter{}); len(letters) != 1 {
			return fmt.Errorf("delivery DLQ: %d letters", len(letters))
		}
		return nil
	})
	l := letters[0]
	attempts := 1 + len(schedule)
	if l.Kind != deadletter.Delivery || l.Key != sub.ID+":shop:d1" || l.Stage != topics.StageDeliver || l.Subscription != sub.ID ||
		l.Attempts != attempts || l.LastStatus != http.StatusInternalServerError || l.Redriven || string(l.Value) != string(v) {
		t.Errorf("List: got %+v, want %s:shop:d1, stage deliver, %d attempts, last status 500, the envelope, not redriven", l, sub.ID, attempts)
	}

	sink.healthy.Store(true)
	if copied, skipped := fx.redrive(t, deadletter.Delivery, deadletter.Filter{Key: sub.ID + ":*"}); copied != 1 || skipped != 0 {
		t.Errorf("Redrive: got %d copied, %d skipped, want 1 and 0", copied, skipped)
	}
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if n := sink.delivered("shop:d1"); n != 1 {
			return fmt.Errorf("subscriber: shop:d1 delivered %d times", n)
		}
		return nil
	})

	if copied, skipped := fx.redrive(t, deadletter.Delivery, deadletter.Filter{Key: sub.ID + ":*"}); copied != 0 || skipped != 1 {
		t.Errorf("second Redrive: got %d copied, %d skipped, want 0 and 1", copied, skipped)
	}
	from := fmt.Sprintf("%s/%d/%d", names.DeliveryDLQ, l.Partition, l.Offset)
	copies := redriven(t, fx.env, names.DeliveryRetry)
	if len(copies) != 1 || len(copies[from]) != 1 {
		t.Fatalf("%s: got redriven copies %v, want one copy of %s", names.DeliveryRetry, copies, from)
	}
	h := kafkatest.Headers(copies[from][0])
	if h[topics.HeaderSubscription] != sub.ID || h[topics.HeaderEventID] != "shop:d1" || h[topics.HeaderAttempts] != "0" || h[topics.HeaderDueAt] == "" {
		t.Errorf("redriven retry record: got headers %v, want subscription %s, event id shop:d1, attempts 0, a due time", h, sub.ID)
	}
	fx.env.WaitCommitted(t, names.RetryGroup(), names.DeliveryRetry)
	if n := sink.delivered("shop:d1"); n != 1 {
		t.Errorf("subscriber after the second redrive: shop:d1 delivered %d times, want 1", n)
	}
	if got := fx.list(t, deadletter.Delivery, deadletter.Filter{}); len(got) != 1 || !got[0].Redriven {
		t.Errorf("List after Redrive: got %+v, want the one letter, redriven", got)
	}
}

// TestRedeadLetteredDeliveryNotifiesAgain: a delivery dead-lettered,
// redriven and dead-lettered again on the same schedule (the same number of
// attempts) is two dead-letterings: the events topic holds a
// delivery.dead_lettered event for each, and a subscription to hookstream's
// own events receives both.
func TestRedeadLetteredDeliveryNotifiesAgain(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, 3)
	names := fx.env.Names
	registry := subscriptions.NewRegistry(fx.cluster(names), kafkatest.Logger(t))
	startProcessor(t, fx)
	startDispatcher(t, fx, registry, []time.Duration{20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	notifier := newHealing(t)
	notifier.healthy.Store(true)
	if err := registry.Create(ctx, &subscriptions.Subscription{URL: notifier.srv.URL, Sources: []string{topics.OperationalSource}}, "earliest"); err != nil {
		t.Fatalf("create subscription: %v", err)
	}
	failing := subscriptions.Subscription{URL: newHealing(t).srv.URL, Sources: []string{"shop"}}
	if err := registry.Create(ctx, &failing, "earliest"); err != nil {
		t.Fatalf("create subscription: %v", err)
	}
	if err := fx.cl.ProduceSync(ctx, kafkatest.IngestRecord(names, "shop", "d1", `{"n":1}`)).FirstErr(); err != nil {
		t.Fatalf("produce event: %v", err)
	}

	// deadLettered waits for n delivery.dead_lettered events about
	// shop:d1, each received by the notifier, and returns their ids.
	deadLettered := func(n int) []string {
		t.Helper()
		var ids []string
		kafkatest.WaitFor(t, 30*time.Second, func() error {
			ids = ids[:0]
			for _, r := range fx.env.Records(t, names.Events) {
				e, err := topics.ParseEnvelope(r.Value)
				if err != nil {
					return err
				}
				if e.Type == topics.OpDeliveryDeadLettered && strings.Contains(string(e.Data), `"event":"shop:d1"`) {
					ids = append(ids, e.ID)
				}
			}
			if len(ids) != n {
				return fmt.Errorf("%d %s events about shop:d1 on %s, want %d", len(ids), topics.OpDeliveryDeadLettered, names.Events, n)
			}
			for _, id := range ids {
				if notifier.delivered(id) == 0 {
					return fmt.Errorf("the notifier has not received %s", id)
				}
			}
			return nil
		})
		return ids
	}
	deadLettered(1)
	if copied, _ := fx.redrive(t, deadletter.Delivery, deadletter.Filter{Key: failing.ID + ":*"}); copied != 1 {
		t.Fatalf("Redrive: got %d copied, want 1", copied)
	}
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if n := len(fx.list(t, deadletter.Delivery, deadletter.Filter{})); n != 2 {
			return fmt.Errorf("delivery DLQ: %d letters, want the first and the redriven delivery's", n)
		}
		return nil
	})
	if ids := deadLettered(2); ids[0] == ids[1] {
		t.Errorf("both dead-letterings have the id %s, want one each", ids[0])
	}
}

// TestListFiltersAndShow selects letters of a processor DLQ of two
// partitions, written with known failure times:
//
//	partition 0: 0 shop:a t0, 1 shop:b t0+1h, 2 github:c t0+2h
//	partition 1: 0 shop:d t0+30m, 1 github:e t0+3h
func TestListFiltersAndShow(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, 2)
	names := fx.env.Names
	t0 := time.Now().Add(-24 * time.Hour).UTC().Truncate(time.Second)
	letter := func(p int32, key string, at time.Duration) *kgo.Record {
		r := processorLetter(names, p, key, t0.Add(at))
		r.Key = []byte(key)
		return r
	}
	fx.produce(t,
		letter(0, "shop:a", 0), letter(0, "shop:b", time.Hour), letter(0, "github:c", 2*time.Hour),
		letter(1, "shop:d", 30*time.Minute), letter(1, "github:e", 3*time.Hour))
	p0, p1 := int32(0), int32(1)

	tests := []struct {
		name string
		f    deadletter.Filter
		want []string
	}{
		{"all, oldest first", deadletter.Filter{}, []string{"shop:a", "shop:d", "shop:b", "github:c", "github:e"}},
		{"since", deadletter.Filter{Since: t0.Add(time.Hour)}, []string{"shop:b", "github:c", "github:e"}},
		{"key", deadletter.Filter{Key: "shop:b"}, []string{"shop:b"}},
		{"key prefix", deadletter.Filter{Key: "github:*"}, []string{"github:c", "github:e"}},
		{"key matching nothing", deadletter.Filter{Key: "shop"}, []string{}},
		{"partition", deadletter.Filter{Partition: &p1}, []string{"shop:d", "github:e"}},
		{"from offset", deadletter.Filter{Partition: &p0, From: 1}, []string{"shop:b", "github:c"}},
		{"offset range", deadletter.Filter{Partition: &p0, From: 1, Until: 2}, []string{"shop:b"}},
		{"until offset", deadletter.Filter{Partition: &p0, Until: 1}, []string{"shop:a"}},
		{"past the end", deadletter.Filter{Partition: &p0, From: 3}, []string{}},
		{"limit keeps the newest", deadletter.Filter{Limit: 2}, []string{"github:c", "github:e"}},
		{"since, key and limit", deadletter.Filter{Since: t0.Add(time.Minute), Key: "shop:*", Limit: 1}, []string{"shop:b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := keys(fx.list(t, deadletter.Processor, tt.f)); !slices.Equal(got, tt.want) {
				t.Errorf("List(%+v): got %v, want %v", tt.f, got, tt.want)
			}
		})
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := deadletter.New(fx.cluster(names)).Show(ctx, deadletter.Processor, 0, 1)
	if err != nil {
		t.Fatalf("Show 0/1: %v", err)
	}
	if l.Key != "shop:b" || l.Partition != 0 || l.Offset != 1 || !l.FailedAt.Equal(t0.Add(time.Hour)) ||
		l.Headers[topics.HeaderOrigOffset] != "17" || l.Headers["hs-h-x-shop"] != "s1" || l.Redriven {
		t.Errorf("Show 0/1: got %+v, want shop:b with its headers, not redriven", l)
	}
	if _, err := deadletter.New(fx.cluster(names)).Show(ctx, deadletter.Processor, 0, 3); !errors.Is(err, deadletter.ErrNotFound) {
		t.Errorf("Show 0/3 (past the end): got %v, want ErrNotFound", err)
	}
	if _, err := deadletter.New(fx.cluster(names)).Show(ctx, deadletter.Processor, 7, 0); err == nil || !strings.Contains(err.Error(), "no partition 7") {
		t.Errorf("Show 7/0: got %v, want an error naming the missing partition", err)
	}

	// A redrive of one letter marks that letter only; its marker is no letter.
	if copied, skipped := fx.redrive(t, deadletter.Processor, deadletter.Filter{Key: "shop:b"}); copied != 1 || skipped != 0 {
		t.Errorf("Redrive shop:b: got %d copied, %d skipped, want 1 and 0", copied, skipped)
	}
	var marked []string
	all := fx.list(t, deadletter.Processor, deadletter.Filter{})
	for _, l := range all {
		if l.Redriven {
			marked = append(marked, l.Key)
		}
	}
	if len(all) != 5 || !slices.Equal(marked, []string{"shop:b"}) {
		t.Errorf("List after redriving shop:b: got %v with %v redriven, want the 5 letters with shop:b redriven", keys(all), marked)
	}
	if _, err := deadletter.New(fx.cluster(names)).Show(ctx, deadletter.Processor, 0, 3); !errors.Is(err, deadletter.ErrNotFound) {
		t.Errorf("Show 0/3 (the marker): got %v, want ErrNotFound", err)
	}
	if l, err := deadletter.New(fx.cluster(names)).Show(ctx, deadletter.Processor, 0, 1); err != nil || !l.Redriven {
		t.Errorf("Show 0/1 after its redrive: got %+v, %v, want it redriven", l, err)
	}
	if got := countKeys(t, fx.env, names.Ingest); fmt.Sprint(got) != "map[shop:b:1]" {
		t.Errorf("%s: got %v, want shop:b once", names.Ingest, got)
	}
}

func TestListDeliveryLetter(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, 1)
	names := fx.env.Names
	failedAt := time.Now().UTC().Truncate(time.Millisecond)
	fx.produce(t, &kgo.Record{Topic: string(names.DeliveryDLQ), Key: []byte("sub_x:github:1"), Value: []byte(`{"id":"github:1"}`),
		Headers: []kgo.RecordHeader{
			{Key: topics.HeaderError, Value: []byte("subscriber answered 503")},
			{Key: topics.HeaderErrorStage, Value: []byte(topics.StageDeliver)},
			{Key: topics.HeaderFailedAt, Value: []byte(failedAt.Format(topics.TimeFormat))},
			{Key: topics.HeaderSubscription, Value: []byte("sub_x")},
			{Key: topics.HeaderAttempts, Value: []byte("8")},
			{Key: topics.HeaderLastStatus, Value: []byte("503")},
		}})
	got := fx.list(t, deadletter.Delivery, deadletter.Filter{})
	want := deadletter.Letter{Kind: deadletter.Delivery, Key: "sub_x:github:1", Stage: "deliver", Error: "subscriber answered 503",
		FailedAt: failedAt, Subscription: "sub_x", Attempts: 8, LastStatus: 503}
	if len(got) != 1 || got[0].Kind != want.Kind || got[0].Key != want.Key || got[0].Stage != want.Stage || got[0].Error != want.Error ||
		!got[0].FailedAt.Equal(want.FailedAt) || got[0].Subscription != want.Subscription || got[0].Attempts != want.Attempts ||
		got[0].LastStatus != want.LastStatus {
		t.Errorf("List delivery: got %+v, want %+v", got, want)
	}
	if got := fx.list(t, deadletter.Processor, deadletter.Filter{}); len(got) != 0 {
		t.Errorf("List processor: got %v, want none", keys(got))
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	other := topics.NewNames(fx.env.Names.Prefix + "-missing")
	tests := []struct {
		name string
		run  func() error
		want string
	}{
		{"unknown kind", func() error {
			_, err := deadletter.New(fx.cluster(fx.env.Names)).List(ctx, "retry", deadletter.Filter{})
			return err
		}, `unknown dead-letter queue "retry"`},
		{"missing topic", func() error {
			_, err := deadletter.New(fx.cluster(other)).List(ctx, deadletter.Processor, deadletter.Filter{})
			return err
		}, "topic " + string(other.DLQ) + " does not exist"},
		{"redrive of a missing topic", func() error {
			_, _, err := deadletter.New(fx.cluster(other)).Redrive(ctx, deadletter.Delivery, deadletter.Filter{})
			return err
		}, "topic " + string(other.DeliveryDLQ) + " does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.run(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}

	// A delivery letter whose key names no subscription fails the whole
	// redrive before anything is written.
	fx.produce(t,
		&kgo.Record{Topic: string(fx.env.Names.DeliveryDLQ), Key: []byte("sub_ok:shop:1"), Value: []byte(`{}`),
			Headers: []kgo.RecordHeader{{Key: topics.HeaderErrorStage, Value: []byte(topics.StageDeliver)}}},
		&kgo.Record{Topic: string(fx.env.Names.DeliveryDLQ), Key: []byte("nokey"), Value: []byte(`{}`),
			Headers: []kgo.RecordHeader{{Key: topics.HeaderErrorStage, Value: []byte(topics.StageDeliver)}}})
	if _, _, err := deadletter.New(fx.cluster(fx.env.Names)).Redrive(ctx, deadletter.Delivery, deadletter.Filter{}); err == nil || !strings.Contains(err.Error(), `key "nokey"`) {
		t.Errorf("Redrive with a malformed letter: got %v, want an error naming its key", err)
	}
	if n := len(fx.env.Records(t, fx.env.Names.DeliveryRetry)); n != 0 {
		t.Errorf("%s after the failed redrive: got %d records, want none", fx.env.Names.DeliveryRetry, n)
	}
}

// TestConcurrentRedrivesCopyOnce: several redrives of the same letters at
// once copy each letter exactly once; the losers fail, fenced.
func TestConcurrentRedrivesCopyOnce(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, 3)
	names := fx.env.Names
	const n = 30
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, processorLetter(names, int32(i%3), fmt.Sprintf("c%d", i), time.Now()))
	}
	fx.produce(t, recs...)

	const runs = 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	var copied int
	var errs []error
	for range runs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			c, _, err := deadletter.New(fx.cluster(names)).Redrive(ctx, deadletter.Processor, deadletter.Filter{})
			mu.Lock()
			defer mu.Unlock()
			copied += c
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	t.Logf("%d concurrent redrives: %d copied, %d fenced", runs, copied, len(errs))
	if len(errs) == runs {
		t.Fatalf("every redrive failed: %v", errs)
	}
	for _, err := range errs {
		if !errors.Is(err, deadletter.ErrFenced) {
			t.Errorf("a losing redrive: got %v, want ErrFenced", err)
		}
	}
	copies := redriven(t, fx.env, names.Ingest)
	for _, r := range recs {
		from := fmt.Sprintf("%s/%d/%d", names.DLQ, r.Partition, r.Offset)
		if len(copies[from]) != 1 {
			t.Errorf("letter %s (%s): copied %d times, want once", from, r.Key, len(copies[from]))
		}
	}
	if copied != n {
		t.Errorf("redrives report %d copied in all, want %d", copied, n)
	}
	if c, skipped := fx.redrive(t, deadletter.Processor, deadletter.Filter{}); c != 0 || skipped != n {
		t.Errorf("Redrive after them: got %d copied, %d skipped, want 0 and %d", c, skipped, n)
	}
}

// TestListAndRedriveWithASmallLimit: of a DLQ with many letters, List
// with a limit shows the newest, oldest first, with their bodies and
// redrive marks; Redrive with a limit copies those of them not yet
// redriven, each once, and skips the others.
func TestListAndRedriveWithASmallLimit(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, 3)
	names := fx.env.Names
	const n, limit = 300, 5
	t0 := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	var recs []*kgo.Record
	for i := range n {
		// Failure times interleave across partitions: the newest letters
		// are spread over all three.
		recs = append(recs, processorLetter(names, int32(i%3), fmt.Sprintf("e%03d", i), t0.Add(time.Duration(i)*time.Second)))
	}
	fx.produce(t, recs...)
	newest := func(k int) []string {
		var want []string
		for i := n - k; i < n; i++ {
			want = append(want, fmt.Sprintf("shop:e%03d", i))
		}
		return want
	}

	letters := fx.list(t, deadletter.Processor, deadletter.Filter{Limit: limit})
	if got := keys(letters); !slices.Equal(got, newest(limit)) {
		t.Fatalf("List limit %d: got %v, want %v", limit, got, newest(limit))
	}
	for _, l := range letters {
		if want := `{"id":"` + strings.TrimPrefix(l.Key, "shop:") + `"}`; string(l.Value) != want || l.Redriven {
			t.Errorf("letter %s: body %q, redriven %v; want %q, not redriven", l.Key, l.Value, l.Redriven, want)
		}
	}

	// The newest two are redriven first; a redrive of the newest five then
	// copies the three others and skips those two.
	if copied, skipped := fx.redrive(t, deadletter.Processor, deadletter.Filter{Limit: 2}); copied != 2 || skipped != 0 {
		t.Errorf("Redrive limit 2: got %d copied, %d skipped, want 2 and 0", copied, skipped)
	}
	if copied, skipped := fx.redrive(t, deadletter.Processor, deadletter.Filter{Limit: limit}); copied != limit-2 || skipped != 2 {
		t.Errorf("Redrive limit %d: got %d copied, %d skipped, want %d and 2", limit, copied, skipped, limit-2)
	}
	want := make(map[string]int)
	for _, k := range newest(limit) {
		want[k] = 1
	}
	if got := countKeys(t, fx.env, names.Ingest); !maps.Equal(got, want) {
		t.Errorf("%s: got %v, want each of the newest %d once", names.Ingest, got, limit)
	}
	for _, l := range fx.list(t, deadletter.Processor, deadletter.Filter{Limit: limit + 1}) {
		if l.Redriven != (l.Key != "shop:e294") {
			t.Errorf("after the redrives, letter %s: redriven %v", l.Key, l.Redriven)
		}
	}
}
