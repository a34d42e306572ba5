package topics

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestOperationalIngestRecord(t *testing.T) {
	at := time.Date(2026, 11, 21, 10, 0, 0, 123, time.UTC)
	op := &Operational{
		Type:           OpDeliveryDeadLettered,
		SubscriptionID: "sub1",
		Event:          "github:6f1c",
		Attempts:       8,
		LastStatus:     500,
		Error:          "HTTP 500",
		At:             at,
	}
	ir := op.IngestRecord("sub1", "github:6f1c", "8")
	if ir.Source != OperationalSource || ir.EventType != OpDeliveryDeadLettered || !ir.ReceivedAt.Equal(at) {
		t.Fatalf("ingest record %+v: source, type or received_at wrong", ir)
	}
	if again := op.IngestRecord("sub1", "github:6f1c", "8"); again.EventID != ir.EventID {
		t.Errorf("event id %q, then %q: want a deterministic id", again.EventID, ir.EventID)
	}
	if other := op.IngestRecord("sub1", "github:6f1c", "9"); other.EventID == ir.EventID {
		t.Errorf("different facts share the event id %q", ir.EventID)
	}
	if !strings.HasPrefix(ir.EventID, OpDeliveryDeadLettered+"-") {
		t.Errorf("event id %q: want it to start with its type", ir.EventID)
	}
	var data map[string]any
	if err := json.Unmarshal(ir.Body, &data); err != nil {
		t.Fatalf("body %s: %v", ir.Body, err)
	}
	want := map[string]any{"subscription_id": "sub1", "event": "github:6f1c", "attempts": 8.0, "last_status": 500.0,
		"error": "HTTP 500", "at": "2026-11-21T10:00:00.000000123Z"}
	for k, v := range want {
		if data[k] != v {
			t.Errorf("data[%q] = %v, want %v", k, data[k], v)
		}
	}

	// Through the processor's codecs: an envelope of source hookstream whose
	// subject is the subscription.
	rec := ir.Record(NewNames("t").Ingest)
	env, err := NewEnvelope(rec, at)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := EventRecord("t.events", rec, env)
	if err != nil {
		t.Fatal(err)
	}
	if got := OperationalSubject(ev); got != "sub1" {
		t.Errorf("subject %q, want sub1", got)
	}
}

func TestOperationalSubjectOfOtherEvents(t *testing.T) {
	for _, value := range []string{
		`{"id":"github:1","source":"github","type":"push","data":{"subscription_id":"sub1"}}`,
		`not json`,
		`{"id":"hookstream:x","source":"hookstream","type":"circuit.opened","data":{}}`,
	} {
		if got := OperationalSubject(&kgo.Record{Value: []byte(value)}); got != "" {
			t.Errorf("subject of %s = %q, want none", value, got)
		}
	}
}
