package topics

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func ingestRecord(key, body string, headers ...string) *kgo.Record {
	r := &kgo.Record{Topic: "t.ingest", Partition: 3, Key: []byte(key), Value: []byte(body)}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: headers[i], Value: []byte(headers[i+1])})
	}
	return r
}

func TestNewEnvelopeRefusesNonIngestRecords(t *testing.T) {
	tests := []struct {
		name string
		r    *kgo.Record
	}{
		{"no source", ingestRecord("s:1", "{}", HeaderEventID, "1")},
		{"no event id", ingestRecord("s:1", "{}", HeaderSource, "s")},
		{"keyless", ingestRecord("", "{}", HeaderSource, "s", HeaderEventID, "1")},
		{"key of another event", ingestRecord("s:2", "{}", HeaderSource, "s", HeaderEventID, "1")},
		{"empty value", ingestRecord("s:1", "", HeaderSource, "s", HeaderEventID, "1")},
		{"bad received-at", ingestRecord("s:1", "{}", HeaderSource, "s", HeaderEventID, "1", HeaderReceivedAt, "yesterday")},
		{"unreadable violations", ingestRecord("s:1", "{}", HeaderSource, "s", HeaderEventID, "1", HeaderViolations, "amount")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewEnvelope(tt.r, time.Now()); !errors.Is(err, ErrDecode) {
				t.Errorf("got %v, want ErrDecode", err)
			}
		})
	}
}

// TestNewEnvelopeBodyJSON checks that a body is taken as JSON exactly when
// CheckJSON passes it, whatever the record's headers claim (hs-body-json
// is the mark receivers once wrote).
func TestNewEnvelopeBodyJSON(t *testing.T) {
	ids := []string{HeaderSource, "s", HeaderEventID, "1"}
	marked := []string{"hs-body-json", "true"}
	for _, tt := range []struct {
		name     string
		body     string
		headers  []string
		wantJSON bool
	}{
		{"JSON", `{"a":1}`, nil, true},
		{"not JSON", `{"a":`, nil, false},
		{"marked, not JSON", `{"a":`, marked, false},
		{"marked, spliced", `{"a":1},"id":"s:forged"`, marked, false},
		{"marked, too deep", nested(MaxJSONDepth+1, "1"), marked, false},
		{"JSON, cut", `{"a":1}`, []string{HeaderTruncated, "9"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env, err := NewEnvelope(ingestRecord("s:1", tt.body, append(slices.Clone(ids), tt.headers...)...), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if gotJSON := env.Data != nil; gotJSON != tt.wantJSON || string(env.Body()) != tt.body {
				t.Errorf("JSON: got %v (body %q), want %v", gotJSON, env.Body(), tt.wantJSON)
			}
		})
	}
}

func TestEventRecord(t *testing.T) {
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	r := ingestRecord("s:1", `{"type":"x"}`, HeaderSource, "s", HeaderEventID, "1", HeaderEventType, "x",
		HeaderRequestID, "req", HeaderProviderPrefix+"x-a", "v")
	env, err := NewEnvelope(r, at)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := EventRecord("t.events", r, env)
	if err != nil {
		t.Fatal(err)
	}
	want, err := env.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if ev.Topic != "t.events" || ev.Partition != 3 || string(ev.Key) != "s:1" || string(ev.Value) != string(want) {
		t.Errorf("got %s/%d %s=%s, want t.events/3 s:1=%s", ev.Topic, ev.Partition, ev.Key, ev.Value, want)
	}
	var keys []string
	for _, h := range ev.Headers {
		keys = append(keys, h.Key)
	}
	if len(keys) != 3 || keys[0] != HeaderSource || keys[1] != HeaderEventID || keys[2] != HeaderEventType {
		t.Errorf("headers: got %v, want [%s %s %s]", keys, HeaderSource, HeaderEventID, HeaderEventType)
	}
	if env.Headers["x-a"] != "v" || env.Type != "x" {
		t.Errorf("envelope: got %+v", env)
	}
}

// FuzzNewEnvelope: any record either fails with ErrDecode or gives an
// envelope whose events record keeps the key and decodes back to the same
// id, source and event id. Never panics.
func FuzzNewEnvelope(f *testing.F) {
	f.Add([]byte("s:1"), []byte(`{"a":1}`), "s", "1", "application/json", "2026-11-21T10:00:00Z")
	f.Add([]byte(nil), []byte("a=%ff&b"), "", "\xff", "application/x-www-form-urlencoded", "")
	f.Fuzz(func(t *testing.T, key, value []byte, source, id, contentType, receivedAt string) {
		r := &kgo.Record{Key: key, Value: value, Headers: []kgo.RecordHeader{
			{Key: HeaderSource, Value: []byte(source)},
			{Key: HeaderEventID, Value: []byte(id)},
			{Key: HeaderContentType, Value: []byte(contentType)},
			{Key: HeaderReceivedAt, Value: []byte(receivedAt)},
		}}
		env, err := NewEnvelope(r, time.Unix(0, 0).UTC())
		if err != nil {
			if !errors.Is(err, ErrDecode) {
				t.Fatalf("got %v, want ErrDecode", err)
			}
			return
		}
		ev, err := EventRecord("t.events", r, env)
		if err != nil {
			t.Fatal(err)
		}
		if string(ev.Key) != string(key) {
			t.Errorf("events key: got %q, want %q", ev.Key, key)
		}
		back, err := ParseEnvelope(ev.Value)
		if err != nil {
			t.Fatalf("ParseEnvelope of %s: %v", ev.Value, err)
		}
		if want := jsonString(string(key)); back.ID != want || back.Source != jsonString(source) || back.EventID != jsonString(id) {
			t.Errorf("decoded: got %q %q %q, want %q %q %q", back.ID, back.Source, back.EventID, want, jsonString(source), jsonString(id))
		}
	})
}

// jsonString is s as a JSON string decodes: invalid UTF-8 replaced.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	_ = json.Unmarshal(b, &s)
	return s
}

