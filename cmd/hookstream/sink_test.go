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
	keys, err := decodeSinkSecrets([]string{secret})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	h := sinkHandler(&out, keys)
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
		!strings.Contains(lines[0], "batch batch_ab 1/2") || !strings.Contains(lines[1], "(signature ok with the secret ending …") {
		t.Errorf("output: got %q, want one line per event naming the batch", out.String())
	}
	other, _ := signature.DecodeSecret(signature.NewSecret())
	out.Reset()
	if code := post([][]byte{other}, "batch_ab", batch); code != http.StatusUnauthorized || !strings.HasPrefix(out.String(), "REJECTED batch_ab") {
		t.Errorf("wrongly signed batch: got %d %q, want 401 and REJECTED", code, out.String())
	}
}

// TestSinkVerifiesWithAnyOfItsSecrets: given the old and the new secret
// of a rotation, the sink accepts a delivery signed with either and says
// which verified it; one signed with neither is refused with 401 and a
// line naming the secrets it tried by their last characters only, and
// what to do.
func TestSinkVerifiesWithAnyOfItsSecrets(t *testing.T) {
	old, current, other := signature.NewSecret(), signature.NewSecret(), signature.NewSecret()
	keys, err := decodeSinkSecrets([]string{old, current})
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	srv := httptest.NewServer(sinkHandler(&out, keys))
	t.Cleanup(srv.Close)
	post := func(secret, id string) int {
		t.Helper()
		key, _ := signature.DecodeSecret(secret)
		body := `{"id":"github:1","type":"push"}`
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		signature.SignRequest(req.Header, [][]byte{key}, id, time.Now(), []byte(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	ending := func(s string) string { return "…" + s[len(s)-4:] }

	if code := post(current, "msg_current"); code != http.StatusNoContent {
		t.Errorf("signed with the second secret: got %d, want 204", code)
	}
	if want := "(signature ok with the secret ending " + ending(current) + ")"; !strings.Contains(out.String(), want) {
		t.Errorf("output: got %q, want it to contain %q", out.String(), want)
	}
	if code := post(other, "msg_other"); code != http.StatusUnauthorized {
		t.Errorf("signed with neither: got %d, want 401", code)
	}
	want := "REJECTED msg_other: signature did not verify with the secrets ending " + ending(old) + ", " + ending(current) +
		" (2 tried); pass the subscription's current secret with --secret (hookstream subscriptions get ID shows it)"
	if !strings.Contains(out.String(), want) {
		t.Errorf("output: got %q, want it to contain %q", out.String(), want)
	}
	for _, s := range []string{old, current, other} {
		if key := strings.TrimPrefix(s, "whsec_"); strings.Contains(out.String(), key[:8]) {
			t.Errorf("output %q shows more of a secret than its last characters", out.String())
		}
	}
}
