package dispatch_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/webhook"
)

// countingSink answers 204 and counts events delivered: one per POST, or
// each event of a batch, parsing only batch bodies.
func countingSink(b *testing.B) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if !bytes.HasPrefix(body, []byte(`{"events":[`)) {
			n.Add(1) // one event, whatever its body: not parsed
		} else if events, err := topics.SplitBatch(body); err == nil {
			n.Add(int64(len(events)))
		} else {
			n.Add(1)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(srv.Close)
	return srv, &n
}

// BenchmarkDelivery measures deliveries (events) per second from the
// events topic to a fast local subscriber, with 1 and 10 subscriptions,
// and with one subscription batching 100 events per POST, beside its
// ceiling in the same run: a raw loop of HTTP POSTs (16 concurrent, the
// default in-flight bound) of the same body to the same kind of sink.
// b.N is the number of events; run with -benchtime=20000x.
func BenchmarkDelivery(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 1024)
	b.Run("raw-post-loop", func(b *testing.B) {
		srv, n := countingSink(b)
		client := srv.Client()
		client.Transport.(*http.Transport).MaxIdleConnsPerHost = 16
		var next atomic.Int64
		var wg sync.WaitGroup
		b.ResetTimer()
		for range 16 {
			wg.Go(func() {
				for next.Add(1) <= int64(b.N) {
					resp, err := client.Post(srv.URL, "application/json", bytes.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		if n.Load() != int64(b.N) {
			b.Fatalf("sink got %d, want %d", n.Load(), b.N)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
	})
	for _, c := range []struct{ subs, batchMax int }{{1, 1}, {10, 1}, {100, 1}, {1000, 1}, {1, 100}} {
		name := fmt.Sprintf("dispatcher-%d-subscriptions", c.subs)
		if c.batchMax > 1 {
			name += fmt.Sprintf("-batch-%d", c.batchMax)
		}
		b.Run(name, func(b *testing.B) {
			benchDispatcher(b, c.subs, subscriptions.Subscription{BatchMax: c.batchMax}, func(e *topics.Envelope) { e.DataBase64 = body })
		})
	}
}

// BenchmarkDeliveryControls measures deliveries per second to one fast
// local subscriber of one subscription with a typical filter, a typical
// transform (a Slack-shaped message), both, and neither, in the same run,
// over events of 1 KiB of JSON that every filter lets through. b.N is the
// number of events; run with -benchtime=20000x.
func BenchmarkDeliveryControls(b *testing.B) {
	const (
		filter    = `source == "bench" && data.amount > 100 && data.customer.email.endsWith("@example.com")`
		transform = `{"text": "payment of " + string(data.amount) + " by " + data.customer.email, "id": id}`
	)
	data := fmt.Appendf(nil, `{"amount":2500,"currency":"eur","customer":{"id":"cus_1","email":"ada@example.com"},"pad":%q}`,
		bytes.Repeat([]byte("x"), 900))
	for _, c := range []struct {
		name string
		sub  subscriptions.Subscription
	}{
		{"none", subscriptions.Subscription{}},
		{"filter", subscriptions.Subscription{Filter: filter}},
		{"transform", subscriptions.Subscription{Transform: transform}},
		{"filter-transform", subscriptions.Subscription{Filter: filter, Transform: transform}},
	} {
		b.Run(c.name, func(b *testing.B) {
			benchDispatcher(b, 1, c.sub, func(e *topics.Envelope) { e.Data = data })
		})
	}
}

// BenchmarkHeavyNeighbour measures deliveries per second to a plain
// subscription of events of 48 KB (a list of 6,000 small objects), alone
// and beside a subscription whose filter walks the list (tens of
// milliseconds an event), unthrottled, in the same run: the neighbour's
// cost falls on its own lanes, not on the shared read. b.N is the number
// of events; run with -benchtime=300x.
func BenchmarkHeavyNeighbour(b *testing.B) {
	data := []byte(heavyData())
	payload := func(e *topics.Envelope) { e.Data = data }
	b.Run("alone", func(b *testing.B) {
		benchDispatcher(b, 1, subscriptions.Subscription{}, payload)
	})
	b.Run("beside-heavy-filter", func(b *testing.B) {
		benchDispatcher(b, 1, subscriptions.Subscription{}, payload, subscriptions.Subscription{Filter: heavyFilter})
	})
}

// benchDispatcher writes b.N events to a fresh broker, each's payload set
// by payload, then times a dispatcher delivering them all to subs
// subscriptions like sub, each to a counting sink; neighbours are
// subscriptions beside them, whose deliveries (to a sink of their own)
// are not waited for.
func benchDispatcher(b *testing.B, subs int, sub subscriptions.Subscription, payload func(*topics.Envelope), neighbours ...subscriptions.Subscription) {
	env := kafkatest.New(b, 12, 1<<20)
	cl := env.Client(b, kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(100_000))
	ctx := context.Background()
	for i := range b.N {
		e := &topics.Envelope{ID: fmt.Sprintf("bench:%d", i), Source: "bench", EventID: fmt.Sprint(i), Type: "bench",
			ReceivedAt: time.Now(), ProcessedAt: time.Now()}
		payload(e)
		v, err := e.Marshal()
		if err != nil {
			b.Fatal(err)
		}
		// With the headers the processor writes: filters read them.
		cl.Produce(ctx, &kgo.Record{Topic: string(env.Names.Events), Key: []byte(e.ID), Value: v, Headers: []kgo.RecordHeader{
			{Key: topics.HeaderSource, Value: []byte(e.Source)}, {Key: topics.HeaderEventType, Value: []byte(e.Type)}}}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	registry := subscriptions.NewRegistry(env.ClusterOf(cl), kafkatest.Logger(b))
	srv, n := countingSink(b)
	others, _ := countingSink(b)
	for i := range subs + len(neighbours) {
		s := sub
		s.URL = srv.URL
		if i >= subs {
			s = neighbours[i-subs]
			s.URL = others.URL
		}
		if err := registry.Create(ctx, &s, "earliest"); err != nil {
			b.Fatal(err)
		}
	}
	d := dispatch.New(dispatch.Config{Client: webhook.Config{AllowPrivate: true}},
		topics.Cluster{Client: cl, Opts: []kgo.Opt{kgo.SeedBrokers(env.Seeds...)}, Names: env.Names}, registry, kafkatest.Logger(b), prometheus.NewRegistry())
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	b.ResetTimer()
	cpu := processCPU()
	go func() { done <- d.Run(runCtx) }()
	want := int64(b.N * subs)
	for n.Load() < want {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(want)/b.Elapsed().Seconds(), "deliveries/s")
	// The process's CPU time (dispatcher, broker and sink alike) is less
	// swayed than the rate by other work on a shared machine.
	b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(want), "cpu-µs/delivery")
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// processCPU is the CPU time, user and system, this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
