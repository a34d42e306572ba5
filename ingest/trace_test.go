package ingest_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookstream/hookstream/ingest"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/internal/otlptest"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/tracing"
)

// TestRecordCarriesTraceContext: the ingest record's traceparent is the
// receiver's span's, in the provider's trace (without spans, the
// provider's own), once, without the provider's tracestate (a
// provider's is not passed on); a source that carries the provider's
// traceparent as a provider header keeps it apart, as hs-h-traceparent.
func TestRecordCarriesTraceContext(t *testing.T) {
	const (
		traceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
		provider = "00-" + traceID + "-00f067aa0ba902b7-01"
	)
	sdk := otlptest.Tracing(t, "")
	for _, tc := range []struct {
		name    string
		tracing tracing.Tracing
		newSpan bool
	}{
		{"no spans", tracing.Tracing{}, false},
		{"spans", sdk, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := kafkatest.New(t, 1, 64<<10)
			sources := ingest.Sources{Sources: map[string]ingest.Source{"traced": {Headers: []string{"traceparent"}}}}
			rc := newReceiver(t, env, ingest.Config{Sources: sources, Tracing: tc.tracing})
			header := http.Header{"Content-Type": {"application/json"}, "X-Event-Id": {"e-1"},
				"Traceparent": {provider}, "Tracestate": {"vendor=1"}}
			if resp := rc.post(t, "traced", header, `{}`); resp.status != http.StatusAccepted {
				t.Fatalf("status: got %d %v, want 202", resp.status, resp.body)
			}
			recs := env.Records(t, env.Names.Ingest)
			if len(recs) != 1 {
				t.Fatalf("records: got %d, want 1", len(recs))
			}
			n := 0
			for _, h := range recs[0].Headers {
				if h.Key == topics.HeaderTraceparent {
					n++
				}
			}
			h := kafkatest.Headers(recs[0])
			got := h[topics.HeaderTraceparent]
			if n != 1 || !strings.HasPrefix(got, "00-"+traceID+"-") || (got != provider) != tc.newSpan {
				t.Errorf("%s: got %q (%d headers), want one in trace %s, a new span: %v", topics.HeaderTraceparent, got, n, traceID, tc.newSpan)
			}
			if got, ok := h[topics.HeaderTracestate]; ok {
				t.Errorf("%s: got %q, want none: the provider's is not passed on", topics.HeaderTracestate, got)
			}
			if got := h[topics.ProviderHeaderKey("traceparent")]; got != provider {
				t.Errorf("%s: got %q, want the provider's %q", topics.ProviderHeaderKey("traceparent"), got, provider)
			}
		})
	}
}

