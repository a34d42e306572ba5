package ingest

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookstream/hookstream/topics"
)

// TestFailureLimiterHoldsBoundedAddresses: however many client addresses
// fail verification, the limiter remembers at most failureAddresses of
// them, forgetting the least recently failing first.
func TestFailureLimiterHoldsBoundedAddresses(t *testing.T) {
	f, err := newFailureLimiter()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	addr := func(i int) string { return fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff) }
	const n = failureAddresses + 500
	for i := range n {
		if err := f.fail(addr(i), now); err != nil {
			t.Fatalf("first failure of %s: got %v, want it allowed", addr(i), err)
		}
	}
	if got := f.addrs.Len(); got != failureAddresses {
		t.Errorf("addresses held after %d failing: got %d, want %d", n, got, failureAddresses)
	}
	if f.addrs.Contains(clientPrefix(addr(0))) {
		t.Errorf("%s, the least recently failing, still held", addr(0))
	}
	if !f.addrs.Contains(clientPrefix(addr(n - 1))) {
		t.Errorf("%s, the latest failing, not held", addr(n-1))
	}
}

// TestSourceLabelsBounded: with unknown sources allowed, at most
// topics.MaxSourceNames source names become metric labels and per-source
// stats; every later one counts as topics.OtherSource.
func TestSourceLabelsBounded(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry())
	for i := range topics.MaxSourceNames + 50 {
		name := fmt.Sprintf("src-%d", i)
		got := m.label(name, true)
		want := name
		if i >= topics.MaxSourceNames {
			want = topics.OtherSource
		}
		if got != want {
			t.Fatalf("label of source %d: got %q, want %q", i, got, want)
		}
		m.answered(got, 202)
	}
	if got := len(m.stats); got != topics.MaxSourceNames+1 {
		t.Errorf("per-source stats: got %d entries, want %d (the labelled sources and %q)", got, topics.MaxSourceNames+1, topics.OtherSource)
	}
	if got := m.label("refused", false); got != topics.OtherSource {
		t.Errorf("label of a refused unknown source: got %q, want %q", got, topics.OtherSource)
	}
}

// TestViolationMessageShortened: a schema violation's message, which can
// quote the payload, is cut to maxMessage bytes at a character boundary.
func TestViolationMessageShortened(t *testing.T) {
	for _, msg := range []string{strings.Repeat("a", 10*maxMessage), "a" + strings.Repeat("é", maxMessage)} {
		got := shorten(msg)
		cut, ok := strings.CutSuffix(got, "…")
		if !ok || len(cut) > maxMessage || len(cut) < maxMessage-utf8.UTFMax || !utf8.ValidString(got) || !strings.HasPrefix(msg, cut) {
			t.Errorf("shorten of %d bytes: got %d bytes starting %q, want a valid prefix of at most %d bytes marked with …", len(msg), len(got), got[:min(len(got), 16)], maxMessage)
		}
	}
	if got := shorten("short"); got != "short" {
		t.Errorf("shorten of a short message: got %q, want it unchanged", got)
	}
}
