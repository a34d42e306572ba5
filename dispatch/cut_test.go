package dispatch

import (
	"fmt"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// TestCut: filters apply before batching, a batch holds at most batch_max
// events and maxBytes of body, a partial batch waits unless flushed, and
// covered accounts for filtered records only up to where a waiting batch
// begins.
func TestCut(t *testing.T) {
	// Records of partition 3 at offsets 10, 11, ...; "x" is filtered out.
	recs := func(sources ...string) []*kgo.Record {
		out := make([]*kgo.Record, len(sources))
		for i, s := range sources {
			out[i] = &kgo.Record{Partition: 3, Offset: int64(10 + i), Key: fmt.Appendf(nil, "%s:%d", s, i),
				Value:   []byte(`{"id":"` + fmt.Sprintf("%s:%d", s, i) + `"}`),
				Headers: []kgo.RecordHeader{{Key: topics.HeaderSource, Value: []byte(s)}, {Key: topics.HeaderEventType, Value: []byte("t")}}}
		}
		return out
	}
	tests := []struct {
		name     string
		batchMax int
		maxBytes int
		recs     []*kgo.Record
		flush    bool
		want     [][]string // event ids per message
		covered  int
	}{
		{"one per message, filtered skipped", 1, 0, recs("a", "x", "a"), false, [][]string{{"a:0"}, {"a:2"}}, 3},
		{"full batches; the partial waits", 2, 0, recs("a", "x", "a", "a", "x"), false, [][]string{{"a:0", "a:2"}}, 3},
		{"the partial flushed", 2, 0, recs("a", "x", "a", "a", "x"), true, [][]string{{"a:0", "a:2"}, {"a:3"}}, 5},
		{"only filtered: all covered", 5, 0, recs("x", "x"), false, nil, 2},
		{"filtered before a waiting batch covered", 5, 0, recs("x", "a", "x"), false, nil, 1},
		{"bytes bound a batch", 10, topics.BatchBodyBytes(2*len(`{"id":"a:0"}`), 2), recs("a", "a", "a"), true,
			[][]string{{"a:0", "a:1"}, {"a:2"}}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := subscriptions.Compile(subscriptions.Subscription{ID: "sub_a", Sources: []string{"a"}, BatchMax: tt.batchMax})
			msgs, covered := cut(c, judgeAll(c, tt.recs), tt.maxBytes, tt.flush)
			var got [][]string
			for _, m := range msgs {
				var ids []string
				for _, e := range m.events {
					ids = append(ids, e.id)
				}
				got = append(got, ids)
				if m.batch != (tt.batchMax > 1) {
					t.Errorf("message %s: batch %v with batch_max %d", m.id, m.batch, tt.batchMax)
				}
			}
			if !slices.EqualFunc(got, tt.want, slices.Equal) || covered != tt.covered {
				t.Errorf("got %v covering %d, want %v covering %d", got, covered, tt.want, tt.covered)
			}
		})
	}
	// A batch's id depends on where it is and what it holds, nothing else.
	r := recs("a", "a", "a")
	c := subscriptions.Compile(subscriptions.Subscription{ID: "sub_a", BatchMax: 2})
	b := subscriptions.Compile(subscriptions.Subscription{ID: "sub_b", BatchMax: 2})
	first, _ := cut(c, judgeAll(c, r), 0, false)
	again, _ := cut(c, judgeAll(c, r), 0, false)
	other, _ := cut(b, judgeAll(b, r), 0, false)
	shifted, _ := cut(c, judgeAll(c, r[1:]), 0, false)
	if first[0].id != again[0].id || first[0].id == other[0].id || first[0].id == shifted[0].id {
		t.Errorf("batch ids: %s, again %s, other subscription %s, other offsets %s; want the same twice, else different",
			first[0].id, again[0].id, other[0].id, shifted[0].id)
	}
}

// TestCutTransformFailure: an event whose transform fails is a message of
// its own, dead-lettered: the batch before it goes first, the batch after
// it starts anew, and every record stays accounted for in order.
func TestCutTransformFailure(t *testing.T) {
	var recs []*kgo.Record
	for i, data := range []string{`{"n":1}`, `{"n":2}`, `{}`, `{"n":4}`, `{"n":5}`} {
		id := fmt.Sprintf("a:%d", i)
		recs = append(recs, &kgo.Record{Partition: 1, Offset: int64(i), Key: []byte(id),
			Value:   []byte(`{"id":"` + id + `","source":"a","type":"t","data":` + data + `}`),
			Headers: []kgo.RecordHeader{{Key: topics.HeaderSource, Value: []byte("a")}, {Key: topics.HeaderEventType, Value: []byte("t")}}})
	}
	c := subscriptions.Compile(subscriptions.Subscription{ID: "sub_a", BatchMax: 10, Transform: `{"n": data.n}`})
	msgs, covered := cut(c, judgeAll(c, recs), 0, true)
	type got struct {
		body   string
		failed bool
		upto   int
	}
	var gots []got
	for _, m := range msgs {
		gots = append(gots, got{string(m.body), m.failed != nil, m.upto})
	}
	want := []got{{`{"events":[{"n":1},{"n":2}]}`, false, 2}, {"", true, 3}, {`{"events":[{"n":4},{"n":5}]}`, false, 5}}
	if !slices.Equal(gots, want) || covered != 5 {
		t.Errorf("got %v covering %d, want %v covering 5", gots, covered, want)
	}
	if env := string(msgs[0].carried()); env != `{"events":[`+string(recs[0].Value)+`,`+string(recs[1].Value)+`]}` {
		t.Errorf("a retry would carry %s, want the envelopes", env)
	}
}

// judgeAll judges every record for c, as a lane does.
func judgeAll(c *subscriptions.Compiled, recs []*kgo.Record) []item {
	items := make([]item, len(recs))
	for i, r := range recs {
		items[i] = judgeOne(c, subscriptions.NewEvent(r), 0, nil)
	}
	return items
}
