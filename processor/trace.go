package processor

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/hookstream/hookstream/statestore"
	"github.com/hookstream/hookstream/tracing"
)

// ledgerTrace is the ledger's form of a span context.
func ledgerTrace(sc trace.SpanContext) statestore.Trace {
	if !sc.IsValid() {
		return statestore.Trace{}
	}
	return statestore.Trace{TraceID: sc.TraceID(), SpanID: sc.SpanID(), Flags: byte(sc.TraceFlags())}
}

// spanContext is the span context the ledger keeps as t; not valid for
// none.
func spanContext(t statestore.Trace) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: t.TraceID, SpanID: t.SpanID, TraceFlags: trace.TraceFlags(t.Flags), Remote: true})
}

// linkOriginal links a replay's span to the span of the processing that
// claimed the event, which the ledger keeps in old: the replay is a new
// span in the trace its ingest record carries, and the link leads from it
// to the emission it repeats, whatever trace that was in.
func linkOriginal(span trace.Span, old statestore.State) {
	if sc := spanContext(old.Trace); sc.IsValid() {
		span.AddLink(trace.Link{SpanContext: sc})
	}
}

// stateTraceID is the trace_id of a log line about st written in ctx: the
// trace of ctx's span, else the event's.
func stateTraceID(ctx context.Context, st *statestore.State) slog.Attr {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, spanContext(st.Trace))
	}
	return tracing.TraceID(ctx)
}
