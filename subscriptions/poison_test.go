package subscriptions_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/webhook"
)

// poison writes records to the subscriptions topic that are not
// subscriptions, with a plain producer, as any client with produce rights
// on the topic could, and returns how many it wrote. Apache Kafka refuses
// a record without a key on a compacted topic; kfake takes it.
func poison(t *testing.T, env *kafkatest.Env, tag string) int {
	t.Helper()
	valid, err := json.Marshal(subscriptions.Subscription{ID: "sub_" + tag + "valid", URL: "https://example.com/hook", Enabled: true, MaxInFlight: 1, BatchMax: 1})
	if err != nil {
		t.Fatal(err)
	}
	topic := string(env.Names.Subscriptions)
	recs := []*kgo.Record{
		{Key: []byte("\x00\xff garbage " + tag), Value: []byte("\x00\x01 not JSON at all")},
		{Key: []byte("sub_" + tag + "truncated"), Value: valid[:len(valid)/2]},
		{Key: []byte("sub_" + tag + "array"), Value: []byte(`[1,2,3]`)},
		{Key: []byte("sub_" + tag + "typed"), Value: []byte(`{"id":5,"url":["x"]}`)},
		{Key: []byte("sub_" + tag + "other"), Value: valid}, // its id is not its key
		{Key: nil, Value: []byte(`{"id":""}`)},
	}
	cl := env.Client(t)
	n := 0
	for _, r := range recs {
		r.Topic = topic
		switch err := cl.ProduceSync(context.Background(), r).FirstErr(); {
		case r.Key == nil && errors.Is(err, kerr.InvalidRecord):
		case err != nil:
			t.Fatalf("poison %q: %v", r.Key, err)
		default:
			n++
		}
	}
	return n
}

