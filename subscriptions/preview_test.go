package subscriptions_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/signature"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// TestPreview: what would be sent, exactly as the dispatcher builds it:
// the transform's body, every header (static values hidden once redacted), the event's
// trace context; a batch of one for a batching subscription; no body
// when the event is not received, and the transform's error when it
// fails.
func TestPreview(t *testing.T) {
	now := time.Now()
	rec := eventRecord(t, "github", "push", "1", `{"pusher":{"name":"ada"}}`)
	rec.Partition, rec.Offset = 2, 40
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: topics.HeaderTraceparent, Value: []byte(traceparent)})
	s := subscriptions.Subscription{ID: "sub_p", Secret: signature.NewSecret(), Transform: `{"text": "by " + data.pusher.name}`,
		Headers: map[string]string{"X-Token": "s3cret"}}

	p := subscriptions.Compile(s).Preview(subscriptions.NewEvent(rec), now, "hookstream/1.0")
	if !p.Match || string(p.Body) != `{"text":"by ada"}` || p.Error != "" {
		t.Fatalf("got %+v, want a match with the transform's body", p)
	}
	want := map[string]string{"content-type": "application/json", "user-agent": "hookstream/1.0", "webhook-id": "github:1",
		"webhook-timestamp": fmt.Sprint(now.Unix()), "traceparent": traceparent, "x-token": "s3cret"}
	for name, v := range want {
		if p.Headers[name] != v {
			t.Errorf("header %s: got %q, want %q", name, p.Headers[name], v)
		}
	}
	key, _ := signature.DecodeSecret(s.Secret)
	if err := signature.Verify([][]byte{key}, p.Headers["webhook-id"], p.Headers["webhook-timestamp"], p.Headers["webhook-signature"], p.Body, now, time.Minute); err != nil {
		t.Errorf("signature: %v", err)
	}
	if len(p.Headers) != len(want)+1 {
		t.Errorf("headers: got %v, want %v and webhook-signature", p.Headers, want)
	}
	if r := subscriptions.Compile(s).Redact(p); r.Headers["x-token"] != "…" || p.Headers["x-token"] != "s3cret" || r.Headers["webhook-id"] != "github:1" {
		t.Errorf("redacted: got %v, want the value of X-Token hidden, in a copy", r.Headers)
	}

	s.BatchMax = 10
	p = subscriptions.Compile(s).Preview(subscriptions.NewEvent(rec), now, "")
	if string(p.Body) != `{"events":[{"text":"by ada"}]}` || p.Headers["webhook-id"] != subscriptions.BatchID(s.ID, rec, rec) {
		t.Errorf("batching: got body %s id %s, want a batch of one", p.Body, p.Headers["webhook-id"])
	}

	s.Sources = []string{"stripe"}
	if p = subscriptions.Compile(s).Preview(subscriptions.NewEvent(rec), now, ""); p.Match || p.Body != nil || p.Headers != nil || p.Reason == "" {
		t.Errorf("not received: got %+v, want no match, a reason, no body", p)
	}

	topic := subscriptions.Subscription{ID: "sub_t", Topic: "orders"}
	p = subscriptions.Compile(topic).Preview(subscriptions.NewEvent(rec), now, "")
	wantTopic := map[string]string{topics.HeaderSource: "github", topics.HeaderEventID: "1", topics.HeaderEventType: "push", topics.HeaderTraceparent: traceparent}
	if !p.Match || string(p.Body) != string(rec.Value) || p.Error != "" || !maps.Equal(p.Headers, wantTopic) {
		t.Errorf("topic subscription: got %+v, want the envelope and the record's headers %v", p, wantTopic)
	}

	s.Sources, s.Transform = nil, `{"text": data.sender.login}`
	if p = subscriptions.Compile(s).Preview(subscriptions.NewEvent(rec), now, ""); !p.Match || p.Body != nil || !strings.Contains(p.Error, "transform: ") ||
		!strings.Contains(p.Reason, "dead-lettered") {
		t.Errorf("failing transform: got %+v, want a match, the error, no body", p)
	}
}

// TestTestEvent: a test takes an event by key or a whole envelope, and
// refuses anything else before parsing it.
func TestTestEvent(t *testing.T) {
	ctx := context.Background()
	envelope := eventRecord(t, "github", "push", "1", `{}`).Value
	e, err := subscriptions.TestEvent(ctx, topics.Cluster{}, "", envelope)
	if err != nil || string(e.Record().Key) != "github:1" {
		t.Fatalf("envelope: got %v, want the event github:1", err)
	}
	for name, tc := range map[string]struct {
		key      string
		envelope string
	}{
		"neither":        {"", ""},
		"both":           {"github:1", string(envelope)},
		"not a key":      {"github", ""},
		"not JSON":       {"", "{"},
		"not envelope":   {"", `{"a":1}`},
		"too deep":       {"", `{"id":"a:b","data":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}`},
		"over the bound": {"", `{"id":"a:b","pad":"` + strings.Repeat("x", subscriptions.MaxTestEnvelope) + `"}`},
	} {
		if _, err := subscriptions.TestEvent(ctx, topics.Cluster{}, tc.key, []byte(tc.envelope)); !errors.Is(err, subscriptions.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
}
