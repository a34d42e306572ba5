package topics

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sampleEnvelopes() []*Envelope {
	at := time.Date(2026, 11, 21, 10, 0, 0, 123456789, time.UTC)
	form := &Envelope{ID: "slack:1", Source: "slack", EventID: "1", Type: "slack", ReceivedAt: at, ProcessedAt: at.Add(time.Millisecond)}
	form.SetBody([]byte("payload=%7B%22a%22%3A1%7D&tag=x&tag=y"), "application/x-www-form-urlencoded", false)
	return []*Envelope{
		{ID: "github:6f1c", Source: "github", EventID: "6f1c", Type: "push", ReceivedAt: at, ProcessedAt: at,
			ContentType: "application/json", Headers: map[string]string{"x-github-event": "push", "x-b": "<&>\"\\\u2028\x01é"},
			Data: json.RawMessage(`{"zen": "Keep it\n logically awesome.", "n": [1, 2.5e3]}`)},
		{ID: "xml:1", Source: "xml", EventID: "1", Type: "xml", ReceivedAt: at, ProcessedAt: at, Replay: 3, RedrivenFrom: "h.dlq/2/<7>",
			ContentType: "application/xml", DataBase64: []byte("<a>\xff\x00</a>")},
		{ID: "bad:\xff\xfe", Source: "bad", EventID: "\xff\xfe", Type: "t\x7f", ReceivedAt: at, ProcessedAt: at, Data: json.RawMessage(`1`)},
		form,
	}
}

// TestMarshalMatchesEncodingJSON checks the hand-written encoder against
// encoding/json on the same envelopes.
func TestMarshalMatchesEncodingJSON(t *testing.T) {
	for _, e := range sampleEnvelopes() {
		got, err := e.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		e.SchemaVersion = EnvelopeSchemaVersion // Marshal writes its own version
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var cg, cw bytes.Buffer
		if err := json.Compact(&cg, got); err != nil {
			t.Fatalf("%s: Marshal wrote invalid JSON %s: %v", e.ID, got, err)
		}
		if err := json.Compact(&cw, want); err != nil {
			t.Fatal(err)
		}
		if cg.String() != cw.String() {
			t.Errorf("%s:\ngot  %s\nwant %s", e.ID, cg.String(), cw.String())
		}
	}
}

// FuzzEnvelope: Marshal never fails or panics on any strings and any valid
// JSON data, writes valid JSON, and ParseEnvelope of Marshal gives back an
// envelope that encodes to the same JSON value (invalid UTF-8 in strings
// becomes U+FFFD, as with encoding/json).
func FuzzEnvelope(f *testing.F) {
	f.Add("github", "6f1c", "push", "x-a", "v", []byte(`{"a":1}`))
	f.Add("s", "\xff", "\u2028", "<", "&", []byte("not json"))
	f.Fuzz(func(t *testing.T, source, id, typ, hk, hv string, body []byte) {
		at := time.Unix(0, int64(len(body))).UTC()
		e := &Envelope{ID: source + ":" + id, Source: source, EventID: id, Type: typ, ReceivedAt: at, ProcessedAt: at,
			Headers: map[string]string{hk: hv}}
		e.SetBody(body, "application/x-www-form-urlencoded", json.Valid(body))
		b, err := e.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(b) {
			t.Fatalf("invalid JSON: %s", b)
		}
		back, err := ParseEnvelope(b)
		if err != nil {
			t.Fatal(err)
		}
		again, err := back.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		var got, want any
		if err := json.Unmarshal(again, &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("round trip:\ngot  %s\nwant %s", again, b)
		}
	})
}

// BenchmarkEnvelopeMarshal encodes a 1 KiB JSON event, beside
// encoding/json on the same envelope: the hand-written encoder exists
// because encoding/json re-validates and compacts Data.
func BenchmarkEnvelopeMarshal(b *testing.B) {
	at := time.Now().UTC()
	e := &Envelope{ID: "github:6f1c", Source: "github", EventID: "6f1c", Type: "push", ReceivedAt: at, ProcessedAt: at,
		ContentType: "application/json", Headers: map[string]string{"x-github-event": "push", "x-github-delivery": "6f1c"},
		Data: json.RawMessage(`{"pad":"` + strings.Repeat("x", 1000) + `"}`)}
	b.Run("hookstream", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.Marshal(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(e); err != nil {
				b.Fatal(err)
			}
		}
	})
}
