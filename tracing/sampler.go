package tracing

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// providerKey keys the span context of a provider's request in the
// context ExtractProvider returns.
type providerKey struct{}

// ExtractProvider is ctx with the trace context of a provider's request
// headers, if any: its trace id and span become the trace and the parent
// of the span started next from it, its tracestate is dropped (a
// provider's is not passed on), and its flags decide nothing: the span is
// sampled as the root of a trace would be (see Setup), and the random
// flag, which vouches for the trace id's randomness, is cleared (the
// provider chose the id).
func (t Tracing) ExtractProvider(ctx context.Context, header http.Header) context.Context {
	sc := trace.SpanContextFromContext(t.Propagation().Extract(context.Background(), propagation.HeaderCarrier(header)))
	if !sc.IsValid() {
		return ctx
	}
	sc = sc.WithTraceState(trace.TraceState{}).WithTraceFlags(sc.TraceFlags() &^ trace.FlagsRandom)
	return context.WithValue(trace.ContextWithRemoteSpanContext(ctx, sc), providerKey{}, sc)
}

// providerParent reports whether the span a span started from ctx would
// continue is a provider's (ExtractProvider).
func providerParent(ctx context.Context) bool {
	sc, ok := ctx.Value(providerKey{}).(trace.SpanContext)
	return ok && sc.Equal(trace.SpanContextFromContext(ctx))
}

// sampler decides which traces are exported. The configured sampler
// (entry) decides where a trace enters hookstream: for a span without a
// parent, and for one whose parent is a provider's, judged as the root of
// a trace of a random id, so that neither the provider's sampled flag nor
// a trace id it chose to pass a ratio decides. Every other span follows
// its parent's decision (a processor's span its receiver's, a delivery
// attempt its processor's), so a trace is exported whole or not at all.
type sampler struct {
	entry, follow sdktrace.Sampler
}

func newSampler(entry sdktrace.Sampler) sampler {
	return sampler{entry: entry, follow: sdktrace.ParentBased(entry)}
}

func (s sampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if !providerParent(p.ParentContext) {
		return s.follow.ShouldSample(p)
	}
	p.ParentContext = trace.ContextWithSpanContext(p.ParentContext, trace.SpanContext{})
	binary.BigEndian.PutUint64(p.TraceID[:8], rand.Uint64())
	binary.BigEndian.PutUint64(p.TraceID[8:], rand.Uint64())
	return s.entry.ShouldSample(p)
}

func (s sampler) Description() string { return "hookstream{entry:" + s.entry.Description() + "}" }

// entrySampler is the sampler OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG configure, as the SDK reads them, without its
// parentbased_ part: whichever is set, hookstream's spans follow their
// parent's decision (see sampler). Default always_on.
func entrySampler() (sdktrace.Sampler, error) {
	name := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER")))
	switch strings.TrimPrefix(name, "parentbased_") {
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		arg := strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER_ARG"))
		if arg == "" {
			return sdktrace.TraceIDRatioBased(1), nil
		}
		ratio, err := strconv.ParseFloat(arg, 64)
		if err != nil || ratio < 0 || ratio > 1 {
			return nil, fmt.Errorf("tracing: OTEL_TRACES_SAMPLER_ARG %q: want a ratio from 0 to 1", arg)
		}
		return sdktrace.TraceIDRatioBased(ratio), nil
	}
	if name == "" {
		return sdktrace.AlwaysSample(), nil
	}
	return nil, fmt.Errorf("tracing: OTEL_TRACES_SAMPLER %q: want always_on, always_off, traceidratio or one of them prefixed parentbased_", name)
}
