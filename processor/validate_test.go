package processor_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/topics"
)

// TestInvalidPayloadsAreDeadLettered: a record the receiver marked with
// schema violations (on_invalid: dlq) goes to the DLQ with stage validate,
// its violations and a cause naming the first; it is not emitted. A
// corrected payload for the same event is processed afterwards.
func TestInvalidPayloadsAreDeadLettered(t *testing.T) {
	env := kafkatest.New(t, 2, maxBody)
	cl := env.Client(t)
	invalid := &topics.IngestRecord{Source: "billing", EventID: "e1", EventType: "checkout.session.completed", ReceivedAt: time.Now(),
		ContentType: "application/json", Body: []byte(`{"amount":-5}`),
		Violations: []topics.Violation{{Path: "/amount", Message: "minimum: got -5, want 0"}, {Path: "", Message: "missing property 'id'"}}}
	produce(t, cl, invalid.Record(env.Names.Ingest), ingestRecord(env, "billing", "e2", `{"amount":5}`))
	in := start(t, env, options{name: "a", stateDir: t.TempDir()})

	dlq := waitDLQ(t, env, 1)
	got := waitEvents(t, env, 1, 30*time.Second)
	if len(dlq) != 1 || got["billing:e1"] != 0 || got["billing:e2"] != 1 {
		t.Fatalf("got %d dead letters and events %v, want billing:e1 dead-lettered and billing:e2 emitted", len(dlq), got)
	}
	h := kafkatest.Headers(dlq[0])
	want := map[string]string{
		topics.HeaderErrorStage: topics.StageValidate,
		topics.HeaderError:      "payload does not match the schema: /amount: minimum: got -5, want 0 (and 1 more)",
		topics.HeaderViolations: `[{"path":"/amount","message":"minimum: got -5, want 0"},{"path":"","message":"missing property 'id'"}]`,
		topics.HeaderEventType:  "checkout.session.completed",
	}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("dead letter header %s: got %q, want %q", k, h[k], v)
		}
	}
	if string(dlq[0].Key) != "billing:e1" || string(dlq[0].Value) != `{"amount":-5}` {
		t.Errorf("dead letter: got %s=%s, want the original key and body", dlq[0].Key, dlq[0].Value)
	}

	produce(t, cl, ingestRecord(env, "billing", "e1", `{"amount":5}`))
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if got := events(t, env); got["billing:e1"] != 1 {
			return fmt.Errorf("events: %v, want the corrected billing:e1 once", got)
		}
		return nil
	})
	if n := in.count("failed"); n != 1 {
		t.Errorf("failed: got %d, want 1", n)
	}
}
