package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/otlptest"
	"github.com/hookstream/hookstream/tracing"
)

const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestSetupExports: with an endpoint, spans reach the OTLP receiver over
// http/protobuf (the default) or grpc, under OTEL_SERVICE_NAME.
func TestSetupExports(t *testing.T) {
	for _, tc := range []struct {
		protocol string
		receiver func(testing.TB) *otlptest.Receiver
	}{
		{"", otlptest.New},
		{"http/protobuf", otlptest.New},
		{"grpc", otlptest.NewGRPC},
	} {
		t.Run("protocol "+tc.protocol, func(t *testing.T) {
			recv := tc.receiver(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", tc.protocol)
			t.Setenv("OTEL_SERVICE_NAME", "hookstream-test")
			t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
			tr, shutdown, err := tracing.Setup(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			ctx := tr.Extract(context.Background(), []kgo.RecordHeader{{Key: "traceparent", Value: []byte(parent)}})
			_, span := tr.Tracer().Start(ctx, "work")
			span.End()
			if err := shutdown(context.Background()); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			spans := recv.Trace("4bf92f3577b34da6a3ce929d0e0e4736")
			if len(spans) != 1 {
				t.Fatalf("spans of the trace: got %+v, want 1", recv.Spans())
			}
			if s := spans[0]; s.Name != "work" || s.ParentID != "00f067aa0ba902b7" || s.Service != "hookstream-test" {
				t.Errorf("span: got %+v, want work, child of 00f067aa0ba902b7, service hookstream-test", s)
			}
		})
	}
}

// TestSetupRefusesUnknownProtocol: a protocol other than http/protobuf
// and grpc stops the setup, naming the variable.
func TestSetupRefusesUnknownProtocol(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	if _, _, err := tracing.Setup(context.Background()); err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL") {
		t.Errorf("Setup: got %v, want an error naming OTEL_EXPORTER_OTLP_PROTOCOL", err)
	}
}

// TestSetupWithoutEndpoint: nothing is exported, yet a span continues the
// extracted trace with an id of its own, and its context replaces the
// record's stale one.
func TestSetupWithoutEndpoint(t *testing.T) {
	tr := otlptest.Tracing(t, "")
	ctx := tr.Extract(context.Background(), []kgo.RecordHeader{{Key: "traceparent", Value: []byte(parent)}})
	ctx, span := tr.Tracer().Start(ctx, "work")
	defer span.End()
	if id := span.SpanContext().SpanID().String(); id == "00f067aa0ba902b7" {
		t.Errorf("span id: got the parent's %s, want one of its own", id)
	}
	r := &kgo.Record{Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("stale")}, {Key: "hs-source", Value: []byte("shop")}}}
	tr.Inject(ctx, r)
	got := (*tracing.Headers)(&r.Headers).Get("traceparent")
	want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + span.SpanContext().SpanID().String() + "-01"
	if got != want || len(r.Headers) != 2 {
		t.Errorf("headers: got %q (%d headers), want %q in place of the stale one", got, len(r.Headers), want)
	}
}

// TestZeroCarries: the zero Tracing records nothing and carries the
// extracted context on.
func TestZeroCarries(t *testing.T) {
	var tr tracing.Tracing
	ctx := tr.Extract(context.Background(), []kgo.RecordHeader{{Key: "traceparent", Value: []byte(parent)}})
	ctx, span := tr.Tracer().Start(ctx, "work")
	defer span.End()
	r := &kgo.Record{}
	tr.Inject(ctx, r)
	if got := (*tracing.Headers)(&r.Headers).Get("traceparent"); got != parent {
		t.Errorf("traceparent: got %q, want %q", got, parent)
	}
}

// TestTraceIDLogs: a log line given a record's context names its trace as
// trace_id; one given a context without a trace has no trace_id at all.
func TestTraceIDLogs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	var tr tracing.Tracing
	ctx := tr.Extract(context.Background(), []kgo.RecordHeader{{Key: "traceparent", Value: []byte(parent)}})
	log.Info("about an event", tracing.TraceID(ctx))
	log.Info("about nothing", tracing.TraceID(context.Background()))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var first, second map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &second); err != nil {
		t.Fatal(err)
	}
	if got, want := first["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736"; got != want {
		t.Errorf("trace_id: got %v, want %s (line %s)", got, want, lines[0])
	}
	if _, ok := second["trace_id"]; ok || strings.Contains(lines[1], `"":`) {
		t.Errorf("line without a trace: got %s, want no trace_id and no empty key", lines[1])
	}
}

