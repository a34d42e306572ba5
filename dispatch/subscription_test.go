package dispatch

import (
	"reflect"
	"testing"
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
