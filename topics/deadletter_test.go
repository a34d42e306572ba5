package topics

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// FuzzDeadLetter checks that decoding an encoded dead letter gives it back,
// and that unwrapping it gives back the original record without error
// headers. Invariants: never panics; ParseDeadLetter(l.Record(t)) == l.
func FuzzDeadLetter(f *testing.F) {
	f.Add([]byte("github:1"), []byte(`{}`), HeaderSource, "github", "process", "boom", int32(3), int64(42), int64(1e18), "", 0, 0, "")
	f.Add([]byte("sub_1:e"), []byte(nil), HeaderError, "old", "deliver", "", int32(-1), int64(-5), int64(-1), "sub_1", 7, 503, "batch_1f")
	f.Add([]byte(nil), []byte("x"), HeaderRedrivenFrom, "t/0/1", "decode", "\xff", int32(0), int64(0), int64(0), "s", -2, -1, "")
	f.Add([]byte("sub_1:e"), []byte("x"), HeaderBatchID, "batch_old", "deliver", "", int32(0), int64(0), int64(0), "s", 1, 500, "batch_new")
	f.Fuzz(func(t *testing.T, key, value []byte, hkey, hvalue, stage, cause string, partition int32, offset, nanos int64, sub string, attempts, status int, batchID string) {
		orig := &kgo.Record{Topic: "t.ingest", Partition: partition, Offset: offset, Key: key, Value: value,
			Headers: []kgo.RecordHeader{{Key: hkey, Value: []byte(hvalue)}}}
		l := NewDeadLetter(orig, stage, cause, time.Unix(0, nanos).UTC())
		if sub != "" {
			l.Subscription, l.Attempts, l.LastStatus, l.BatchID = sub, attempts, status, batchID
		}
		rec := l.Record("t.dlq")
		if RecordBytes(rec) < int64(len(key)+len(value)) {
			t.Errorf("RecordBytes: got %d, want at least key and value", RecordBytes(rec))
		}
		got := ParseDeadLetter(rec)
		if !bytes.Equal(got.Key, l.Key) || !bytes.Equal(got.Value, l.Value) ||
			!slices.EqualFunc(got.Headers, l.Headers, equalHeader) ||
			got.Stage != l.Stage || got.Error != l.Error || got.OrigTopic != l.OrigTopic ||
			got.OrigPartition != l.OrigPartition || got.OrigOffset != l.OrigOffset || !got.FailedAt.Equal(l.FailedAt) ||
			got.Subscription != l.Subscription || got.Attempts != l.Attempts || got.LastStatus != l.LastStatus || got.BatchID != l.BatchID {
			t.Fatalf("decoded: got %+v, want %+v", got, l)
		}
		back := got.Unwrap("t.ingest")
		want := slices.DeleteFunc(slices.Clone(orig.Headers), func(h kgo.RecordHeader) bool {
			return isErrorHeader(h) || h.Key == HeaderRedrivenFrom
		})
		if !bytes.Equal(back.Key, key) || !bytes.Equal(back.Value, value) || !slices.EqualFunc(back.Headers, want, equalHeader) {
			t.Errorf("unwrapped: got %+v, want key %q value %q headers %v", back, key, value, want)
		}
	})
}

func equalHeader(a, b kgo.RecordHeader) bool { return a.Key == b.Key && bytes.Equal(a.Value, b.Value) }

// TestUnwrapDropsViolations: redriving a letter of stage validate sends
// the payload on unmarked, so the processor emits it instead of
// dead-lettering it again: the redrive is the operator's decision that it
// may pass.
func TestUnwrapDropsViolations(t *testing.T) {
	ir := &IngestRecord{Source: "s", EventID: "1", Body: []byte(`{}`), Violations: []Violation{{Path: "/a", Message: "m"}}}
	l := NewDeadLetter(ir.Record("t.ingest"), StageValidate, "payload does not match the schema: /a: m", time.Now())
	back := ParseDeadLetter(l.Record("t.dlq")).Unwrap("t.ingest")
	for _, h := range back.Headers {
		if h.Key == HeaderViolations {
			t.Fatalf("redriven record still carries %s: %s", HeaderViolations, h.Value)
		}
	}
	if _, err := NewEnvelope(back, time.Now()); err != nil {
		t.Errorf("envelope of the redriven record: %v", err)
	}
}

// TestRedrivenCutLetterIsNotTakenAsJSON: a dead letter cut to fit may end
// mid-JSON; once a redrive unwraps it into the ingest topic, its envelope
// carries the cut body as data_base64.
func TestRedrivenCutLetterIsNotTakenAsJSON(t *testing.T) {
	body := `{"items":[` + strings.Repeat(`"item",`, 2000) + `"last"]}`
	ir := &IngestRecord{Source: "s", EventID: "1", ContentType: "application/json", Body: []byte(body)}
	letter := NewDeadLetter(ir.Record("t.ingest"), StageProcess, "boom", time.Now()).Record("t.dlq")
	if !Fit(letter, 8<<10) {
		t.Fatalf("a %d-byte letter was not cut to 8 KiB", len(letter.Value))
	}
	env, err := NewEnvelope(ParseDeadLetter(letter).Unwrap("t.ingest"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if env.Data != nil {
		t.Error("redriven cut letter: envelope embeds the cut body as JSON data, want it base64")
	}
}
