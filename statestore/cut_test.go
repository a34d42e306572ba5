package statestore

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestCutBoundsLedgerErrors: an error kept in the ledger (a failure's
// cause, an attempt's error, which can quote a subscriber's answer) is cut
// to at most MaxLedgerError bytes, never in the middle of a character: a
// valid error stays valid UTF-8, a prefix of the error.
func TestCutBoundsLedgerErrors(t *testing.T) {
	for _, s := range []string{
		strings.Repeat("x", 100*MaxLedgerError),
		"x" + strings.Repeat("é", MaxLedgerError),
		strings.Repeat("\xff", 2*MaxLedgerError),
	} {
		got := Cut(s)
		if len(got) > MaxLedgerError || len(got) < MaxLedgerError-utf8.UTFMax || !strings.HasPrefix(s, got) {
			t.Errorf("Cut of %d bytes: got %d bytes starting %q, want a prefix of at most %d bytes", len(s), len(got), got[:min(len(got), 16)], MaxLedgerError)
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Errorf("Cut of %d bytes of valid UTF-8: got %q, cut in the middle of a character", len(s), got[:min(len(got), 16)])
		}
	}
	if got := Cut("status 503"); got != "status 503" {
		t.Errorf("Cut of a short error: got %q, want it unchanged", got)
	}
}
