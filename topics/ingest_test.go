package topics

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// FuzzIngestRecord checks that decoding an encoded ingest record gives it
// back. Invariants: never panics; ParseIngestRecord(ir.Record(t)) == ir for
// every record with a source, an event id and a body; otherwise the error
// is ErrDecode.
func FuzzIngestRecord(f *testing.F) {
	f.Add("github", "6f1c", "push", int64(1e18), "req-1", "application/json", "X-GitHub-Event", "push", []byte(`{}`))
	f.Add("s", "a:b", "", int64(-1), "", "", "", "", []byte("x"))
	f.Add("", "", "\xff", int64(0), "\x00", "text/plain", "A", "\xff", []byte(nil))
	f.Fuzz(func(t *testing.T, source, eventID, eventType string, nanos int64, requestID, contentType, header, value string, body []byte) {
		ir := &IngestRecord{Source: source, EventID: eventID, EventType: eventType, ReceivedAt: time.Unix(0, nanos).UTC(),
			RequestID: requestID, ContentType: contentType, Body: body,
			Provider: []kgo.RecordHeader{{Key: ProviderHeaderKey(header), Value: []byte(value)}}}
		rec := ir.Record("t.ingest")
		if !strings.HasPrefix(string(rec.Key), source+":") {
			t.Errorf("key: got %q, want it to start with %q", rec.Key, source+":")
		}
		got, err := ParseIngestRecord(rec)
		if source == "" || eventID == "" || len(body) == 0 {
			if !errors.Is(err, ErrDecode) {
				t.Fatalf("got %v, want ErrDecode", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if got.Source != ir.Source || got.EventID != ir.EventID || got.EventType != ir.EventType ||
			!got.ReceivedAt.Equal(ir.ReceivedAt) || got.RequestID != ir.RequestID || got.ContentType != ir.ContentType ||
			!bytes.Equal(got.Body, ir.Body) || !slices.EqualFunc(got.Provider, ir.Provider, equalHeader) {
			t.Fatalf("decoded: got %+v, want %+v", got, ir)
		}
	})
}
