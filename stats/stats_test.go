package stats_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/stats"
	"github.com/hookstream/hookstream/topics"
)

// caughtUp runs a tally of env's topics until the test ends and returns
// it once it read what was written with cl.
func caughtUp(t *testing.T, env *kafkatest.Env, cl *kgo.Client) *stats.Tally {
	t.Helper()
	tally := stats.NewTally(env.ClusterOf(cl), kafkatest.Logger(t))
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tally.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("tally: %v", err)
		}
	})
	catchCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tally.CatchUp(catchCtx); err != nil {
		t.Fatal(err)
	}
	return tally
}

// TestTallyCountsByHeaders: the tally counts ingest records with a key,
// first emissions in events (not re-emissions, not aborted writes) and
// dead letters (not redrive markers) by their hs-source header, leaves
// hookstream's operational events out, and never decodes a body.
func TestTallyCountsByHeaders(t *testing.T) {
	env := kafkatest.New(t, 2, 1<<20)
	n := env.Names
	rec := func(topic topics.Topic, key, source string, more ...string) *kgo.Record {
		r := &kgo.Record{Topic: string(topic), Value: []byte("not a body anyone decodes")}
		if key != "" {
			r.Key = []byte(key)
		}
		if source != "" {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: topics.HeaderSource, Value: []byte(source)})
		}
		for i := 0; i < len(more); i += 2 {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: more[i], Value: []byte(more[i+1])})
		}
		return r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := env.Client(t)
	if err := cl.ProduceSync(ctx,
		rec(n.Ingest, "shop:1", "shop"),
		rec(n.Ingest, "shop:1", "shop"), // a provider's retry that reached Kafka
		rec(n.Ingest, "", "shop"),       // no key: not an event
		rec(n.Ingest, "hookstream:op", topics.OperationalSource),
		rec(n.Events, "shop:1", "shop"),
		rec(n.Events, "shop:1", "shop", topics.HeaderReplay, "1"),
		rec(n.Events, "hookstream:op", topics.OperationalSource),
		rec(n.DLQ, "crm:1", "crm", topics.HeaderErrorStage, topics.StageProcess),
		rec(n.DLQ, "crm:1", "", topics.HeaderRedrivenFrom, string(n.DLQ)+"/0/0"), // a redrive marker
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	txn := env.Client(t, kgo.TransactionalID(n.Prefix+"-aborted"))
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txn.ProduceSync(ctx, rec(n.Events, "shop:2", "shop")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := txn.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}

	tally := caughtUp(t, env, cl)
	want := map[string]stats.Counts{
		"shop": {Accepted: 2, Processed: 1},
		"crm":  {Failed: 1},
	}
	got := tally.Sources()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sources: got %+v, want %+v", got, want)
	}
	if d := got["shop"].Duplicates(); d != 1 {
		t.Errorf("shop duplicates: got %d, want 1", d)
	}
	if d := got["crm"].Duplicates(); d != 0 {
		t.Errorf("crm duplicates: got %d, want 0 (never negative)", d)
	}
}

// TestTallyBoundsSources: the tally keeps apart at most
// topics.MaxSourceNames source names, as the receiver's metric labels do;
// later names count together under topics.OtherSource and no record goes
// uncounted.
func TestTallyBoundsSources(t *testing.T) {
	env := kafkatest.New(t, 2, 1<<20)
	const extra = 50
	var recs []*kgo.Record
	for i := range topics.MaxSourceNames + extra {
		source := fmt.Sprintf("src-%d", i)
		recs = append(recs, &kgo.Record{Topic: string(env.Names.Ingest), Key: []byte(source + ":1"),
			Headers: []kgo.RecordHeader{{Key: topics.HeaderSource, Value: []byte(source)}}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// One partition, so the tally reads the names in the order written.
	cl := env.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	got := caughtUp(t, env, cl).Sources()
	if len(got) != topics.MaxSourceNames+1 {
		t.Errorf("sources: got %d entries, want %d (the first names and %q)", len(got), topics.MaxSourceNames+1, topics.OtherSource)
	}
	if n := got["src-0"].Accepted; n != 1 {
		t.Errorf("src-0: got %d accepted, want 1", n)
	}
	if n := got[topics.OtherSource].Accepted; n != extra {
		t.Errorf("%s: got %d accepted, want %d", topics.OtherSource, n, extra)
	}
}

// TestTallyRecentMinutes: the tally counts each source per minute of the
// records' timestamps for the last stats.Minutes minutes, oldest first;
// older records count in the totals only, and a timestamp from the future
// (a producer's clock, or a forged one) wipes no minute.
func TestTallyRecentMinutes(t *testing.T) {
	env := kafkatest.New(t, 2, 1<<20)
	names := env.Names
	now := time.Now()
	at := func(topic topics.Topic, key string, ts time.Time, more ...string) *kgo.Record {
		r := &kgo.Record{Topic: string(topic), Key: []byte(key), Timestamp: ts,
			Headers: []kgo.RecordHeader{{Key: topics.HeaderSource, Value: []byte("shop")}}}
		for i := 0; i < len(more); i += 2 {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: more[i], Value: []byte(more[i+1])})
		}
		return r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := env.Client(t)
	if err := cl.ProduceSync(ctx,
		at(names.Ingest, "shop:old", now.Add(-time.Hour)),
		at(names.Ingest, "shop:1", now.Add(-3*time.Minute)),
		at(names.Ingest, "shop:1", now.Add(-3*time.Minute)),
		at(names.Events, "shop:1", now.Add(-3*time.Minute)),
		at(names.Ingest, "shop:2", now),
		at(names.DLQ, "shop:2", now, topics.HeaderErrorStage, topics.StageProcess),
		at(names.Ingest, "shop:future", now.Add(30*time.Minute)),
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	tally := caughtUp(t, env, cl)
	if got := tally.Sources()["shop"]; got.Accepted != 5 {
		t.Errorf("shop total accepted: got %d, want 5", got.Accepted)
	}
	series := tally.Recent(now)["shop"]
	if len(series) != stats.Minutes {
		t.Fatalf("series: got %d minutes, want %d", len(series), stats.Minutes)
	}
	want := make([]stats.Counts, stats.Minutes)
	want[stats.Minutes-4] = stats.Counts{Accepted: 2, Processed: 1}
	want[stats.Minutes-1] = stats.Counts{Accepted: 1, Failed: 1}
	if !reflect.DeepEqual(series, want) {
		t.Errorf("series: got %+v, want %+v", series, want)
	}
	if d := series[stats.Minutes-4].Duplicates(); d != 1 {
		t.Errorf("duplicates 3 minutes ago: got %d, want 1", d)
	}
	// Read a quarter of an hour later, the same minutes are gone.
	for i, c := range tally.Recent(now.Add(stats.Minutes * time.Minute))["shop"] {
		if c != (stats.Counts{}) {
			t.Errorf("minute %d a quarter of an hour later: got %+v, want none", i, c)
		}
	}
}
