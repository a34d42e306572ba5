package subscriptions

import (
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/expr"
	"github.com/hookstream/hookstream/topics"
)

// Event is one event as a subscription judges and renders it: an events
// record, or an envelope given to test a subscription. Its envelope is
// parsed only when a filter or a transform reads it, and at most once. An
// Event is safe for concurrent use: the lanes of a dispatcher judge one
// event each on their own goroutine.
type Event struct {
	rec         *kgo.Record
	typeOnce    sync.Once
	source, typ string
	inputOnce   sync.Once
	input       *expr.Input
	err         error // the envelope does not parse
}

// NewEvent returns the event of an events record, or of a record holding
// an envelope as its value and nothing else.
func NewEvent(r *kgo.Record) *Event { return &Event{rec: r} }

// Record returns the record the event was made of.
func (e *Event) Record() *kgo.Record { return e.rec }

func (e *Event) sourceType() (string, string) {
	e.typeOnce.Do(func() { e.source, e.typ = topics.EventSourceType(e.rec) })
	return e.source, e.typ
}

// Input returns the event as expressions see it.
func (e *Event) Input() (*expr.Input, error) {
	e.inputOnce.Do(func() {
		env, err := topics.ParseEnvelope(e.rec.Value)
		if err != nil {
			e.err = fmt.Errorf("the event's envelope: %w", err)
		} else {
			e.input = expr.NewInput(env)
		}
	})
	return e.input, e.err
}

// TraceContext is the W3C Trace Context the event's record carries: its
// traceparent and tracestate headers, those it has. A webhook attempt
// continues it; a pull answer serves it beside the event.
func (e *Event) TraceContext() map[string]string {
	tc := make(map[string]string, 2)
	for _, h := range e.rec.Headers {
		if h.Key == topics.HeaderTraceparent || h.Key == topics.HeaderTracestate {
			tc[h.Key] = string(h.Value)
		}
	}
	return tc
}
