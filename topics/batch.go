package topics

import (
	"encoding/json"
	"errors"
	"fmt"
)

// BatchBody is the body of a batched delivery: {"events":[envelope,...]},
// the envelopes as they are, in order. Each must be a JSON value.
func BatchBody(envelopes [][]byte) []byte {
	n := len(`{"events":[]}`) + len(envelopes)
	for _, e := range envelopes {
		n += len(e)
	}
	b := make([]byte, 0, n)
	b = append(b, `{"events":[`...)
	for i, e := range envelopes {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e...)
	}
	return append(b, "]}"...)
}

// BatchBodyBytes is the size of a batch body holding envelopes of n bytes
// in all, count of them.
func BatchBodyBytes(n, count int) int { return len(`{"events":[]}`) + n + max(count-1, 0) }

// SplitBatch returns the envelopes of a batch body, each as it was
// written. A body that is not a JSON object with an "events" array fails.
func SplitBatch(body []byte) ([][]byte, error) {
	var b struct {
		Events *[]json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, fmt.Errorf("batch: %w", err)
	}
	if b.Events == nil {
		return nil, errors.New(`batch: no "events" array`)
	}
	out := make([][]byte, len(*b.Events))
	for i, e := range *b.Events {
		out[i] = e
	}
	return out, nil
}
