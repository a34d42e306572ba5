package pull

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// answer is what a request gets.
type answer struct {
	bodies   [][]byte // each event, copied out of the fetch that read it
	traces   [][]byte // each body's trace context, as JSON
	errs     []entryError
	to       []int64 // where the next answer begins
	from     []int64
	replayed bool
	bytes    int64 // of bodies, traces and errs: what it holds of the budget
}

// entryError is an event whose transform failed: served as an error, its
// body never.
type entryError struct {
	id        string
	partition int32
	offset    int64
	err       string
	trace     []byte // its trace context, as JSON
}

// tail is the answer's JSON after its events, its cursor signed with
// sub's current token.
func (a *answer) tail(sub subscriptions.Subscription, now time.Time) []byte {
	size := 256
	for _, tc := range a.traces {
		size += len(tc) + 1
	}
	b := bytes.NewBuffer(make([]byte, 0, size))
	b.WriteString(`],"trace_contexts":[`)
	for i, tc := range a.traces {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(tc)
	}
	keys := cursorKeys(sub, now)
	b.WriteString(`],"cursor":`)
	b.Write(topics.AppendJSONString(nil, cursor{rewind: rewindID(sub), from: a.from, to: a.to}.encode(sub.ID, keys[0])))
	if len(a.errs) > 0 {
		b.WriteString(`,"errors":[`)
		for i, e := range a.errs {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(b, `{"id":%s,"partition":%d,"offset":%d,"error":%s,"trace_context":%s}`,
				topics.AppendJSONString(nil, e.id), e.partition, e.offset, topics.AppendJSONString(nil, e.err), e.trace)
		}
		b.WriteByte(']')
	}
	if a.replayed {
		b.WriteString(`,"replayed":true`)
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// appendObject appends m as a JSON object of strings, its keys in order.
func appendObject(b []byte, m map[string]string) []byte {
	b = append(b, '{')
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = topics.AppendJSONString(b, k)
		b = append(b, ':')
		b = topics.AppendJSONString(b, m[k])
	}
	return append(b, '}')
}
