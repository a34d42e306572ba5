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
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// countingSink answers 204 and counts events delivered: one per POST, or
// each event of a batch.
func countingSink(b *testing.B) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if events, err := topics.SplitBatch(body); err == nil {
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
	for _, c := range []struct{ subs, batchMax int }{{1, 1}, {10, 1}, {1, 100}} {
		name := fmt.Sprintf("dispatcher-%d-subscriptions", c.subs)
		if c.batchMax > 1 {
			name += fmt.Sprintf("-batch-%d", c.batchMax)
		}
		subs := c.subs
		b.Run(name, func(b *testing.B) {
			env := kafkatest.New(b, 12, 1<<20)
			cl := env.Client(b, kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(100_000))
			ctx := context.Background()
			for i := range b.N {
				e := &topics.Envelope{ID: fmt.Sprintf("bench:%d", i), Source: "bench", EventID: fmt.Sprint(i), Type: "bench",
					ReceivedAt: time.Now(), ProcessedAt: time.Now(), DataBase64: body}
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
			registry := subscriptions.NewRegistry(cl, []kgo.Opt{kgo.SeedBrokers(env.Seeds...)}, env.Names, kafkatest.Logger(b))
			srv, n := countingSink(b)
			for range subs {
				s := subscriptions.Subscription{URL: srv.URL, BatchMax: c.batchMax}
				if err := registry.Create(ctx, &s, "earliest"); err != nil {
					b.Fatal(err)
				}
			}
			d := dispatch.New(dispatch.Config{Names: env.Names, Client: dispatch.ClientConfig{AllowPrivate: true}},
				[]kgo.Opt{kgo.SeedBrokers(env.Seeds...)}, cl, registry, kafkatest.Logger(b), prometheus.NewRegistry())
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			b.ResetTimer()
			go func() { done <- d.Run(runCtx) }()
			want := int64(b.N * subs)
			for n.Load() < want {
				time.Sleep(time.Millisecond)
			}
			b.StopTimer()
			b.ReportMetric(float64(want)/b.Elapsed().Seconds(), "deliveries/s")
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}
