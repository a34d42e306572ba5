package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hookstream/hookstream/events"
)

// TestPrintStoryOmitted: `events get` says how many subscriptions a
// bounded story left out, and not that nothing was attempted when all were.
func TestPrintStoryOmitted(t *testing.T) {
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name       string
		deliveries []events.Delivery
		want       string
	}{
		{"some kept", []events.Delivery{{Subscription: "sub_a", State: "retrying", Attempts: 4, Status: 503}}, "(and 836 less recently attempted subscriptions, omitted"},
		{"none kept", nil, "(and 836 less recently attempted subscriptions, omitted"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			s := events.Story{ID: "shop:e1", Status: "done", ProcessedAt: at, ExpiresAt: at.Add(time.Hour), Deliveries: tt.deliveries, Omitted: 836}
			if err := printStory(&out, s); err != nil {
				t.Fatal(err)
			}
			if got := out.String(); !strings.Contains(got, tt.want) || strings.Contains(got, "no delivery attempt yet") {
				t.Errorf("got\n%s\nwant %q and no \"no delivery attempt yet\"", got, tt.want)
			}
		})
	}
}
