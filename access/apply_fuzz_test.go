package access

import (
	"bytes"
	"encoding/hex"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// FuzzApply folds records any writer of the access topic could produce.
// Invariants: apply never panics; a record it takes is a valid token
// under its own key, and every token held is found by its digest and
// only by it; a tombstone of a held token forgets it.
func FuzzApply(f *testing.F) {
	digest := strings.Repeat("ab", 32)
	f.Add([]byte("tok_1"), []byte(`{"id":"tok_1","name":"ops","role":"admin","digest":"`+digest+`"}`), false)
	f.Add([]byte("tok_1"), []byte(`{"id":"tok_1","name":"ci","role":"team","team":"payments","digest":"`+digest+`"}`), true)
	f.Add([]byte("tok_2"), []byte(`{"id":"tok_1","name":"ops","role":"admin","digest":"`+digest+`"}`), false)
	f.Add([]byte("tok_3"), []byte(`{"id":"tok_3","name":"ops","role":"root","digest":"zz"}`), false)
	f.Add([]byte("tok_4"), []byte(`{not json`), false)
	f.Fuzz(func(t *testing.T, key, value []byte, tombstone bool) {
		s := New(Config{MaxTokens: 2}, topics.Cluster{Names: topics.NewNames("fuzz")}, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
		s.mu.Lock()
		defer s.mu.Unlock()
		// The same value under another id: a second token of the same digest.
		other := bytes.ReplaceAll(value, []byte(`"id":"`+string(key)+`"`), []byte(`"id":"tok_other"`))
		for _, rec := range []*kgo.Record{{Key: key, Value: value}, {Key: []byte("tok_other"), Value: other}} {
			if err := s.apply(rec); err == nil && rec.Value != nil {
				if _, ok := s.tokens[string(rec.Key)]; !ok {
					t.Fatalf("took %q under %q but holds no such token", rec.Value, rec.Key)
				}
			}
		}
		if tombstone {
			if err := s.apply(&kgo.Record{Key: key}); err != nil {
				t.Fatalf("tombstone: %v", err)
			}
			if _, ok := s.tokens[string(key)]; ok {
				t.Fatalf("a tombstone of %q left the token", key)
			}
		}
		if len(s.tokens) > s.max || len(s.byDigest) != len(s.tokens) {
			t.Fatalf("%d tokens, %d digests: want as many, at most %d", len(s.tokens), len(s.byDigest), s.max)
		}
		for d, id := range s.byDigest {
			tok, ok := s.tokens[id]
			if !ok || tok.ID != id || tok.Validate() != nil || digestOf(t, tok.Digest) != d {
				t.Fatalf("digest %x names %q: %+v", d, id, tok)
			}
		}
	})
}

func digestOf(t *testing.T, hexDigest string) [32]byte {
	t.Helper()
	var d [32]byte
	if _, err := hex.Decode(d[:], []byte(hexDigest)); err != nil {
		t.Fatalf("held digest %q: %v", hexDigest, err)
	}
	return d
}
