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

// stateTraceID is the trace_id of a log line about st written in ctx: the
// trace of ctx's span, else the event's.
func stateTraceID(ctx context.Context, st *statestore.State) slog.Attr {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, spanContext(st.Trace))
	}
	return tracing.TraceID(ctx)
}
