package topics

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
)

// FuzzBatch checks the batch body codec. Invariants: SplitBatch never
// panics; SplitBatch(BatchBody(e)) == e for compact JSON values e;
// BatchBodyBytes is the body's length.
func FuzzBatch(f *testing.F) {
	f.Add([]byte(`{"id":"github:1","data":{"a":[1,2]}}`), []byte(`{"id":"github:2"}`))
	f.Add([]byte(`"x"`), []byte(`{"events":[]}`))
	f.Add([]byte(`{`), []byte(``))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		_, _ = SplitBatch(a) // any body: no panic
		var envelopes [][]byte
		for _, e := range [][]byte{a, b} {
			var c bytes.Buffer
			if json.Valid(e) && json.Compact(&c, e) == nil {
				envelopes = append(envelopes, c.Bytes())
			}
		}
		body := BatchBody(envelopes)
		n := 0
		for _, e := range envelopes {
			n += len(e)
		}
		if BatchBodyBytes(n, len(envelopes)) != len(body) {
			t.Errorf("BatchBodyBytes(%d, %d): got %d, want %d", n, len(envelopes), BatchBodyBytes(n, len(envelopes)), len(body))
		}
		got, err := SplitBatch(body)
		if err != nil || !slices.EqualFunc(got, envelopes, bytes.Equal) {
			t.Fatalf("SplitBatch(%s): got %q %v, want %q", body, got, err, envelopes)
		}
	})
}
