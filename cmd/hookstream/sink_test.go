package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hookstream/hookstream/signature"
)

// TestSinkPrintsEachEventOfABatch: the sink verifies a batch's signature
// and prints one line per event; a batch signed with another key is
// refused with 401.
func TestSinkPrintsEachEventOfABatch(t *testing.T) {
	secret := signature.NewSecret()
	key, _ := signature.DecodeSecret(secret)
	var out bytes.Buffer
	h := sinkHandler(&out, [][]byte{key})
	post := func(keys [][]byte, id, body string) int {
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		signature.SignRequest(req.Header, keys, id, time.Now(), []byte(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	batch := `{"events":[{"id":"github:1","type":"push"},{"id":"github:2","type":"issues"}]}`
	if code := post([][]byte{key}, "batch_ab", batch); code != http.StatusNoContent {
		t.Fatalf("batch: got %d, want 204", code)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "github:1 type=push") || !strings.Contains(lines[1], "github:2 type=issues") ||
		!strings.Contains(lines[0], "batch batch_ab 1/2") || !strings.Contains(lines[1], "(signature ok)") {
		t.Errorf("output: got %q, want one line per event naming the batch", out.String())
	}
	other, _ := signature.DecodeSecret(signature.NewSecret())
	out.Reset()
	if code := post([][]byte{other}, "batch_ab", batch); code != http.StatusUnauthorized || !strings.HasPrefix(out.String(), "REJECTED batch_ab") {
		t.Errorf("wrongly signed batch: got %d %q, want 401 and REJECTED", code, out.String())
	}
}
