package main

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span kinds, as OTLP numbers them.
const (
	kindServer   = int32(tracepb.Span_SPAN_KIND_SERVER)
	kindClient   = int32(tracepb.Span_SPAN_KIND_CLIENT)
	kindConsumer = int32(tracepb.Span_SPAN_KIND_CONSUMER)
)

// span is what the stages need of one received span.
type span struct {
	traceID    string
	kind       int32
	ok         bool // not an error
	start, end uint64
}

// receiver is an OTLP/HTTP trace receiver (POST /v1/traces, protobuf).
type receiver struct {
	url string
	srv *http.Server

	mu    sync.Mutex
	spans []span
	last  time.Time // of the last export received
}

func newReceiver() (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{url: "http://" + ln.Addr().String()}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *receiver) close() { _ = r.srv.Close() }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.NotFound(w, req)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var er coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &er); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []span
	for _, rs := range er.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				got = append(got, span{traceID: hex.EncodeToString(s.GetTraceId()), kind: int32(s.GetKind()),
					ok: s.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR, start: s.GetStartTimeUnixNano(), end: s.GetEndTimeUnixNano()})
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.last = time.Now()
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

// settle waits until no span has arrived for a second (at most 30s).
func (r *receiver) settle(ctx context.Context) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		r.mu.Lock()
		quiet := time.Since(r.last) > time.Second
		r.mu.Unlock()
		if quiet {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// since returns the spans of the traces whose receiver span started at t
// or later, and forgets the others.
func (r *receiver) since(t time.Time) []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	from := uint64(t.UnixNano())
	keep := map[string]bool{}
	for _, s := range r.spans {
		if s.kind == kindServer && s.start >= from {
			keep[s.traceID] = true
		}
	}
	var out []span
	for _, s := range r.spans {
		if keep[s.traceID] {
			out = append(out, s)
		}
	}
	r.spans = nil
	return out
}
