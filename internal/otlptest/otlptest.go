// Package otlptest is a real OTLP trace receiver for tests: over HTTP it
// accepts POST /v1/traces and decodes the protobuf
// ExportTraceServiceRequest, over gRPC it serves the TraceService, and it
// keeps the spans for the test to read. It mocks no tracer: what it holds
// is what the SDK's exporter sent.
package otlptest

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/hookstream/hookstream/tracing"
)

// Span is one received span, flattened.
type Span struct {
	Service  string // the resource's service.name
	Name     string
	TraceID  string // hex
	SpanID   string // hex
	ParentID string // hex, "" for a root
	Kind     int32
	// Attrs are the span's attributes, every value as a string.
	Attrs map[string]string
	// Links are the span ids the span links to.
	Links []string
	// StatusCode is the span status: 0 unset, 1 ok, 2 error.
	StatusCode int32
	Start, End uint64 // Unix nanoseconds
}

// Receiver is an OTLP/HTTP receiver of traces.
type Receiver struct {
	// URL is its base URL, the value of OTEL_EXPORTER_OTLP_ENDPOINT.
	URL string
	// CountOnly keeps no span: each export request is decoded and its
	// spans counted (Count), for a receiver under load.
	CountOnly bool

	mu    sync.Mutex
	spans []Span
	count int64
}

// New starts a receiver, closed at cleanup.
func New(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// ServeHTTP serves POST /v1/traces, the OTLP/HTTP protobuf export.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.NotFound(w, req)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "content type "+ct, http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var er coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &er); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.take(&er)
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

// take keeps the spans of an export request.
func (r *Receiver) take(er *coltrace.ExportTraceServiceRequest) {
	if r.CountOnly {
		n := 0
		for _, rs := range er.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				n += len(ss.GetSpans())
			}
		}
		r.mu.Lock()
		r.count += int64(n)
		r.mu.Unlock()
		return
	}
	var got []Span
	for _, rs := range er.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					Service: service, Name: s.GetName(), Kind: int32(s.GetKind()),
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					Attrs: attrs(s.GetAttributes()), StatusCode: int32(s.GetStatus().GetCode()),
					Start: s.GetStartTimeUnixNano(), End: s.GetEndTimeUnixNano(),
				}
				if p := s.GetParentSpanId(); len(p) > 0 {
					sp.ParentID = hex.EncodeToString(p)
				}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, hex.EncodeToString(l.GetSpanId()))
				}
				got = append(got, sp)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.count += int64(len(got))
	r.mu.Unlock()
}

// Count returns how many spans were received so far.
func (r *Receiver) Count() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// NewGRPC starts a receiver of OTLP over gRPC, stopped at cleanup; its URL
// is http://<address>, the value of OTEL_EXPORTER_OTLP_ENDPOINT with
// OTEL_EXPORTER_OTLP_PROTOCOL=grpc (plain text).
func NewGRPC(t testing.TB) *Receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{URL: "http://" + ln.Addr().String()}
	srv := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(srv, traceService{r: r})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return r
}

// traceService is the gRPC TraceService of a Receiver.
type traceService struct {
	coltrace.UnimplementedTraceServiceServer
	r *Receiver
}

func (s traceService) Export(_ context.Context, er *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	s.r.take(er)
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Trace returns the spans received so far of one trace.
func (r *Receiver) Trace(traceID string) []Span {
	var out []Span
	for _, s := range r.Spans() {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = value(kv.GetValue())
	}
	return m
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	default:
		return fmt.Sprint(v)
	}
}

// Tracing is tracing.Setup with OTEL_EXPORTER_OTLP_ENDPOINT set to endpoint
// ("": no export) and span batches exported every 50ms, shut down at
// cleanup. Other OTEL_* variables the test sets count too.
func Tracing(t testing.TB, endpoint string) tracing.Tracing {
	t.Helper()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	tr, shutdown, err := tracing.Setup(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shutdown(context.Background()) })
	return tr
}

// Tree renders spans (of one trace) as a tree, each span on a line: its
// name, kind, start after the trace's first span, duration and
// hookstream's and the conventional status attributes, children by start
// time under their parent, and the spans each links to. A span whose
// parent is not among them is a root, with its parent's id.
func Tree(spans []Span) string {
	if len(spans) == 0 {
		return ""
	}
	byID := make(map[string]Span, len(spans))
	children := make(map[string][]Span)
	var roots []Span
	start := spans[0].Start
	for _, s := range spans {
		byID[s.SpanID] = s
		start = min(start, s.Start)
	}
	for _, s := range spans {
		if _, ok := byID[s.ParentID]; ok {
			children[s.ParentID] = append(children[s.ParentID], s)
		} else {
			roots = append(roots, s)
		}
	}
	byStart := func(a, b Span) int { return cmp.Compare(a.Start, b.Start) }
	slices.SortFunc(roots, byStart)
	var b strings.Builder
	var walk func(s Span, indent, branch string)
	walk = func(s Span, indent, branch string) {
		fmt.Fprintf(&b, "%s%s%s [%s] +%s %s%s", indent, branch, s.Name, kinds[s.Kind],
			ms(s.Start-start), ms(s.End-s.Start), shownAttrs(s))
		if _, ok := byID[s.ParentID]; !ok && s.ParentID != "" {
			fmt.Fprintf(&b, " (parent %s)", s.ParentID)
		}
		for _, l := range s.Links {
			name := "?"
			if ls, ok := byID[l]; ok {
				name = ls.Name + " +" + ms(ls.Start-start)
			}
			fmt.Fprintf(&b, " (link to %s %s)", l, name)
		}
		b.WriteByte('\n')
		kids := children[s.SpanID]
		slices.SortFunc(kids, byStart)
		next := indent
		switch branch {
		case "├─ ":
			next += "│  "
		case "└─ ":
			next += "   "
		}
		for i, k := range kids {
			br := "├─ "
			if i == len(kids)-1 {
				br = "└─ "
			}
			walk(k, next, br)
		}
	}
	for _, r := range roots {
		walk(r, "", "")
	}
	return b.String()
}

var kinds = map[int32]string{1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}

// shownAttrs are the attributes Tree shows.
func shownAttrs(s Span) string {
	var out []string
	for _, k := range []string{"hookstream.event.id", "hookstream.outcome", "hookstream.subscription", "hookstream.attempt",
		"messaging.destination.partition.id", "messaging.kafka.offset", "http.response.status_code"} {
		if v, ok := s.Attrs[k]; ok {
			out = append(out, k+"="+v)
		}
	}
	if s.StatusCode == 2 {
		out = append(out, "error")
	}
	if len(out) == 0 {
		return ""
	}
	return " " + strings.Join(out, " ")
}

// ms is a duration of nanoseconds in milliseconds.
func ms(ns uint64) string {
	return strconv.FormatFloat(float64(ns)/1e6, 'f', 1, 64) + "ms"
}
