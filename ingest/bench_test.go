package ingest_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookstream/hookstream/ingest"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/internal/otlptest"
	"github.com/hookstream/hookstream/tracing"
)

// BenchmarkReceiver measures the receiver (GitHub signature verification,
// event id, durable produce on the embedded broker with persistence)
// beside its ceiling in the same run: a bare Echo handler that reads the
// body and answers 202 without Kafka. 64 concurrent clients, 1 KiB JSON.
func BenchmarkReceiver(b *testing.B) {
	body := []byte(`{"pad":"` + strings.Repeat("x", 1000) + `"}`)
	mac := hmac.New(sha256.New, []byte(githubSecret))
	mac.Write(body)
	sig := "sha256=" + hex.EncodeToString(mac.Sum(nil))

	run := func(b *testing.B, h http.Handler) {
		srv := httptest.NewServer(h)
		defer srv.Close()
		tr := srv.Client().Transport.(*http.Transport)
		tr.MaxIdleConnsPerHost = 64
		var n atomic.Int64
		b.SetParallelism(32) // 32 x GOMAXPROCS(2) = 64 clients
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/webhooks/github", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-GitHub-Delivery", fmt.Sprintf("d-%d", n.Add(1)))
				req.Header.Set("X-GitHub-Event", "push")
				req.Header.Set("X-Hub-Signature-256", sig)
				resp, err := srv.Client().Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		})
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s")
	}

	b.Run("bare-echo", func(b *testing.B) {
		e := echo.New()
		e.POST("/webhooks/:source", func(c *echo.Context) error {
			if _, err := io.ReadAll(c.Request().Body); err != nil {
				return err
			}
			return c.JSON(http.StatusAccepted, map[string]string{"status": "accepted"})
		})
		run(b, e)
	})
	receiver := func(b *testing.B, tr tracing.Tracing) {
		env := kafkatest.Embedded(b, "bench", 12, 1<<20)
		cfg := ingest.Config{Sources: testSources, MaxBody: 1 << 20, AckTimeout: 5 * time.Second, Topic: env.Names.Ingest, Tracing: tr}
		h, err := ingest.New(cfg, env.Client(b, ingest.ProducerOpts(cfg)...), kafkatest.Logger(b), prometheus.NewRegistry())
		if err != nil {
			b.Fatal(err)
		}
		run(b, h)
	}
	b.Run("receiver", func(b *testing.B) { receiver(b, tracing.Tracing{}) })
	// As run sets it up with no OTEL_* endpoint: spans made, none exported.
	b.Run("receiver-tracing-no-endpoint", func(b *testing.B) {
		receiver(b, otlptest.Tracing(b, ""))
	})
}
