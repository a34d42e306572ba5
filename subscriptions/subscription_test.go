package subscriptions

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hookstream/hookstream/signature"
)

func TestPatchApply(t *testing.T) {
	base := Subscription{ID: "sub_a", URL: "https://a.example/hook", Sources: []string{"github"}, Enabled: false,
		DisabledReason: "subscriber answered 410 Gone", MaxInFlight: 16}
	url, on, off, n := "https://b.example/hook", true, false, 4
	tests := []struct {
		name  string
		patch Patch
		want  Subscription
	}{
		{"nothing set changes nothing", Patch{}, base},
		{"fields set change", Patch{URL: &url, MaxInFlight: &n, Sources: &[]string{}},
			func() Subscription { s := base; s.URL, s.MaxInFlight, s.Sources = url, 4, []string{}; return s }()},
		{"enabling clears the reason", Patch{Enabled: &on},
			func() Subscription { s := base; s.Enabled, s.DisabledReason = true, ""; return s }()},
		{"disabling keeps it", Patch{Enabled: &off}, base},
		{"controls set", Patch{Filter: ptr(`type == "push"`), Transform: ptr(`{"text": type}`), Headers: &map[string]string{"X-A": "1"},
			Schedule: &[]Duration{Duration(time.Second)}, Timeout: ptr(Duration(time.Second))},
			func() Subscription {
				s := base
				s.Filter, s.Transform, s.Headers = `type == "push"`, `{"text": type}`, map[string]string{"X-A": "1"}
				s.Schedule, s.Timeout = []Duration{Duration(time.Second)}, Duration(time.Second)
				return s
			}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := base
			tt.patch.Apply(&got)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestBatchingValidated(t *testing.T) {
	valid := Subscription{ID: "sub_a", URL: "https://a.example/hook", Secret: signature.NewSecret(), MaxInFlight: 16, BatchMax: 1}
	tests := []struct {
		name      string
		batchMax  int
		batchWait Duration
		want      string // "" when valid
	}{
		{"one, no wait", 1, 0, ""},
		{"most, longest wait", 1000, Duration(10 * time.Second), ""},
		{"zero", 0, 0, "batch_max: 0 is not between 1 and 1000"},
		{"too many", 1001, 0, "batch_max: 1001 is not between 1 and 1000"},
		{"wait too long", 100, Duration(11 * time.Second), "batch_wait: 11s is not between 0s and 10s"},
		{"negative wait", 100, Duration(-time.Second), "batch_wait: -1s is not between 0s and 10s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := valid
			s.BatchMax, s.BatchWait = tt.batchMax, tt.batchWait
			err := s.Validate()
			p := Patch{BatchMax: &tt.batchMax, BatchWait: &tt.batchWait}
			perr := p.Validate()
			for _, e := range []error{err, perr} {
				switch {
				case tt.want == "" && e != nil:
					t.Errorf("got %v, want valid", e)
				case tt.want != "" && (e == nil || !errors.Is(e, ErrInvalid) || !strings.Contains(e.Error(), tt.want)):
					t.Errorf("got %v, want an invalid subscription saying %q", e, tt.want)
				}
			}
		})
	}
}

func TestDurationJSON(t *testing.T) {
	var p Patch
	if err := json.Unmarshal([]byte(`{"batch_wait":"1.5s"}`), &p); err != nil || p.BatchWait == nil || *p.BatchWait != Duration(1500*time.Millisecond) {
		t.Fatalf("decode 1.5s: got %v %v", p.BatchWait, err)
	}
	if err := json.Unmarshal([]byte(`{"batch_wait":"soon"}`), &p); err == nil || !strings.Contains(err.Error(), `"soon" is not a duration such as 500ms or 2s`) {
		t.Errorf("decode soon: got %v, want a clear error", err)
	}
	b, err := json.Marshal(Subscription{BatchWait: Duration(250 * time.Millisecond)})
	if err != nil || !strings.Contains(string(b), `"batch_wait":"250ms"`) {
		t.Errorf("encode: got %s %v, want batch_wait as \"250ms\"", b, err)
	}
}

// TestMaxInFlightValidated: a subscription's concurrent deliveries are
// bounded: max_in_flight from 1 to 1000, else the subscription is refused.
func TestMaxInFlightValidated(t *testing.T) {
	for _, tt := range []struct {
		n    int
		want string // "" when valid
	}{
		{1, ""},
		{1000, ""},
		{0, "max_in_flight: 0 is not between 1 and 1000"},
		{1001, "max_in_flight: 1001 is not between 1 and 1000"},
	} {
		s := Subscription{ID: "sub_a", URL: "https://a.example/hook", Secret: signature.NewSecret(), MaxInFlight: tt.n, BatchMax: 1}
		err := s.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("max_in_flight %d: got %v, want valid", tt.n, err)
		case tt.want != "" && (err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("max_in_flight %d: got %v, want an invalid subscription saying %q", tt.n, err, tt.want)
		}
	}
}

// TestHeadersValidated: a subscription's headers are bounded in number
// and size, valid HTTP, and never one of hookstream's own; every problem
// is reported at once.
func TestHeadersValidated(t *testing.T) {
	many := map[string]string{}
	for i := range MaxHeaders + 1 {
		many[fmt.Sprintf("X-H%d", i)] = "v"
	}
	big := map[string]string{}
	for i := range 5 {
		big[fmt.Sprintf("X-Big%d", i)] = strings.Repeat("v", 4000)
	}
	tests := []struct {
		name    string
		headers map[string]string
		want    []string // nil when valid
	}{
		{"none", nil, nil},
		{"a token and a key", map[string]string{"Authorization": "Bearer abc", "x-api-key": "k\tv"}, nil},
		{"the most", func() map[string]string { m := maps.Clone(many); delete(m, "X-H0"); return m }(), nil},
		{"too many", many, []string{"headers: 21 headers, at most 20"}},
		{"bad name", map[string]string{"X Api": "v", "X:A": "v", "": "v"}, []string{
			`headers: "" is not a valid header name`, `headers: "X Api" is not a valid header name`, `headers: "X:A" is not a valid header name`}},
		{"long name", map[string]string{strings.Repeat("x", 257): "v"}, []string{"is longer than 256 bytes"}},
		{"reserved", map[string]string{"Webhook-Signature": "v1,x", "webhook-id": "x", "CONTENT-TYPE": "text/plain", "content-length": "1",
			"Host": "a", "User-Agent": "me", "traceparent": "00-x", "TraceState": "x", "Transfer-Encoding": "chunked", "Connection": "close"}, []string{
			"headers: CONTENT-TYPE is set by hookstream", "headers: Connection is set by hookstream", "headers: Host is set by hookstream",
			"headers: TraceState is set by hookstream", "headers: Transfer-Encoding is set by hookstream", "headers: User-Agent is set by hookstream",
			"headers: Webhook-Signature is set by hookstream", "headers: content-length is set by hookstream", "headers: traceparent is set by hookstream",
			"headers: webhook-id is set by hookstream"}},
		{"line break", map[string]string{"X-A": "v\r\nX-Injected: 1"}, []string{"headers: X-A: value holds a control character"}},
		{"empty value", map[string]string{"X-A": ""}, []string{"headers: X-A has an empty value"}},
		{"long value", map[string]string{"X-A": strings.Repeat("v", 4097)}, []string{"headers: X-A: value of 4097 bytes, at most 4096"}},
		{"same header twice", map[string]string{"x-a": "1", "X-A": "2"}, []string{"headers: X-A and x-a are the same header"}},
		{"too many bytes", big, []string{"headers: 20030 bytes of names and values, at most 16384"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSubscription()
			s.Headers = tt.headers
			err := s.Validate()
			if tt.want == nil {
				if err != nil {
					t.Errorf("got %v, want valid", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want an invalid subscription", err)
			}
			lines := strings.Split(strings.TrimPrefix(err.Error(), "invalid subscription: "), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("got %d problems %q, want %d", len(lines), lines, len(tt.want))
			}
			for i, want := range tt.want {
				if !strings.Contains(lines[i], want) {
					t.Errorf("problem %d: got %q, want it to say %q", i+1, lines[i], want)
				}
			}
		})
	}
}

func validSubscription() Subscription {
	return Subscription{ID: "sub_a", URL: "https://a.example/hook", Secret: signature.NewSecret(), MaxInFlight: 16, BatchMax: 1}
}

// TestScheduleAndTimeoutValidated: a subscription's own schedule has at
// most 20 delays of at most 24h each, its timeout is at most 60s; zero
// values mean the global settings.
func TestScheduleAndTimeoutValidated(t *testing.T) {
	long := make([]Duration, MaxScheduleRetries+1)
	for i := range long {
		long[i] = Duration(time.Second)
	}
	tests := []struct {
		name     string
		schedule []Duration
		timeout  Duration
		want     string // "" when valid
	}{
		{"globals", nil, 0, ""},
		{"own", []Duration{Duration(time.Second), Duration(24 * time.Hour)}, Duration(60 * time.Second), ""},
		{"the most delays", long[1:], 0, ""},
		{"too many delays", long, 0, "schedule: 21 delays, at most 20"},
		{"zero delay", []Duration{Duration(time.Second), 0}, 0, "schedule: delay 2 (0s) is not above 0s and at most 24h"},
		{"negative delay", []Duration{Duration(-time.Second)}, 0, "schedule: delay 1 (-1s) is not above 0s and at most 24h"},
		{"delay too long", []Duration{Duration(25 * time.Hour)}, 0, "schedule: delay 1 (25h) is not above 0s and at most 24h"},
		{"timeout too long", nil, Duration(61 * time.Second), "timeout: 1m1s is not between 0s (HOOKSTREAM_DELIVERY_TIMEOUT) and 60s"},
		{"negative timeout", nil, Duration(-time.Second), "timeout: -1s is not between 0s (HOOKSTREAM_DELIVERY_TIMEOUT) and 60s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSubscription()
			s.Schedule, s.Timeout = tt.schedule, tt.timeout
			err := s.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("got %v, want valid", err)
			case tt.want != "" && (!errors.Is(err, ErrInvalid) || err.Error() != "invalid subscription: "+tt.want):
				t.Errorf("got %v, want an invalid subscription saying %q", err, tt.want)
			}
		})
	}
}

// TestRedactedHidesHeaderValues: logs and listings show a subscription's
// header names, never their values, and redacting leaves the
// subscription itself alone.
func TestRedactedHidesHeaderValues(t *testing.T) {
	s := validSubscription()
	s.Headers = map[string]string{"Authorization": "Bearer s3cret"}
	r := s.Redacted()
	if !reflect.DeepEqual(r.Headers, map[string]string{"Authorization": "…"}) {
		t.Errorf("redacted headers: got %v, want the names with … for values", r.Headers)
	}
	if b, _ := json.Marshal(r); strings.Contains(string(b), "s3cret") {
		t.Errorf("redacted JSON %s holds the header value", b)
	}
	if s.Headers["Authorization"] != "Bearer s3cret" {
		t.Errorf("subscription after Redacted: headers %v, want them unchanged", s.Headers)
	}
}

func TestKindValidated(t *testing.T) {
	secret := signature.NewSecret()
	base := Subscription{ID: "sub_a", MaxInFlight: 16, BatchMax: 1}
	tests := []struct {
		name     string
		set      func(*Subscription)
		kind     string
		problems []string
	}{
		{"webhook", func(s *Subscription) { s.URL, s.Secret = "https://a.example/hook", secret }, KindWebhook, nil},
		{"topic", func(s *Subscription) { s.Topic = "team.payments" }, KindTopic, nil},
		{"pull", func(s *Subscription) { s.Pull, s.Secret = true, secret }, KindPull, nil},
		{"none", func(s *Subscription) {}, KindWebhook, []string{"exactly one of url, topic and pull"}},
		{"two", func(s *Subscription) { s.URL, s.Topic, s.Secret = "https://a.example/hook", "t", secret }, KindTopic,
			[]string{"exactly one of url, topic and pull"}},
		{"topic with a secret", func(s *Subscription) { s.Topic, s.Secret = "t", secret }, KindTopic, []string{"a topic subscription has none"}},
		{"bad topic name", func(s *Subscription) { s.Topic = "a/b" }, KindTopic, []string{"is not a Kafka topic name"}},
		{"topic name too long", func(s *Subscription) { s.Topic = strings.Repeat("t", 250) }, KindTopic, []string{"is not a Kafka topic name"}},
		{"pull without a token", func(s *Subscription) { s.Pull = true }, KindPull, []string{"pull token"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base
			tt.set(&s)
			if got := s.Kind(); got != tt.kind {
				t.Errorf("Kind() = %q, want %q", got, tt.kind)
			}
			err := s.Validate()
			if len(tt.problems) == 0 && err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
			for _, p := range tt.problems {
				if err == nil || !strings.Contains(err.Error(), p) {
					t.Errorf("Validate() = %v, want it to say %q", err, p)
				}
			}
		})
	}
}

// TestDurationWrittenAsPeopleWriteIt: a Duration reads and writes as
// people write one (30s, 5m, 1h, 1h30m), not as Go does (5m0s), and its
// text reads back to the same duration.
func TestDurationWrittenAsPeopleWriteIt(t *testing.T) {
	for _, want := range []string{"500ms", "30s", "1m30s", "5m", "1h", "1h30m", "24h", "0s"} {
		d, err := time.ParseDuration(want)
		if err != nil {
			t.Fatal(err)
		}
		if got := Duration(d).String(); got != want {
			t.Errorf("Duration(%v).String(): got %q, want %q", d, got, want)
		}
		var back Duration
		if err := back.UnmarshalText([]byte(Duration(d).String())); err != nil || time.Duration(back) != d {
			t.Errorf("%q read back: got %v, %v; want %v", want, time.Duration(back), err, d)
		}
	}
}
