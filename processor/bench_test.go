package processor

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/statestore"
	"github.com/hookstream/hookstream/topics"
)

const benchPartitions = 12

// benchBroker is the embedded broker with persistence, as `hookstream run`
// starts it, with hookstream's topics.
func benchBroker(b *testing.B) (*kafkatest.Env, *kgo.Client) {
	b.Helper()
	env := kafkatest.Embedded(b, "bench", benchPartitions, 1<<20)
	return env, env.Client(b, kgo.ProducerLinger(10*time.Millisecond), kgo.MaxBufferedRecords(100_000))
}

// fillIngest writes n ingest records of 1 KiB JSON, 20% of them repeating
// an earlier id.
func fillIngest(b *testing.B, env *kafkatest.Env, cl *kgo.Client, n int) {
	b.Helper()
	body := `{"pad":"` + strings.Repeat("x", 1000) + `"}`
	ctx := context.Background()
	errs := make(chan error, 1)
	distinct := 0
	for i := range n {
		id := distinct
		if i%5 == 4 {
			id = i % max(distinct, 1)
		} else {
			distinct++
		}
		r := &kgo.Record{Topic: string(env.Names.Ingest), Key: []byte("bench:" + strconv.Itoa(id)), Value: []byte(body),
			Headers: []kgo.RecordHeader{
				{Key: topics.HeaderSource, Value: []byte("bench")},
				{Key: topics.HeaderEventID, Value: []byte(strconv.Itoa(id))},
				{Key: topics.HeaderEventType, Value: []byte("bench")},
				{Key: topics.HeaderReceivedAt, Value: []byte(time.Now().UTC().Format(topics.TimeFormat))},
				{Key: topics.HeaderContentType, Value: []byte("application/json")},
			}}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

// waitGroupDone waits until group has committed every ingest offset.
func waitGroupDone(b *testing.B, adm *kadm.Client, env *kafkatest.Env, group string) {
	b.Helper()
	ctx := context.Background()
	ends, err := adm.ListEndOffsets(ctx, string(env.Names.Ingest))
	if err != nil {
		b.Fatal(err)
	}
	for {
		committed, err := adm.FetchOffsets(ctx, group)
		if err == nil {
			lag := int64(0)
			ends.Each(func(o kadm.ListedOffset) {
				c, ok := committed.Lookup(o.Topic, o.Partition)
				if !ok {
					lag += o.Offset
					return
				}
				lag += o.Offset - c.At
			})
			if lag <= 0 {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkPipeline measures the processor (dedup, envelopes, changelog,
// transactions) against its ceiling measured in the same run: a raw loop
// that consumes the same records in a group and produces each to another
// topic, with no state and no transactions. Run with
// -benchtime=200000x; b.N is the number of ingest records.
func BenchmarkPipeline(b *testing.B) {
	b.Run("raw", func(b *testing.B) {
		env, cl := benchBroker(b)
		fillIngest(b, env, cl, b.N)
		adm := kadm.NewClient(cl)
		group := "bench-raw"
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		raw, err := kgo.NewClient(kgo.SeedBrokers(env.Seeds...), kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(string(env.Names.Ingest)), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.DisableAutoCommit(), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
		if err != nil {
			b.Fatal(err)
		}
		defer raw.Close()
		b.ResetTimer()
		go func() {
			for ctx.Err() == nil {
				fs := raw.PollFetches(ctx)
				fs.EachRecord(func(r *kgo.Record) {
					raw.Produce(ctx, &kgo.Record{Topic: string(env.Names.Events), Partition: r.Partition, Key: r.Key, Value: r.Value}, nil)
				})
				if err := raw.Flush(ctx); err == nil {
					_ = raw.CommitUncommittedOffsets(ctx)
				}
			}
		}()
		waitGroupDone(b, adm, env, group)
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	})
	b.Run("processor", func(b *testing.B) {
		env, cl := benchBroker(b)
		fillIngest(b, env, cl, b.N)
		adm := kadm.NewClient(cl)
		p := New(Config{
			Names:           env.Names,
			StateDir:        b.TempDir(),
			MaxRecordBytes:  topics.MaxRecordBytes(1 << 20),
			TransactionalID: "bench-processor",
		}, []kgo.Opt{kgo.SeedBrokers(env.Seeds...)}, kafkatest.Logger(b), prometheus.NewRegistry())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		// Joining the group and opening twelve stores is start-up, not
		// throughput: the clock starts when the partitions are restored.
		for ready, _ := p.Ready(ctx); !ready; ready, _ = p.Ready(ctx) {
			time.Sleep(time.Millisecond)
		}
		b.ResetTimer()
		waitGroupDone(b, adm, env, string(env.Names.ProcessorGroup()))
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		b.ReportMetric(testutil.ToFloat64(p.metrics.transactions.WithLabelValues("committed")), "txns")
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkRestore measures restoring one partition's store from a
// changelog of b.N ledger entries, each an event delivered to one
// subscriber (run with -benchtime=1000000x), and reports the
// process's resident memory with all those keys restored.
func BenchmarkRestore(b *testing.B) {
	env, _ := benchBroker(b)
	cl := env.Client(b, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MaxBufferedRecords(100_000))
	ctx := context.Background()
	now := time.Now().UTC()
	for i := range b.N {
		// A ledger entry as most are: received, processed, delivered to
		// one subscriber at the first attempt.
		st := statestore.State{Status: statestore.Done, Partition: 0, Offset: int64(i), FirstSeen: now, Expires: now.Add(time.Hour), ReceivedAt: now,
			Deliveries: []statestore.Delivery{{Subscription: "sub_icrju6kffukktylf", Attempts: 1, Outcome: "delivered", Status: 200, DeliveredAt: now,
				Recent: []statestore.Try{{N: 1, Outcome: "delivered", Status: 200, At: now, Latency: 2 * time.Millisecond}}}}}
		v, err := st.MarshalBinary()
		if err != nil {
			b.Fatal(err)
		}
		cl.Produce(ctx, &kgo.Record{Topic: string(env.Names.Changelog), Partition: 0, Key: fmt.Appendf(nil, "bench:%d", i), Value: v}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	p := New(Config{Names: env.Names, StateDir: b.TempDir()}, []kgo.Opt{
		kgo.SeedBrokers(env.Seeds...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	}, kafkatest.Logger(b), prometheus.NewRegistry())
	store, err := statestore.Open(p.cfg.StateDir, 0, statestore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	runtime.GC()
	before := rssBytes()
	b.ResetTimer()
	n, err := p.catchUp(ctx, store)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if n != b.N || store.Keys() != int64(b.N) {
		b.Fatalf("restored %d records into %d keys, want %d", n, store.Keys(), b.N)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
	runtime.GC()
	after := rssBytes()
	// The in-process broker holds the changelog too; the growth across the
	// restore is what the store costs.
	b.ReportMetric(float64(after)/(1<<20), "rss-MiB")
	b.ReportMetric(float64(after-before)/(1<<20), "rss-growth-MiB")
}

// rssBytes is the resident set size of this process (Linux), or 0.
func rssBytes() int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// BenchmarkFoldAttempts folds the delivery attempts of one event with
// 1,000 subscriptions into its story, as the processor reads them: in
// batches of perBatch attempts of the key, each batch starting from the
// state the one before wrote (shared with the pending changes). Reported
// per attempt.
func BenchmarkFoldAttempts(b *testing.B) {
	const subs = 1000
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	attempts := make([]*topics.Attempt, subs)
	for i := range attempts {
		attempts[i] = &topics.Attempt{Subscription: fmt.Sprintf("sub_%04d", i), N: 1, Outcome: topics.OutcomeDelivered, Status: 204, At: now}
	}
	for _, perBatch := range []int{1, 30} {
		b.Run(fmt.Sprintf("%d-per-batch", perBatch), func(b *testing.B) {
			b.ReportAllocs()
			st := statestore.State{Status: statestore.Done, FirstSeen: now, Expires: now.Add(time.Hour)}
			n := 0
			for b.Loop() {
				f := folding(st)
				for range perBatch {
					record(f, attempts[n%subs])
					n++
				}
				st = *f
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/attempt")
		})
	}
}
