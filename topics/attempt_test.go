package topics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

func TestAttemptRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 21, 10, 0, 0, 123456789, time.UTC)
	tests := []struct {
		name string
		a    topics.Attempt
	}{
		{"delivered", topics.Attempt{Subscription: "sub_a", EventID: "github:1", N: 1, Outcome: topics.OutcomeDelivered, Status: 200, Latency: 1500 * time.Microsecond, At: at}},
		{"failed", topics.Attempt{Subscription: "sub_a", EventID: "github:1", N: 2, Outcome: topics.OutcomeFailed, Status: 503, Latency: time.Second, Error: `status 503 "busy"`, At: at}},
		{"retrying", topics.Attempt{Subscription: "sub_b", EventID: "x:a:b", N: 2, Outcome: topics.OutcomeRetrying, DueAt: at.Add(time.Minute), At: at}},
		{"resent", topics.Attempt{Subscription: "sub_a", EventID: "github:1", N: 1, Outcome: topics.OutcomeDelivered, Status: 204, Latency: time.Millisecond, At: at, Resend: true}},
		{"dead lettered", topics.Attempt{Subscription: "sub_c", EventID: "x:1", N: 8, Outcome: topics.OutcomeDeadLettered, Status: 500, Error: "gave up", At: at}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := tt.a.Record("p.delivery-attempts")
			if string(rec.Key) != tt.a.EventID {
				t.Fatalf("key: got %q, want %q", rec.Key, tt.a.EventID)
			}
			if len(rec.Value) > 200 {
				t.Errorf("value of %d bytes: %s", len(rec.Value), rec.Value)
			}
			got, err := topics.ParseAttempt(rec)
			if err != nil {
				t.Fatal(err)
			}
			if *got != tt.a {
				t.Fatalf("got %+v, want %+v", *got, tt.a)
			}
		})
	}
}

func TestParseAttemptRefusesGarbage(t *testing.T) {
	for _, v := range []string{"", "{", `{"n":1}`, `{"sub":"s","n":1,"o":"bogus","at":"2026-11-21T10:00:00Z"}`} {
		_, err := topics.ParseAttempt(&kgo.Record{Key: []byte("a:b"), Value: []byte(v)})
		if err == nil || !strings.Contains(err.Error(), "attempt") {
			t.Errorf("%q: got %v, want an attempt decode error", v, err)
		}
	}
}

func FuzzParseAttempt(f *testing.F) {
	f.Add([]byte(`{"sub":"s","n":1,"o":"delivered","st":200,"us":12,"at":"2026-11-21T10:00:00Z"}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		a, err := topics.ParseAttempt(&kgo.Record{Key: []byte("a:b"), Value: v})
		if err != nil {
			return
		}
		b, err := topics.ParseAttempt(a.Record("t"))
		if err != nil || *b != *a {
			t.Fatalf("decode of encode: got %+v %v, want %+v", b, err, a)
		}
	})
}
