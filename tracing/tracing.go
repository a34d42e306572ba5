// Package tracing owns hookstream's OpenTelemetry tracing: the tracer
// provider and the W3C Trace Context propagator, set up from the standard
// OTEL_* variables alone (Setup), its sampler, which a provider's trace
// context does not steer (ExtractProvider), and the carrier that puts a trace
// context in a Kafka record's headers (Headers). Components take a
// Tracing in their configuration; its zero value traces nothing and still
// carries the context. It owns no span of its own: each component names
// and ends its spans.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// InstrumentationName names hookstream's tracers.
const InstrumentationName = "github.com/hookstream/hookstream"

// Tracing is what a component traces with: a tracer provider and the
// propagator of the context it carries. The zero value records nothing and
// propagates W3C Trace Context.
type Tracing struct {
	Provider   trace.TracerProvider
	Propagator propagation.TextMapPropagator
}

// Tracer is the component's tracer.
func (t Tracing) Tracer() trace.Tracer {
	if t.Provider == nil {
		return noop.NewTracerProvider().Tracer(InstrumentationName)
	}
	return t.Provider.Tracer(InstrumentationName)
}

// Propagation is the propagator of the carried context.
func (t Tracing) Propagation() propagation.TextMapPropagator {
	if t.Propagator == nil {
		return propagation.TraceContext{}
	}
	return t.Propagator
}

// Extract is ctx with the trace context of a record's headers, if any.
func (t Tracing) Extract(ctx context.Context, headers []kgo.RecordHeader) context.Context {
	return t.Propagation().Extract(ctx, (*Headers)(&headers))
}

// Inject writes the trace context of ctx to r's headers, in place of any
// they had.
func (t Tracing) Inject(ctx context.Context, r *kgo.Record) {
	t.Propagation().Inject(ctx, (*Headers)(&r.Headers))
}

// Headers is a record's headers as a propagation.TextMapCarrier: Get reads
// the last value of a key, Set replaces every value of it.
type Headers []kgo.RecordHeader

// Get returns the last value of key, "" when absent.
func (h *Headers) Get(key string) string {
	for i := len(*h) - 1; i >= 0; i-- {
		if (*h)[i].Key == key {
			return string((*h)[i].Value)
		}
	}
	return ""
}

// Set makes value the only value of key, changing the headers in place.
func (h *Headers) Set(key, value string) {
	hdr := kgo.RecordHeader{Key: key, Value: []byte(value)}
	i := slices.IndexFunc(*h, func(x kgo.RecordHeader) bool { return x.Key == key })
	if i < 0 {
		*h = append(*h, hdr)
		return
	}
	(*h)[i] = hdr
	rest := slices.DeleteFunc((*h)[i+1:], func(x kgo.RecordHeader) bool { return x.Key == key })
	*h = (*h)[:i+1+len(rest)]
}

// Keys lists the header keys.
func (h *Headers) Keys() []string {
	keys := make([]string, len(*h))
	for i, x := range *h {
		keys[i] = x.Key
	}
	return keys
}

// Setup builds the process's Tracing from the standard variables:
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT (none:
// nothing is exported, and the spans are Carrier's, which record nothing
// and carry the context), OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf, the default, or grpc),
// OTEL_SERVICE_NAME (default hookstream), OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER and its argument, OTEL_SDK_DISABLED, and the rest of
// what the SDK and its OTLP exporters read themselves (headers, timeouts,
// TLS, batching). The sampler decides where a trace enters hookstream, a
// provider's flags counting for nothing, and every later span follows its
// parent (see sampler); an unknown sampler or ratio is an error. shutdown
// flushes the spans still held; call it once the components have stopped.
// Setup does no I/O: the exporter connects when it first exports.
func Setup(ctx context.Context) (t Tracing, shutdown func(context.Context) error, err error) {
	t.Propagator = propagation.TraceContext{}
	none := func(context.Context) error { return nil }
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return t, none, nil
	}
	if !endpoint() {
		// Nothing to export to: spans that record nothing, each with an id
		// of its own, carry the context (see Carrier).
		t.Provider = Carrier{}
		return t, none, nil
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("hookstream")),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return t, nil, fmt.Errorf("tracing: resource: %w", err)
	}
	entry, err := entrySampler()
	if err != nil {
		return t, nil, err
	}
	exp, err := exporter(ctx)
	if err != nil {
		return t, nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithBatcher(exp), sdktrace.WithSampler(newSampler(entry)))
	t.Provider = tp
	return t, tp.Shutdown, nil
}

// endpoint reports whether an OTLP endpoint for traces is configured.
func endpoint() bool {
	return os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// exporter is the OTLP exporter of the configured protocol; the exporter
// reads its endpoint, headers, timeout and TLS settings itself.
func exporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch protocol {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_PROTOCOL %q: want http/protobuf or grpc", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: otlp %s exporter: %w", protocol, err)
	}
	return exp, nil
}

// hookstream's span attributes, besides OpenTelemetry's conventional ones.
const (
	// EventID is the event's <source>:<event-id>.
	EventID = attribute.Key("hookstream.event.id")
	// Outcome is the processor's decision on a record: processed,
	// duplicate, replayed or failed.
	Outcome = attribute.Key("hookstream.outcome")
	// Subscription is the id of the subscription a delivery is for.
	Subscription = attribute.Key("hookstream.subscription")
	// Attempt is a delivery's attempt number, from 1.
	Attempt = attribute.Key("hookstream.attempt")
)

// LogKey is the key of a log line's trace id.
const LogKey = "trace_id"

// TraceID is the trace_id attribute of a log line about the work ctx's
// span context belongs to: its trace's id, so that the line and the trace
// find each other. Without a valid span context it is the empty
// attribute, which slog leaves out. A record's context is
// TraceID(tr.Extract(ctx, r.Headers)).
func TraceID(ctx context.Context) slog.Attr {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return slog.Attr{}
	}
	return slog.String(LogKey, sc.TraceID().String())
}