// TestUndecodableRecordsSkipped: records of the subscriptions topic that
// are not subscriptions (garbage, a valid key with a truncated value,
// JSON of another shape, a subscription under another key, no key) are
// skipped: List, Get, Create and Watch go on serving the subscriptions
// that are, a Watch keeps following the topic past them, and each is
// counted in hookstream_registry_records_skipped_total and logged once,
// however often the topic is read again.
func TestUndecodableRecordsSkipped(t *testing.T) {
	env := kafkatest.New(t, 1, 1<<20)
	log, logs := kafkatest.CaptureLogs(t)
	reg := prometheus.NewRegistry()
	r := subscriptions.NewRegistry(env.ClusterOf(env.Client(t)), log).Instrument(reg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	good := &subscriptions.Subscription{URL: "https://example.com/good"}
	if err := r.Create(ctx, good, ""); err != nil {
		t.Fatal(err)
	}
	bad := poison(t, env, "a")

	ids := func(subs map[string]subscriptions.Subscription) []string { return slices.Sorted(maps.Keys(subs)) }
	for i := range 3 { // read again and again: each bad record counted and logged once
		subs, err := r.List(ctx)
		if err != nil || !slices.Equal(ids(subs), []string{good.ID}) {
			t.Fatalf("List %d: got %v, %v; want %s", i, ids(subs), err, good.ID)
		}
	}
	if got, err := r.Get(ctx, good.ID); err != nil || got.URL != good.URL {
		t.Errorf("Get: got %+v, %v; want %s", got, err, good.URL)
	}
	for _, id := range []string{"sub_atruncated", "sub_aother", "sub_avalid"} {
		if _, err := r.Get(ctx, id); !errors.Is(err, subscriptions.ErrNotFound) {
			t.Errorf("Get %s: got %v, want ErrNotFound", id, err)
		}
	}
	second := &subscriptions.Subscription{URL: "https://example.com/second"}
	if err := r.Create(ctx, second, ""); err != nil {
		t.Fatalf("Create after the bad records: %v", err)
	}

	// A Watch loads past them, and follows the topic past more of them.
	seen := make(chan []string, 16)
	run(t, "Watch", func(ctx context.Context) error {
		return r.Watch(ctx, func(subs map[string]subscriptions.Subscription) { seen <- ids(subs) })
	})
	want := slices.Sorted(slices.Values([]string{good.ID, second.ID}))
	next := func(what string, want []string) {
		t.Helper()
		for {
			select {
			case got := <-seen:
				if slices.Equal(got, want) {
					return
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("Watch %s: no snapshot of %v", what, want)
			}
		}
	}
	next("load", want)
	bad += poison(t, env, "b")
	if err := r.Delete(ctx, second.ID); err != nil {
		t.Fatalf("Delete after more bad records: %v", err)
	}
	next("after more bad records", []string{good.ID})
	if _, err := r.Get(ctx, good.ID); err != nil { // from the watched snapshot
		t.Errorf("Get while watching: %v", err)
	}

	if _, err := r.List(ctx); err != nil {
		t.Errorf("List after the Watch: %v", err)
	}
	if got := skipped(t, reg, env.Names.Subscriptions); got != float64(bad) {
		t.Errorf("hookstream_registry_records_skipped_total: got %v, want %d", got, bad)
	}
	if n := len(logs.Lines("record does not decode; skipped")); n != bad {
		t.Errorf("lines about skipped records: got %d, want %d", n, bad)
	}
}

// skipped is the value of hookstream_registry_records_skipped_total on
// reg, whose one series must be topic's.
func skipped(t *testing.T, reg *prometheus.Registry, topic topics.Topic) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if m := mf.GetMetric(); mf.GetName() == "hookstream_registry_records_skipped_total" && len(m) == 1 && m[0].GetLabel()[0].GetValue() == string(topic) {
			return m[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("hookstream_registry_records_skipped_total: got %v, want one series of topic %s", mfs, topic)
	return 0
}

// TestPoisonedRecordDuringRebalance: records that are not subscriptions,
// and one that is but holds nothing valid, written while a dispatcher
// delivers and a second one joins its group, stop neither: every event
// reaches the valid subscription, and each dispatcher's registry counts
// each bad record once.
func TestPoisonedRecordDuringRebalance(t *testing.T) {
	env := kafkatest.New(t, 3, 1<<20)
	var mu sync.Mutex
	got := map[string]bool{}
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get("webhook-id")] = true
		mu.Unlock()
	}))
	t.Cleanup(sink.Close)
	producer := env.Client(t)
	var regs []*prometheus.Registry
	dispatcher := func(name string) {
		t.Helper()
		reg := prometheus.NewRegistry()
		regs = append(regs, reg)
		r := subscriptions.NewRegistry(env.ClusterOf(producer), kafkatest.Logger(t)).Instrument(reg)
		d := dispatch.New(dispatch.Config{Client: webhook.Config{AllowPrivate: true, Timeout: 2 * time.Second}},
			topics.Cluster{Client: producer, Opts: []kgo.Opt{kgo.SeedBrokers(env.Seeds...), kgo.HeartbeatInterval(200 * time.Millisecond)}, Names: env.Names}, r, kafkatest.Logger(t), reg)
		run(t, "dispatcher "+name, d.Run)
	}
	seq := 0
	events := func(n int) {
		t.Helper()
		for range n {
			seq++
			id := strconv.Itoa(seq)
			e := &topics.Envelope{ID: "shop:" + id, Source: "shop", EventID: id, Type: "order", ReceivedAt: time.Now().UTC(), ProcessedAt: time.Now().UTC(), Data: []byte(`{}`)}
			v, err := e.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			rec := &kgo.Record{Topic: string(env.Names.Events), Key: []byte(e.ID), Value: v, Headers: []kgo.RecordHeader{
				{Key: topics.HeaderSource, Value: []byte("shop")}, {Key: topics.HeaderEventID, Value: []byte(id)}, {Key: topics.HeaderEventType, Value: []byte("order")},
			}}
			if err := producer.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	delivered := func() {
		t.Helper()
		kafkatest.WaitFor(t, 60*time.Second, func() error {
			mu.Lock()
			defer mu.Unlock()
			for i := 1; i <= seq; i++ {
				if !got["shop:"+strconv.Itoa(i)] {
					return fmt.Errorf("shop:%d not delivered (%d of %d)", i, len(got), seq)
				}
			}
			return nil
		})
	}

	dispatcher("a")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := subscriptions.NewRegistry(env.ClusterOf(producer), kafkatest.Logger(t))
	if err := admin.Create(ctx, &subscriptions.Subscription{URL: sink.URL}, "earliest"); err != nil {
		t.Fatal(err)
	}
	events(10)
	delivered()
	bad := poison(t, env, "a")
	// A subscription that decodes, with nothing a writer would accept (and
	// a cursor): it is one more subscription, never counted as skipped, and
	// must hold up no other.
	adm := env.Admin(t)
	cursor := kadm.Offsets{}
	for p := range int32(3) {
		cursor.AddOffset(string(env.Names.Events), p, 0, -1)
	}
	if err := adm.CommitAllOffsets(ctx, string(env.Names.SubscriptionGroup("sub_weird")), cursor); err != nil {
		t.Fatal(err)
	}
	weird := &kgo.Record{Topic: string(env.Names.Subscriptions), Key: []byte("sub_weird"), Value: []byte(`{"id":"sub_weird","url":"http://127.0.0.1:1/",` +
		`"topic":"x","pull":true,"enabled":true,"max_in_flight":-5,"batch_max":-3,"batch_wait":"-1s","rate_limit":-1,"timeout":"-1s","schedule":["-1s"],"filter":"((("}`)}
	// One with no cursor at all (no group: kfake answers
	// GROUP_ID_NOT_FOUND for it), which starts from the end.
	lone := &kgo.Record{Topic: string(env.Names.Subscriptions), Key: []byte("sub_lone"), Value: []byte(`{"id":"sub_lone","url":"http://127.0.0.1:1/","enabled":true}`)}
	if err := producer.ProduceSync(ctx, weird, lone).FirstErr(); err != nil {
		t.Fatal(err)
	}
	dispatcher("b") // a rebalance of the dispatch group, the bad records in the topic
	events(10)
	bad += poison(t, env, "b") // and more while it goes on
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		groups, err := adm.DescribeGroups(ctx, string(env.Names.DispatchGroup()))
		if err != nil {
			return err
		}
		members := groups[string(env.Names.DispatchGroup())].Members
		for _, m := range members {
			if c, _ := m.Assigned.AsConsumer(); c == nil || len(c.Topics) == 0 {
				return fmt.Errorf("member %s holds no partition", m.MemberID)
			}
		}
		if len(members) != 2 {
			return fmt.Errorf("dispatch group: got %d members, want 2", len(members))
		}
		return nil
	})
	events(10)
	delivered()
	if _, err := admin.List(ctx); err != nil {
		t.Errorf("List: %v", err)
	}
	for i, reg := range regs {
		kafkatest.WaitFor(t, 10*time.Second, func() error {
			if got := skipped(t, reg, env.Names.Subscriptions); got != float64(bad) {
				return fmt.Errorf("dispatcher %d: hookstream_registry_records_skipped_total: got %v, want %d", i, got, bad)
			}
			return nil
		})
	}
}
