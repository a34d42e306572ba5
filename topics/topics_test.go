package topics_test

import (
	"strings"
	"testing"

	"github.com/hookstream/hookstream/topics"
)

func TestValidName(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"hookstream", true},
		{"stripe_v2.prod-eu", true},
		{strings.Repeat("a", 100), true},
		{"", false},
		{strings.Repeat("a", 101), false},
		{"a b", false},
		{"a/b", false},
		{"a:b", false},
		{"é", false},
	} {
		if got := topics.ValidName(tc.name); got != tc.want {
			t.Errorf("ValidName(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}