// TestEventRecordMarksReplaysAndRedrives: a re-emitted event and an event
// redriven from a dead letter say so in their headers and envelopes; a
// first emission carries neither mark. Every envelope states its schema
// version.
func TestEventRecordMarksReplaysAndRedrives(t *testing.T) {
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name         string
		replay       int
		redrivenFrom string
	}{
		{"first emission", 0, ""},
		{"replay", 2, ""},
		{"redriven", 0, "t.dlq/1/17"},
		{"replay of a redriven event", 1, "t.dlq/1/17"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			headers := []string{HeaderSource, "s", HeaderEventID, "1"}
			if tt.redrivenFrom != "" {
				headers = append(headers, HeaderRedrivenFrom, tt.redrivenFrom)
			}
			r := ingestRecord("s:1", `{}`, headers...)
			env, err := NewEnvelope(r, at)
			if err != nil {
				t.Fatal(err)
			}
			env.Replay = tt.replay
			ev, err := EventRecord("t.events", r, env)
			if err != nil {
				t.Fatal(err)
			}
			h := make(map[string]string)
			for _, hd := range ev.Headers {
				h[hd.Key] = string(hd.Value)
			}
			wantReplay := ""
			if tt.replay > 0 {
				wantReplay = strconv.Itoa(tt.replay)
			}
			if h[HeaderReplay] != wantReplay || h[HeaderRedrivenFrom] != tt.redrivenFrom {
				t.Errorf("headers: got %s=%q %s=%q, want %q and %q", HeaderReplay, h[HeaderReplay],
					HeaderRedrivenFrom, h[HeaderRedrivenFrom], wantReplay, tt.redrivenFrom)
			}
			var got struct {
				SchemaVersion string `json:"schema_version"`
				Replay        *int   `json:"replay"`
				RedrivenFrom  string `json:"redriven_from"`
			}
			if err := json.Unmarshal(ev.Value, &got); err != nil {
				t.Fatal(err)
			}
			if got.SchemaVersion != EnvelopeSchemaVersion {
				t.Errorf("schema_version: got %q, want %q", got.SchemaVersion, EnvelopeSchemaVersion)
			}
			if (got.Replay == nil) != (tt.replay == 0) || got.Replay != nil && *got.Replay != tt.replay {
				t.Errorf("replay: got %s, want %d (absent when 0)", ev.Value, tt.replay)
			}
			if got.RedrivenFrom != tt.redrivenFrom {
				t.Errorf("redriven_from: got %q, want %q", got.RedrivenFrom, tt.redrivenFrom)
			}
			back, err := ParseEnvelope(ev.Value)
			if err != nil {
				t.Fatal(err)
			}
			if back.Replay != tt.replay || back.RedrivenFrom != tt.redrivenFrom || back.SchemaVersion != EnvelopeSchemaVersion {
				t.Errorf("ParseEnvelope: got replay %d redriven_from %q version %q", back.Replay, back.RedrivenFrom, back.SchemaVersion)
			}
		})
	}
}

