package topics

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// FuzzRetry checks that decoding an encoded retry gives it back, key
// included. Invariants: never panics; ParseRetry(r.Record(t)) == r;
// a batch's id round-trips as its EventID, a resend's mark as Resend; SplitRetryKey inverts RetryKey for a subscription without ':' and a
// non-empty event id.
func FuzzRetry(f *testing.F) {
	f.Add("sub_1", "github:1", 2, int64(1e18), 503, "status 503", "", []byte(`{}`), false, false)
	f.Add("sub_2", "e", 0, int64(0), 0, "", "t.delivery-dlq/3/9", []byte(nil), false, false)
	f.Add("sub_3", "batch_0f", 1, int64(1e18), 500, "status 500", "", []byte(`{"events":[{}]}`), true, false)
	f.Add("sub_4", "github:2", 0, int64(1e18), 0, "", "", []byte(`{}`), false, true)
	f.Add("", "", -1, int64(-1), -7, "\xff", "x", []byte{}, true, true)
	f.Fuzz(func(t *testing.T, sub, eventID string, attempts int, nanos int64, status int, errText, from string, body []byte, batch, resend bool) {
		r := &Retry{Subscription: sub, EventID: eventID, Batch: batch && eventID != "", Attempts: attempts, DueAt: time.Unix(0, nanos).UTC(),
			LastStatus: status, Error: errText, RedrivenFrom: from, Resend: resend, Body: body}
		rec := r.Record("t.delivery-retry")
		got := ParseRetry(rec)
		if got.Subscription != r.Subscription || got.EventID != r.EventID || got.Attempts != r.Attempts ||
			!got.DueAt.Equal(r.DueAt) || got.LastStatus != r.LastStatus || got.Error != r.Error ||
			got.RedrivenFrom != r.RedrivenFrom || got.Batch != r.Batch || got.Resend != r.Resend || !bytes.Equal(got.Body, r.Body) {
			t.Fatalf("decoded: got %+v, want %+v", got, r)
		}
		if sub == "" || strings.Contains(sub, ":") || eventID == "" {
			return
		}
		for _, given := range []string{"", sub} {
			if s, e, ok := SplitRetryKey(string(rec.Key), given); !ok || s != sub || e != eventID {
				t.Errorf("SplitRetryKey(%q, %q): got %q %q %v, want %q %q", rec.Key, given, s, e, ok, sub, eventID)
			}
		}
	})
}
