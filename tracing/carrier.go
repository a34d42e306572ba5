package tracing

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// Carrier is the tracer provider of a process that exports no span: its
// spans record nothing (no attribute, event or status is kept, IsRecording
// is false), and each has a span id of its own, so the context it carries
// on names the hop that carried it, as an exported span's would. A span
// continues its parent's trace with the parent's flags and trace state; a
// span without a parent starts a trace, marked sampled, as the SDK's
// default sampler would, and a span whose parent is a provider's
// (ExtractProvider) is marked sampled too, whatever the provider's flags.
// It costs an id and a context where the SDK without an exporter recorded
// every span for nothing.
type Carrier struct{ embedded.TracerProvider }

// Tracer returns the tracer of carrying spans.
func (Carrier) Tracer(string, ...trace.TracerOption) trace.Tracer { return carrierTracer{} }

type carrierTracer struct{ embedded.Tracer }

func (carrierTracer) Start(ctx context.Context, _ string, _ ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanContextFromContext(ctx)
	cfg := trace.SpanContextConfig{TraceID: parent.TraceID(), TraceFlags: parent.TraceFlags(), TraceState: parent.TraceState()}
	if providerParent(ctx) {
		cfg.TraceFlags = trace.FlagsSampled
	}
	if !parent.IsValid() {
		cfg = trace.SpanContextConfig{TraceFlags: trace.FlagsSampled}
		for !cfg.TraceID.IsValid() {
			binary.BigEndian.PutUint64(cfg.TraceID[:8], rand.Uint64())
			binary.BigEndian.PutUint64(cfg.TraceID[8:], rand.Uint64())
		}
	}
	for !cfg.SpanID.IsValid() {
		binary.BigEndian.PutUint64(cfg.SpanID[:], rand.Uint64())
	}
	s := carrierSpan{sc: trace.NewSpanContext(cfg)}
	return trace.ContextWithSpan(ctx, s), s
}

// carrierSpan is a span that records nothing and has a context.
type carrierSpan struct {
	noop.Span
	sc trace.SpanContext
}

func (s carrierSpan) SpanContext() trace.SpanContext { return s.sc }
