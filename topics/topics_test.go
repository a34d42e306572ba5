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

func TestReserved(t *testing.T) {
	names := topics.NewNames("hookstream")
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"hookstream.events", true},
		{"hookstream.anything", true},
		{"hookstream_events", true},
		{"hookstream", true},
		{"__consumer_offsets", true},
		{"__transaction_state", true},
		{"__mine", true},
		{"orders", false},
		{"hookstream-orders", false},
		{"hookstreamer.orders", false},
		{"_orders", false},
	} {
		if got := names.Reserved(tc.name); got != tc.want {
			t.Errorf("Reserved(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}
