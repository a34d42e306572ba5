package topics

import (
	"errors"
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewEnvelope(tt.r, time.Now()); !errors.Is(err, ErrDecode) {
				t.Errorf("got %v, want ErrDecode", err)
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
