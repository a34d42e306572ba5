package subscriptions

import (
	"encoding/json"
	"errors"
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