// TestCarrier: without an endpoint, a span records nothing; one without a
// parent starts a sampled trace; a child continues its parent's trace
// with an id of its own, the parent's flags and trace state.
func TestCarrier(t *testing.T) {
	tr := otlptest.Tracing(t, "")
	if _, ok := tr.Provider.(tracing.Carrier); !ok {
		t.Fatalf("provider without an endpoint: got %T, want tracing.Carrier", tr.Provider)
	}
	_, root := tr.Tracer().Start(context.Background(), "root")
	if sc := root.SpanContext(); !sc.IsValid() || !sc.IsSampled() || root.IsRecording() {
		t.Errorf("root: got %v, sampled %v, recording %v; want a valid sampled context, not recording", sc, sc.IsSampled(), root.IsRecording())
	}
	for _, flags := range []string{"01", "00"} {
		headers := []kgo.RecordHeader{
			{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-" + flags)},
			{Key: "tracestate", Value: []byte("vendor=1")},
		}
		ctx, child := tr.Tracer().Start(tr.Extract(context.Background(), headers), "child")
		r := &kgo.Record{}
		tr.Inject(ctx, r)
		h := (*tracing.Headers)(&r.Headers)
		want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + child.SpanContext().SpanID().String() + "-" + flags
		if got := h.Get("traceparent"); got != want || child.SpanContext().SpanID().String() == "00f067aa0ba902b7" || h.Get("tracestate") != "vendor=1" {
			t.Errorf("child of flags %s: got %q, tracestate %q; want %q with a span id of its own, vendor=1", flags, got, h.Get("tracestate"), want)
		}
	}
}

// TestSetupRefusesUnknownSampler: a sampler or a ratio the SDK does not
// know stops the setup, naming the variable.
func TestSetupRefusesUnknownSampler(t *testing.T) {
	for _, tc := range []struct{ sampler, arg, want string }{
		{"jaeger_remote", "", "OTEL_TRACES_SAMPLER"},
		{"parentbased_", "", "OTEL_TRACES_SAMPLER"},
		{"traceidratio", "half", "OTEL_TRACES_SAMPLER_ARG"},
		{"parentbased_traceidratio", "1.5", "OTEL_TRACES_SAMPLER_ARG"},
	} {
		t.Run(tc.sampler+" "+tc.arg, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
			t.Setenv("OTEL_TRACES_SAMPLER", tc.sampler)
			t.Setenv("OTEL_TRACES_SAMPLER_ARG", tc.arg)
			if _, _, err := tracing.Setup(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want+" ") {
				t.Errorf("Setup: got %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// TestHopsFollowParent: a span continuing a record's context (a
// processor's, a delivery attempt's) follows its parent's decision,
// whatever the configured sampler would decide for a trace of its own, so
// a trace is exported whole or not at all.
func TestHopsFollowParent(t *testing.T) {
	for _, tc := range []struct {
		sampler, arg, flags string
		exported            bool
	}{
		{"traceidratio", "1e-12", "01", true},
		{"parentbased_traceidratio", "1e-12", "01", true},
		{"traceidratio", "1", "00", false},
		{"always_on", "", "00", false},
	} {
		t.Run(tc.sampler+" "+tc.arg+" parent "+tc.flags, func(t *testing.T) {
			t.Setenv("OTEL_TRACES_SAMPLER", tc.sampler)
			t.Setenv("OTEL_TRACES_SAMPLER_ARG", tc.arg)
			recv := otlptest.New(t)
			tr := otlptest.Tracing(t, recv.URL)
			traceparent := "00-4bf92f3577b34da60000000000000000-00f067aa0ba902b7-" + tc.flags
			ctx := tr.Extract(context.Background(), []kgo.RecordHeader{{Key: "traceparent", Value: []byte(traceparent)}})
			_, span := tr.Tracer().Start(ctx, "hop")
			span.End()
			if got := span.SpanContext().IsSampled(); got != tc.exported {
				t.Errorf("sampled: got %v, want %v", got, tc.exported)
			}
		})
	}
}

// TestCarrierProvider: without an endpoint, a span whose parent is a
// provider's continues its trace marked sampled, as a root would be,
// whatever the provider's flags (random among them), without the
// provider's tracestate.
func TestCarrierProvider(t *testing.T) {
	tr := otlptest.Tracing(t, "")
	for _, flags := range []string{"01", "00", "03"} {
		header := http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-" + flags}, "Tracestate": {"vendor=1"}}
		ctx, span := tr.Tracer().Start(tr.ExtractProvider(context.Background(), header), "receive")
		r := &kgo.Record{}
		tr.Inject(ctx, r)
		h := (*tracing.Headers)(&r.Headers)
		want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + span.SpanContext().SpanID().String() + "-01"
		if got := h.Get("traceparent"); got != want || h.Get("tracestate") != "" {
			t.Errorf("child of a provider's span of flags %s: got %q, tracestate %q; want %q, none", flags, got, h.Get("tracestate"), want)
		}
	}
}