// TestNewEnvelopeRefusesInvalidPayloads: a record the receiver marked
// with violations never becomes an event: NewEnvelope fails with a
// PayloadError that carries them and says what is wrong.
func TestNewEnvelopeRefusesInvalidPayloads(t *testing.T) {
	vs := []Violation{{Path: "/amount", Message: "minimum: got -5, want 0"}, {Path: "", Message: "missing property 'id'"}}
	ir := &IngestRecord{Source: "s", EventID: "1", Body: []byte(`{"amount":-5}`), Violations: vs}
	rec := ir.Record("t.ingest")
	if got := kafkaHeader(rec, HeaderViolations); got != `[{"path":"/amount","message":"minimum: got -5, want 0"},{"path":"","message":"missing property 'id'"}]` {
		t.Errorf("header %s: got %s", HeaderViolations, got)
	}
	parsed, err := ParseIngestRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(parsed.Violations, vs) {
		t.Errorf("decoded violations: got %v, want %v", parsed.Violations, vs)
	}
	_, err = NewEnvelope(rec, time.Now())
	var pe *PayloadError
	if !errors.As(err, &pe) || !slices.Equal(pe.Violations, vs) {
		t.Fatalf("got %v, want a PayloadError with %v", err, vs)
	}
	if want := "payload does not match the schema: /amount: minimum: got -5, want 0 (and 1 more)"; err.Error() != want {
		t.Errorf("message: got %q, want %q", err, want)
	}
}

func kafkaHeader(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// TestSubscriptionRecord: a topic subscription's record keeps the events
// record's key, its identifying headers, its marks and its trace context
// (so a reader of the team's topic continues the event's trace), and
// nothing else of hookstream's.
func TestSubscriptionRecord(t *testing.T) {
	events := &kgo.Record{Key: []byte("stripe:evt_1"), Value: []byte(`{"id":"stripe:evt_1"}`), Headers: []kgo.RecordHeader{
		{Key: HeaderSource, Value: []byte("stripe")},
		{Key: HeaderEventID, Value: []byte("evt_1")},
		{Key: HeaderEventType, Value: []byte("charge.succeeded")},
		{Key: HeaderReplay, Value: []byte("1")},
		{Key: HeaderTraceparent, Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
		{Key: HeaderTracestate, Value: []byte("vendor=x")},
		{Key: HeaderViolations, Value: []byte("something internal")},
	}}
	got := SubscriptionRecord("team.payments", events, []byte(`{"amount":1}`))
	if got.Topic != "team.payments" || string(got.Key) != "stripe:evt_1" || string(got.Value) != `{"amount":1}` {
		t.Fatalf("record: topic %q key %q value %q; want team.payments, the events key, the given value", got.Topic, got.Key, got.Value)
	}
	want := map[string]string{HeaderSource: "stripe", HeaderEventID: "evt_1", HeaderEventType: "charge.succeeded", HeaderReplay: "1",
		HeaderTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", HeaderTracestate: "vendor=x"}
	if len(got.Headers) != len(want) {
		t.Errorf("headers: %v, want exactly %v", got.Headers, want)
	}
	for _, h := range got.Headers {
		if want[h.Key] != string(h.Value) {
			t.Errorf("header %s = %q, want %q", h.Key, h.Value, want[h.Key])
		}
	}
}
