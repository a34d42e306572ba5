package pull

import (
	"encoding/base64"
	"errors"
	"slices"
	"testing"
)

func TestCursorRoundTrip(t *testing.T) {
	key := cursorKey([]byte("token one"))
	c := cursor{rewind: "R1", from: []int64{0, 17, 1 << 40}, to: []int64{5, 17, 1<<40 + 3}}
	s := c.encode("sub_a", key)
	got, err := decodeCursor(s, "sub_a", [][]byte{cursorKey([]byte("other")), key})
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if got.rewind != c.rewind || !slices.Equal(got.from, c.from) || !slices.Equal(got.to, c.to) {
		t.Errorf("decoded %+v, want %+v", got, c)
	}
}

func TestCursorRefused(t *testing.T) {
	key := cursorKey([]byte("token one"))
	s := cursor{from: []int64{1, 2}, to: []int64{3, 4}}.encode("sub_a", key)
	raw, _ := base64.RawURLEncoding.DecodeString(s)
	tampered := slices.Clone(raw)
	tampered[len(tampered)-macBytes-1]++ // the last offset's delta
	for _, tc := range []struct {
		name, text, sub string
		keys            [][]byte
		want            error
	}{
		{"another subscription's", s, "sub_b", [][]byte{key}, errForeign},
		{"tampered", base64.RawURLEncoding.EncodeToString(tampered), "sub_a", [][]byte{key}, errForeign},
		{"rotated out", s, "sub_a", [][]byte{cursorKey([]byte("token two"))}, errForeign},
		{"not base64", "%%%", "sub_a", [][]byte{key}, errMalformed},
		{"too short", "AAAA", "sub_a", [][]byte{key}, errMalformed},
		{"empty", "", "sub_a", [][]byte{key}, errMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodeCursor(tc.text, tc.sub, tc.keys); !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// FuzzDecodeCursor: decoding never panics; a cursor that decodes encodes
// back to the same text (decode of encode is identity), and no text but
// one encode wrote for the subscription and key decodes.
func FuzzDecodeCursor(f *testing.F) {
	key := cursorKey([]byte("token"))
	f.Add(cursor{from: []int64{0}, to: []int64{1}}.encode("sub_a", key))
	f.Add(cursor{rewind: "R", from: []int64{5, 9}, to: []int64{5, 12}}.encode("sub_a", key))
	f.Add("AQ")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := decodeCursor(s, "sub_a", [][]byte{key})
		if err != nil {
			return
		}
		if again := c.encode("sub_a", key); again != s {
			t.Errorf("decoded %q as %+v, which encodes as %q", s, c, again)
		}
	})
}
