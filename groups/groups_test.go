package groups

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookstream/hookstream/topics"
)

func TestResolve(t *testing.T) {
	names := topics.NewNames("hookstream")
	const want = "want processor, retry, sub:<id> or a full name such as hookstream-processor"
	tests := []struct {
		in, group, err string
	}{
		{in: "processor", group: "hookstream-processor"},
		{in: "retry", group: "hookstream-retry"},
		{in: "sub:sub_abc", group: "hookstream-sub-sub_abc"},
		{in: "sub:a:b", group: "hookstream-sub-a:b"},
		{in: "hookstream-processor", group: "hookstream-processor"},
		{in: "hookstream-retry", group: "hookstream-retry"},
		{in: "hookstream-sub-sub_abc", group: "hookstream-sub-sub_abc"},
		{in: "sub:", err: `group "sub:" has no subscription id (want sub:<id>)`},
		{in: "processer", err: `unknown group "processer": ` + want},
		{in: "queue:x", err: `unknown group "queue:x": ` + want},
		{in: "other-processor", err: `unknown group "other-processor": ` + want},
		{in: "hookstream-sub-", err: `unknown group "hookstream-sub-": ` + want},
		{in: "hookstream-dispatcher", err: `unknown group "hookstream-dispatcher": ` + want},
		{in: "", err: `unknown group "": ` + want},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			g, err := Resolve(names, tt.in)
			if got := errString(err); got != tt.err {
				t.Errorf("Resolve(%q) error: got %q, want %q", tt.in, got, tt.err)
			}
			if got := string(g); got != tt.group {
				t.Errorf("Resolve(%q): got %q, want %q", tt.in, got, tt.group)
			}
		})
	}
}

func TestParseOffsets(t *testing.T) {
	const want = "want partition:offset pairs such as 0:15,3:200"
	tests := []struct {
		in      string
		offsets map[int32]int64
		err     string
	}{
		{in: "0:15,3:200", offsets: map[int32]int64{0: 15, 3: 200}},
		{in: "7:0", offsets: map[int32]int64{7: 0}},
		{in: " 0:1 , 1 : 2 ", offsets: map[int32]int64{0: 1, 1: 2}},
		{in: "2147483647:9223372036854775807", offsets: map[int32]int64{2147483647: 9223372036854775807}},
		{in: "", err: "no offsets: " + want},
		{in: "  ", err: "no offsets: " + want},
		{in: "0:1,", err: `empty entry in "0:1,": ` + want},
		{in: "0:1,,2:3", err: `empty entry in "0:1,,2:3": ` + want},
		{in: "15", err: `"15" is not partition:offset (` + want + ")"},
		{in: "x:1", err: `"x:1": partition "x" is not a partition number`},
		{in: "-1:1", err: `"-1:1": partition "-1" is not a partition number`},
		{in: "2147483648:1", err: `"2147483648:1": partition "2147483648" is not a partition number`},
		{in: "0:", err: `"0:": offset "" is not an offset (want 0 or more)`},
		{in: "0:-5", err: `"0:-5": offset "-5" is not an offset (want 0 or more)`},
		{in: "0:1:2", err: `"0:1:2": offset "1:2" is not an offset (want 0 or more)`},
		{in: "0:1,0:2", err: "partition 0 appears twice"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseOffsets(tt.in)
			if gotErr := errString(err); gotErr != tt.err {
				t.Errorf("ParseOffsets(%q) error: got %q, want %q", tt.in, gotErr, tt.err)
			}
			if !maps.Equal(got, tt.offsets) {
				t.Errorf("ParseOffsets(%q): got %v, want %v", tt.in, got, tt.offsets)
			}
		})
	}
}

// FuzzParseOffsets checks that ParseOffsets never panics, that what it
// accepts is non-negative, and that formatting and parsing again is the
// identity.
func FuzzParseOffsets(f *testing.F) {
	for _, s := range []string{"0:15,3:200", "", "0:1,", "x:1", "0:-1", " 1 : 2 ", "0:1,0:2", "2147483648:0", "0:1:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		offsets, err := ParseOffsets(s)
		if err != nil {
			if offsets != nil {
				t.Errorf("ParseOffsets(%q): got %v with error %v, want nil", s, offsets, err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("ParseOffsets(%q) error: got %q, want one line", s, err)
			}
			return
		}
		var parts []string
		for _, p := range slices.Sorted(maps.Keys(offsets)) {
			if p < 0 || offsets[p] < 0 {
				t.Errorf("ParseOffsets(%q): got %d:%d, want both non-negative", s, p, offsets[p])
			}
			parts = append(parts, fmt.Sprintf("%d:%d", p, offsets[p]))
		}
		again, err := ParseOffsets(strings.Join(parts, ","))
		if err != nil || !maps.Equal(again, offsets) {
			t.Errorf("ParseOffsets(format(ParseOffsets(%q))): got %v, %v, want %v", s, again, err, offsets)
		}
	})
}

func TestTargetValidate(t *testing.T) {
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		t    Target
		err  string
	}{
		{"earliest", Target{Earliest: true}, ""},
		{"latest", Target{Latest: true}, ""},
		{"time", Target{Time: at}, ""},
		{"duration", Target{Duration: time.Hour}, ""},
		{"offsets", Target{Offsets: map[int32]int64{0: 1}}, ""},
		{"none", Target{}, "replay target: none set (want earliest, latest, a time, a duration or offsets)"},
		{"two", Target{Earliest: true, Time: at}, "replay target: 2 set, want exactly one"},
		{"all", Target{true, true, at, time.Hour, map[int32]int64{0: 1}}, "replay target: 5 set, want exactly one"},
		{"negative duration", Target{Duration: -time.Hour}, "replay target: duration -1h0m0s is negative"},
		{"empty offsets", Target{Offsets: map[int32]int64{}}, "replay target: no offsets"},
		{"negative offset", Target{Offsets: map[int32]int64{0: -1}}, "replay target: 0:-1 is not a partition and an offset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errString(tt.t.validate()); got != tt.err {
				t.Errorf("validate: got %q, want %q", got, tt.err)
			}
		})
	}
}

func TestActiveMembersError(t *testing.T) {
	tests := []struct {
		members []string
		want    string
	}{
		{[]string{"kgo-1 on host-a"}, "group g has 1 active member (kgo-1 on host-a): stop them first"},
		{[]string{"a", "b"}, "group g has 2 active members (a, b): stop them first"},
		{[]string{"a", "b", "c", "d", "e", "f", "g"}, "group g has 7 active members (a, b, c, d, e and 2 more): stop them first"},
	}
	for _, tt := range tests {
		if got := activeMembers("g", tt.members).Error(); got != tt.want {
			t.Errorf("activeMembers(%v): got %q, want %q", tt.members, got, tt.want)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestWithoutDeleted(t *testing.T) {
	names := topics.NewNames("hs")
	lags := []GroupLag{
		{Group: string(names.ProcessorGroup())},
		{Group: string(names.RetryGroup())},
		{Group: string(names.SubscriptionGroup("sub_kept"))},
		{Group: string(names.SubscriptionGroup("sub_gone"))},
	}
	got := WithoutDeleted(names, lags, map[string]bool{"sub_kept": true})
	var gotNames []string
	for _, g := range got {
		gotNames = append(gotNames, g.Group)
	}
	want := []string{"hs-processor", "hs-retry", "hs-sub-sub_kept"}
	if fmt.Sprint(gotNames) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", gotNames, want)
	}
}
