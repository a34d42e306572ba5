package tracing_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookstream/hookstream/tracing"
)

// BenchmarkSpan is one record's span as the processor makes it without an
// export: extracted from the record's headers, started, given its
// attributes when recording, injected into the record it writes, ended.
// "sdk" is the SDK without an exporter, "carrier" what Setup gives without
// an endpoint, "none" OTEL_SDK_DISABLED.
func BenchmarkSpan(b *testing.B) {
	headers := []kgo.RecordHeader{{Key: "traceparent", Value: []byte(parent)}}
	for _, tc := range []struct {
		name string
		tr   tracing.Tracing
	}{
		{"sdk", tracing.Tracing{Provider: sdktrace.NewTracerProvider()}},
		{"carrier", tracing.Tracing{Provider: tracing.Carrier{}}},
		{"none", tracing.Tracing{}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tracer := tc.tr.Tracer()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					ctx, span := tracer.Start(tc.tr.Extract(context.Background(), headers), "process", trace.WithSpanKind(trace.SpanKindConsumer))
					if span.IsRecording() {
						span.SetAttributes(attribute.String("messaging.system", "kafka"), attribute.String("messaging.destination.name", "hookstream.ingest"),
							attribute.String("messaging.destination.partition.id", "3"), attribute.Int("messaging.kafka.offset", 42),
							tracing.EventID.String("github:72d3162e"), tracing.Outcome.String("processed"))
					}
					tc.tr.Inject(ctx, &kgo.Record{})
					span.End()
				}
			})
		})
	}
}
