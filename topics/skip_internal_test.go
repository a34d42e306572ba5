package topics

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRefusedIDsBounded: a record refused after decoding is counted once
// however often it is met, and the ids remembered for that stay within
// maxRefused however many distinct ones a writer produces.
func TestRefusedIDsBounded(t *testing.T) {
	s := NewSkipper(slog.New(slog.NewTextHandler(io.Discard, nil)))
	err := errors.New("sealed secret does not open")
	s.Refuse("t", "sub_same", err)
	s.Refuse("t", "sub_same", err)
	if got := testutil.ToFloat64(s.skipped.WithLabelValues("t")); got != 1 {
		t.Errorf("one id refused twice: counted %v, want 1", got)
	}
	for i := range maxRefused + 5 {
		s.Refuse("t", fmt.Sprintf("sub_%06d", i), err)
		if n := len(s.refused); n > maxRefused {
			t.Fatalf("after %d ids: %d remembered, want at most %d", i+1, n, maxRefused)
		}
	}
	if got := testutil.ToFloat64(s.skipped.WithLabelValues("t")); got != maxRefused+6 {
		t.Errorf("counted %v, want %d (each distinct id once)", got, maxRefused+6)
	}
}
