package main

import (
	"context"
	"net"
	"net/http"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/hookstream/hookstream/internal/otlptest"
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

// receiver serves otlptest's OTLP/HTTP trace receiver (POST /v1/traces)
// on a port of its own, for hookstream's exporters.
type receiver struct {
	url  string
	srv  *http.Server
	recv *otlptest.Receiver
	seen int // spans already handed out by since
}

func newReceiver() (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{url: "http://" + ln.Addr().String(), recv: &otlptest.Receiver{}}
	r.srv = &http.Server{Handler: r.recv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *receiver) close() { _ = r.srv.Close() }

// settle waits until no span has arrived for a second (at most 30s).
func (r *receiver) settle(ctx context.Context) {
	deadline := time.Now().Add(30 * time.Second)
	last := r.recv.Count()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(time.Second)
		n := r.recv.Count()
		if n == last {
			return
		}
		last = n
	}
}

// since returns the spans received since the last call of the traces
// whose receiver span started at t or later.
func (r *receiver) since(t time.Time) []span {
	all := r.recv.Spans()
	fresh := all[r.seen:]
	r.seen = len(all)
	from := uint64(t.UnixNano())
	keep := map[string]bool{}
	for _, s := range fresh {
		if s.Kind == kindServer && s.Start >= from {
			keep[s.TraceID] = true
		}
	}
	var out []span
	for _, s := range fresh {
		if keep[s.TraceID] {
			out = append(out, span{traceID: s.TraceID, kind: s.Kind, ok: s.StatusCode != int32(tracepb.Status_STATUS_CODE_ERROR), start: s.Start, end: s.End})
		}
	}
	return out
}
