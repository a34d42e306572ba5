package ingest

import (
	"math"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// FuzzEventBytesBound: the cheap bound is never below the size of the
// events record the processor builds, whatever the body, content type and
// carried header, on the event's first emission or any replay; else an
// event that cannot be written would get 202.
func FuzzEventBytesBound(f *testing.F) {
	f.Add([]byte(`{"a":"<b>"}`), "application/json", "id-1")
	f.Add([]byte("\xff\xfe&\xff=\xfe&a&a&a=1"), "application/x-www-form-urlencoded", "<>&")
	f.Add([]byte("k=%ff%00&k=\x01&&=&x"), "application/x-www-form-urlencoded; charset=utf-8", "\xff\x00")
	f.Add([]byte("<xml>\x00</xml>"), "text/xml", "")
	f.Fuzz(func(t *testing.T, body []byte, contentType, carried string) {
		if len(body) == 0 {
			return
		}
		received := time.Date(2026, 11, 23, 13, 0, 0, 123456789, time.UTC)
		rec := &kgo.Record{Key: []byte("src:" + carried + "x"), Value: body, Headers: []kgo.RecordHeader{
			{Key: topics.HeaderSource, Value: []byte("src")},
			{Key: topics.HeaderEventID, Value: []byte(carried + "x")},
			{Key: topics.HeaderEventType, Value: []byte(carried)},
			{Key: topics.HeaderReceivedAt, Value: []byte(received.Format(topics.TimeFormat))},
			{Key: topics.HeaderRequestID, Value: []byte("req")},
			{Key: topics.HeaderContentType, Value: []byte(contentType)},
			{Key: topics.HeaderProviderPrefix + "x-carried", Value: []byte(carried)},
		}}
		env, err := topics.NewEnvelope(rec, received)
		if err != nil {
			t.Fatal(err)
		}
		env.Replay = math.MaxInt32
		ev, err := topics.EventRecord("", rec, env)
		if err != nil {
			t.Fatal(err)
		}
		if bound, n := eventBytesBound(rec, gjson.ValidBytes(body)), topics.RecordBytes(ev); bound < n {
			t.Errorf("bound %d below the events record's %d bytes", bound, n)
		}
	})
}
