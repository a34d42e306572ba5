package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/hookstream/hookstream/config"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/processor"
	"github.com/hookstream/hookstream/topics"
)

// TestInstanceIDFencesPredecessor: a processor recreated with a new host
// name but the same HOOKSTREAM_INSTANCE_ID fences the transaction its
// predecessor left open as it starts: the predecessor can no longer
// commit, and every event is written exactly once.
func TestInstanceIDFencesPredecessor(t *testing.T) {
	const maxBody = 64 << 10
	env := kafkatest.New(t, 1, maxBody)
	cfg := &config.Config{DataDir: t.TempDir(), InstanceID: "web-1", MaxBody: maxBody, DedupTTL: time.Hour}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The predecessor had emitted e0 in a transaction it never ended.
	predecessor := env.Client(t, kgo.TransactionalID(string(env.Names.ProcessorGroup())+"-web-1"))
	if err := predecessor.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	emitted := &kgo.Record{Topic: string(env.Names.Events), Key: []byte("shop:e0"), Value: []byte(`{"id":"shop:e0"}`)}
	if err := predecessor.ProduceSync(ctx, emitted).FirstErr(); err != nil {
		t.Fatal(err)
	}

	const n = 10
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, kafkatest.IngestRecord(env.Names, "shop", fmt.Sprintf("e%d", i), `{}`))
	}
	if err := env.Client(t).ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	pcfg, err := processorConfig(cfg, env.Names)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	p := processor.New(pcfg, []kgo.Opt{kgo.SeedBrokers(env.Seeds...), kgo.WithLogger(kslog.New(kafkatest.Logger(t)))}, kafkatest.Logger(t), reg)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("processor Run: %v", err)
		}
	})
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if got := processed(t, reg); got != n {
			return fmt.Errorf("processed %d events, want %d", got, n)
		}
		return nil
	})

	err = predecessor.EndTransaction(ctx, kgo.TryCommit)
	if !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Errorf("the predecessor's commit: got %v, want it fenced", err)
	}
	got := map[string]int{}
	for _, r := range env.Records(t, env.Names.Events) {
		got[string(r.Key)]++
	}
	for i := range n {
		if k := fmt.Sprintf("shop:e%d", i); got[k] != 1 {
			t.Errorf("%s on the events topic: %d times, want once", k, got[k])
		}
	}
}

// processed reads the processor's count of processed records.
func processed(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "hookstream_processor_records_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == "processed" {
					return int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return 0
}

// TestProcessorAdvertisesItsAdminAddr: the processor advertises
// HOOKSTREAM_ADMIN_ADVERTISED_ADDR to its group when set, else the admin
// listener.
func TestProcessorAdvertisesItsAdminAddr(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"listener", map[string]string{"HOOKSTREAM_ADMIN_ADDR": "127.0.0.1:8081"}, "127.0.0.1:8081"},
		{"advertised", map[string]string{"HOOKSTREAM_ADMIN_ADDR": "127.0.0.1:8081", "HOOKSTREAM_ADMIN_ADVERTISED_ADDR": "web-1.internal:9081"}, "web-1.internal:9081"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.env["HOOKSTREAM_INSTANCE_ID"] = "web-1"
			cfg, err := config.Load(nil, func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			if err != nil {
				t.Fatal(err)
			}
			pcfg, err := processorConfig(cfg, topics.NewNames("hookstream"))
			if err != nil {
				t.Fatal(err)
			}
			if pcfg.AdminAddr != tt.want {
				t.Errorf("advertised admin address: got %q, want %q", pcfg.AdminAddr, tt.want)
			}
		})
	}
}

// TestSecondRunSaysOneIsRunning: a second `hookstream run` on the
// addresses of one that runs stops at once, naming the listener whose
// address is taken and its variable, and saying hookstream seems to be
// running already; the first one logs that its ingest listener takes
// webhooks from this host only, and how to open it.
func TestSecondRunSaysOneIsRunning(t *testing.T) {
	t.Parallel()
	d := newEmbedded(t)
	first := d.run(t, "first")
	if want := "set HOOKSTREAM_HTTP_ADDR=0.0.0.0:"; !strings.Contains(first.output.String(), want) {
		t.Errorf("first run's log: no line with %q:\n%s", want, first.output)
	}
	elsewhere := func(overrides map[string]string) map[string]string {
		env := map[string]string{"HOOKSTREAM_BROKERS": d.brokerAddr, "HOOKSTREAM_DATA_DIR": t.TempDir(),
			"HOOKSTREAM_HTTP_ADDR": kafkatest.FreeAddr(t), "HOOKSTREAM_ADMIN_ADDR": kafkatest.FreeAddr(t)}
		maps.Copy(env, overrides)
		return env
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"embedded broker", d.env(), "the embedded broker's address " + d.brokerAddr + " (HOOKSTREAM_EMBEDDED_ADDR) is in use"},
		{"ingest", elsewhere(map[string]string{"HOOKSTREAM_HTTP_ADDR": d.httpAddr}), "the ingest listener's address " + d.httpAddr + " (HOOKSTREAM_HTTP_ADDR) is in use"},
		{"admin", elsewhere(map[string]string{"HOOKSTREAM_ADMIN_ADDR": d.adminAddr}), "the admin listener's address " + d.adminAddr + " (HOOKSTREAM_ADMIN_ADDR) is in use"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := lagReplayRun(t, tc.env, "run", "--roles", "ingest")
			if code == 0 {
				t.Errorf("second run: exit 0, want non-zero")
			}
			for _, want := range []string{tc.want, "hookstream seems to be running already", "stop it, or give this one another address"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("second run: stderr %q, want it to contain %q", stderr, want)
				}
			}
		})
	}
	first.mustBeAlive(t)
}

// TestEmbeddedStartsWithoutWarnings: the quick start (the embedded broker
// and the sample sources file) logs no warning: the development defaults
// it runs with (loopback deliveries, plain http, secrets stored as
// written) are said once at INFO, and are warnings on a Kafka cluster.
func TestEmbeddedStartsWithoutWarnings(t *testing.T) {
	t.Parallel()
	d := newEmbedded(t)
	d.extra = map[string]string{"HOOKSTREAM_CONFIG": "../../examples/sources.yaml"}
	p := d.run(t, "hookstream run on the embedded broker")
	stop(t, p)
	log := p.output.String()
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			t.Errorf("log of the quick start: %s", l)
		}
	}
	for _, want := range []string{"embedded development broker", "HOOKSTREAM_DELIVERY_ALLOW_PRIVATE", "HOOKSTREAM_DELIVERY_REQUIRE_HTTPS", "HOOKSTREAM_SECRET_KEY"} {
		if !strings.Contains(log, want) {
			t.Errorf("log of the quick start: nothing names %s:\n%s", want, log)
		}
	}
}