// TestRejectedLogNamesTrace: the log line about a rejected webhook names
// the trace of its request, the provider's.
func TestRejectedLogNamesTrace(t *testing.T) {
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	env := kafkatest.New(t, 1, 64<<10)
	cfg := ingest.Config{Sources: testSources, MaxBody: 64 << 10, AckTimeout: 5 * time.Second, Topic: env.Names.Ingest}
	log, logs := kafkatest.CaptureLogs(t)
	h, err := ingest.New(cfg, env.Client(t, ingest.ProducerOpts(cfg)...), log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	rc := &receiver{env: env, srv: srv, h: h}
	header := githubHeaders("d-1", `{"other":"body"}`)
	header.Set("Traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	if resp := rc.post(t, "github", header, `{}`); resp.status != http.StatusUnauthorized {
		t.Fatalf("status: got %d %v, want 401", resp.status, resp.body)
	}
	lines := logs.Lines("rejected webhook")
	if len(lines) != 1 || lines[0]["trace_id"] != traceID {
		t.Errorf("rejected webhook lines: got %v, want one with trace_id %s", lines, traceID)
	}
}

// TestHostileTraceContext: a provider's traceparent or tracestate that
// is malformed, forged to the zero trace or oversized is not carried: the
// webhook is accepted and its record starts a trace of its own (with
// tracing off as with export; with no spans at all, none), with no
// tracestate.
func TestHostileTraceContext(t *testing.T) {
	valid := regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$`)
	members := make([]string, 40)
	for i := range members {
		members[i] = fmt.Sprintf("v%d=1", i)
	}
	const (
		providerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		good          = "00-" + providerTrace + "-00f067aa0ba902b7-01"
	)
	hostile := []struct{ name, traceparent, tracestate string }{
		{"zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "vendor=1"},
		{"zero span id", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "vendor=1"},
		{"version ff", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=1"},
		{"not hex", "00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01", "vendor=1"},
		{"4 KiB", "00-" + strings.Repeat("a", 4096), "vendor=1"},
		{"tracestate of 40 members", good, strings.Join(members, ",")},
		{"tracestate value of 600 bytes", good, "vendor=" + strings.Repeat("x", 600)},
	}
	sdk := otlptest.Tracing(t, "")
	for _, tr := range []struct {
		name     string
		tracing  tracing.Tracing
		newTrace bool
	}{
		{"no spans", tracing.Tracing{}, false},
		{"off", tracing.Tracing{Provider: tracing.Carrier{}}, true},
		{"exported", sdk, true},
	} {
		t.Run(tr.name, func(t *testing.T) {
			env := kafkatest.New(t, 1, 64<<10)
			rc := newReceiver(t, env, ingest.Config{Sources: ingest.Sources{Sources: map[string]ingest.Source{"traced": {}}}, Tracing: tr.tracing})
			for i, tc := range hostile {
				header := http.Header{"Content-Type": {"application/json"}, "X-Event-Id": {fmt.Sprintf("e-%d", i)},
					"Traceparent": {tc.traceparent}, "Tracestate": {tc.tracestate}}
				if resp := rc.post(t, "traced", header, `{}`); resp.status != http.StatusAccepted {
					t.Fatalf("%s: status: got %d %v, want 202", tc.name, resp.status, resp.body)
				}
			}
			recs := env.Records(t, env.Names.Ingest)
			if len(recs) != len(hostile) {
				t.Fatalf("records: got %d, want %d", len(recs), len(hostile))
			}
			for i, tc := range hostile {
				h := kafkatest.Headers(recs[i])
				got := h[topics.HeaderTraceparent]
				trace := strings.Split(got, "-")
				switch {
				case got == "" && tc.traceparent != good && !tr.newTrace:
				case !valid.MatchString(got):
					t.Errorf("%s: %s %q, want a valid one", tc.name, topics.HeaderTraceparent, got)
				case tc.traceparent == good && trace[1] != providerTrace:
					t.Errorf("%s: %s %q, want the provider's trace %s", tc.name, topics.HeaderTraceparent, got, providerTrace)
				case tc.traceparent != good && (trace[1] == providerTrace || trace[1] == strings.Repeat("0", 32)):
					t.Errorf("%s: %s %q, want a trace of its own", tc.name, topics.HeaderTraceparent, got)
				}
				if got := h[topics.HeaderTracestate]; got != "" {
					t.Errorf("%s: %s %q, want none", tc.name, topics.HeaderTracestate, got)
				}
			}
		})
	}
}

// TestProviderDoesNotDecideSampling: a provider's traceparent sets the
// trace and the parent of the receiver's span, never whether the trace is
// exported: the configured sampler decides. At 0% nothing of a request
// is exported, accepted or rejected, though the provider marks it
// sampled, and its record carries the decision (not sampled) on; at 100%
// both are exported though the provider marks them not sampled.
func TestProviderDoesNotDecideSampling(t *testing.T) {
	const (
		random   = "4bf92f3577b34da6a3ce929d0e0e4736"
		chosen   = "4bf92f3577b34da60000000000000000" // passes any ratio judged on the trace id
		provider = "00f067aa0ba902b7"
	)
	for _, tc := range []struct {
		name, sampler, arg, traceID, flags string
		exported                           bool
	}{
		{"traceidratio 0, provider sampled", "traceidratio", "0", random, "01", false},
		{"traceidratio 0, provider sampled and random", "traceidratio", "0", random, "03", false},
		{"parentbased_traceidratio 0, provider sampled", "parentbased_traceidratio", "0", random, "01", false},
		{"parentbased_always_off, provider sampled", "parentbased_always_off", "", random, "01", false},
		{"parentbased_traceidratio 1e-12, a trace id chosen to pass it", "parentbased_traceidratio", "1e-12", chosen, "01", false},
		{"traceidratio 1e-12, a trace id chosen to pass it", "traceidratio", "1e-12", chosen, "01", false},
		{"default sampler, provider not sampled", "", "", random, "00", true},
		{"traceidratio 1, provider not sampled", "traceidratio", "1", random, "00", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OTEL_TRACES_SAMPLER", tc.sampler)
			t.Setenv("OTEL_TRACES_SAMPLER_ARG", tc.arg)
			recv := otlptest.New(t)
			tr := otlptest.Tracing(t, recv.URL)
			env := kafkatest.New(t, 1, 64<<10)
			rc := newReceiver(t, env, ingest.Config{Tracing: tr})
			traceparent := "00-" + tc.traceID + "-" + provider + "-" + tc.flags
			accepted := githubHeaders("d-1", `{}`)
			rejected := githubHeaders("d-2", `{"other":"body"}`)
			for _, h := range []http.Header{accepted, rejected} {
				h.Set("Traceparent", traceparent)
				h.Set("Tracestate", "vendor=1")
			}
			if resp := rc.post(t, "github", accepted, `{}`); resp.status != http.StatusAccepted {
				t.Fatalf("accepted: status: got %d %v, want 202", resp.status, resp.body)
			}
			if resp := rc.post(t, "github", rejected, `{}`); resp.status != http.StatusUnauthorized {
				t.Fatalf("rejected: status: got %d %v, want 401", resp.status, resp.body)
			}
			if err := tr.Provider.(interface{ ForceFlush(context.Context) error }).ForceFlush(context.Background()); err != nil {
				t.Fatal(err)
			}
			spans := recv.Spans()
			switch {
			case !tc.exported && len(spans) != 0:
				t.Errorf("spans: got %+v, want none", spans)
			case tc.exported && len(spans) != 2:
				t.Errorf("spans: got %+v, want 2", spans)
			}
			for _, s := range spans {
				if s.TraceID != tc.traceID || s.ParentID != provider {
					t.Errorf("span %s: got trace %s, parent %s; want the provider's %s, %s", s.Name, s.TraceID, s.ParentID, tc.traceID, provider)
				}
			}
			recs := env.Records(t, env.Names.Ingest)
			if len(recs) != 1 {
				t.Fatalf("records: got %d, want 1", len(recs))
			}
			h := kafkatest.Headers(recs[0])
			got := strings.Split(h[topics.HeaderTraceparent], "-")
			wantFlags := map[bool]string{true: "01", false: "00"}[tc.exported]
			if len(got) != 4 || got[1] != tc.traceID || got[2] == provider || got[3] != wantFlags {
				t.Errorf("%s: got %q, want the receiver's span in trace %s, flags %s", topics.HeaderTraceparent, h[topics.HeaderTraceparent], tc.traceID, wantFlags)
			}
			if got := h[topics.HeaderTracestate]; got != "" {
				t.Errorf("%s: got %q, want none: a provider's is not passed on", topics.HeaderTracestate, got)
			}
		})
	}
}
