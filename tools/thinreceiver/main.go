// Thinreceiver is the durable ceiling of hookstream's receiver: the
// thinnest receiver that answers only once Kafka holds the event. It is
// Echo, the GitHub signature check of package ingest, and a synchronous
// produce with acks=all (the receiver's producer settings) to the embedded
// broker with persistence, the one `hookstream run` starts. Nothing else:
// no event id, no duplicate memory, no limits, no record headers, no
// metrics. Whatever the receiver spends beyond this program is the price
// of its features; tools/perfcompare measures it.
//
// With -bare it answers 202 once the body is read, with no signature check
// and no Kafka: the cost of HTTP and Echo alone, as context.
//
// It serves POST /webhooks/<source> on -addr until interrupted, and is
// ready once it answers a signed POST with 202.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/ingest"
	"github.com/hookstream/hookstream/tools/internal/program"
	"github.com/hookstream/hookstream/topics"
)

// Settings shared with the receiver as `hookstream run` configures it by
// default: 12 partitions, 1 MiB bodies, 5s for Kafka's acknowledgement.
const (
	partitions = 12
	maxBody    = 1 << 20
	ackTimeout = 5 * time.Second
)

func main() {
	var (
		addr    = flag.String("addr", "127.0.0.1:8080", "HTTP listener")
		dataDir = flag.String("data-dir", "", "directory of the embedded broker's log (required unless -bare)")
		secret  = flag.String("secret", "", "GitHub webhook secret")
		bare    = flag.Bool("bare", false, "answer 202 without a signature check or Kafka")
	)
	program.Main("thinreceiver", func(ctx context.Context) error {
		return run(ctx, *addr, *dataDir, *secret, *bare)
	})
}

func run(ctx context.Context, addr, dataDir, secret string, bare bool) error {
	log := program.Logger(slog.LevelWarn)
	var h http.Handler = bareHandler()
	if !bare {
		if dataDir == "" {
			return errors.New("-data-dir is required")
		}
		broker, err := topics.StartEmbedded(dataDir, "127.0.0.1:0", log)
		if err != nil {
			return err
		}
		defer broker.Close()
		cfg := ingest.Config{MaxBody: maxBody, AckTimeout: ackTimeout, Topic: topics.NewNames("thin").Ingest}
		client, err := kgo.NewClient(append(ingest.ProducerOpts(cfg), kgo.SeedBrokers(broker.Addr()))...)
		if err != nil {
			return err
		}
		defer client.Close()
		if err := ensureTopic(ctx, client, cfg.Topic); err != nil {
			return err
		}
		if h, err = newHandler(client, cfg, secret); err != nil {
			return err
		}
	}
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe() }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), ackTimeout+time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// ensureTopic creates topic as hookstream creates its ingest topic.
func ensureTopic(ctx context.Context, client *kgo.Client, topic topics.Topic) error {
	for _, s := range topics.Specs(topics.Names{Ingest: topic}, partitions, maxBody) {
		if s.Topic == topic {
			_, err := topics.Ensure(ctx, client, []topics.Spec{s}, 0)
			return err
		}
	}
	return fmt.Errorf("no spec for %s", topic)
}

// newHandler is the thin durable receiver: 401 unless the GitHub
// signature verifies, 202 once the broker acknowledged the body (acks=all),
// 503 when it did not within cfg.AckTimeout. Records are keyed by the
// X-Event-Id header, so that they spread over partitions as the
// receiver's records (keyed by event id) do.
func newHandler(client *kgo.Client, cfg ingest.Config, secret string) (*echo.Echo, error) {
	v, err := ingest.NewVerifier(ingest.Verify{Scheme: ingest.SchemeGitHub, Secret: secret})
	if err != nil {
		return nil, err
	}
	e := echo.New()
	e.POST("/webhooks/:source", func(c *echo.Context) error {
		req := c.Request()
		body, err := io.ReadAll(http.MaxBytesReader(c.Response(), req.Body, cfg.MaxBody))
		if err != nil {
			return c.NoContent(http.StatusBadRequest)
		}
		if err := v.Verify(req.Header, body, time.Now()); err != nil {
			return c.NoContent(http.StatusUnauthorized)
		}
		ctx, cancel := context.WithTimeout(req.Context(), cfg.AckTimeout)
		defer cancel()
		rec := &kgo.Record{Topic: string(cfg.Topic), Key: []byte(req.Header.Get("X-Event-Id")), Value: body}
		if err := client.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return c.NoContent(http.StatusServiceUnavailable)
		}
		return c.NoContent(http.StatusAccepted)
	})
	return e, nil
}

// bareHandler reads the body and answers 202.
func bareHandler() *echo.Echo {
	e := echo.New()
	e.POST("/webhooks/:source", func(c *echo.Context) error {
		if _, err := io.Copy(io.Discard, c.Request().Body); err != nil {
			return c.NoContent(http.StatusBadRequest)
		}
		return c.NoContent(http.StatusAccepted)
	})
	return e
}
