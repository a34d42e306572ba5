package pull

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math"

	"github.com/hookstream/hookstream/subscriptions"
)

// A cursor is where a pull subscription's consumer stands: in each
// partition of the events topic, where the answer it came with began
// (from) and where the next one begins (to), and the replay it was
// minted under (the subscription's Rewind.ID, "" before any). It travels
// as base64url of
//
//	version 1 | uvarint len(rewind) | rewind | uvarint n | n × (uvarint from, uvarint to-from) | mac
//
// where mac is the first 16 bytes of HMAC-SHA256 of the subscription id
// and everything before it, keyed by a key derived from a pull token of
// the subscription (cursorKey): a consumer cannot alter its cursor nor
// present another subscription's, and one minted before the token was
// rotated is good while the old token is.
type cursor struct {
	rewind   string
	from, to []int64 // by partition
}

// Bounds of a cursor as it travels.
const (
	cursorVersion = 1
	macBytes      = 16
	maxRewindID   = 64
	// maxCursor bounds a cursor's text: 10,000 partitions of large
	// offsets fit.
	maxCursor = 64 << 10
)

// errMalformed and errForeign are the two ways a cursor is refused: it is
// not one at all, or it is not one of this subscription's (altered,
// another subscription's, or minted under a token no longer valid).
var (
	errMalformed = errors.New("malformed cursor")
	errForeign   = errors.New("cursor not valid for this subscription: another subscription's, altered, or minted under a pull token no longer valid")
)

// cursorKey is the key that signs a subscription's cursors, derived from
// one of its pull tokens' bytes.
func cursorKey(token []byte) []byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte("hookstream pull cursor key"))
	return m.Sum(nil)
}

// mac is the cursor's authentication for subscription sub.
func mac(key []byte, sub string, payload []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(sub))
	m.Write([]byte{0})
	m.Write(payload)
	return m.Sum(nil)[:macBytes]
}

// encode returns c as the text of subscription sub, signed with key.
func (c cursor) encode(sub string, key []byte) string {
	b := make([]byte, 0, 16+len(c.rewind)+len(c.from)*12)
	b = append(b, cursorVersion)
	b = binary.AppendUvarint(b, uint64(len(c.rewind)))
	b = append(b, c.rewind...)
	b = binary.AppendUvarint(b, uint64(len(c.from)))
	for p := range c.from {
		b = binary.AppendUvarint(b, uint64(c.from[p]))
		b = binary.AppendUvarint(b, uint64(c.to[p]-c.from[p]))
	}
	b = append(b, mac(key, sub, b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor reads the text s of a cursor of subscription sub, signed
// with one of keys. Its errors are errMalformed or errForeign.
func decodeCursor(s, sub string, keys [][]byte) (cursor, error) {
	if len(s) > maxCursor {
		return cursor{}, errMalformed
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 1+macBytes {
		return cursor{}, errMalformed
	}
	payload, sum := b[:len(b)-macBytes], b[len(b)-macBytes:]
	signed := false
	for _, k := range keys {
		if hmac.Equal(mac(k, sub, payload), sum) {
			signed = true
		}
	}
	if !signed {
		return cursor{}, errForeign
	}
	// A signed cursor was written by encode; it is read as carefully
	// all the same.
	r := payload
	if r[0] != cursorVersion {
		return cursor{}, errMalformed
	}
	r = r[1:]
	n, ok := uvarint(&r)
	if !ok || n > maxRewindID || uint64(len(r)) < n {
		return cursor{}, errMalformed
	}
	c := cursor{rewind: string(r[:n])}
	r = r[n:]
	if n, ok = uvarint(&r); !ok || n > uint64(len(r))/2 {
		return cursor{}, errMalformed
	}
	c.from, c.to = make([]int64, n), make([]int64, n)
	for p := range c.from {
		from, ok1 := uvarint(&r)
		delta, ok2 := uvarint(&r)
		if !ok1 || !ok2 || from > math.MaxInt64/2 || delta > math.MaxInt64/2 {
			return cursor{}, errMalformed
		}
		c.from[p], c.to[p] = int64(from), int64(from+delta)
	}
	if len(r) != 0 {
		return cursor{}, errMalformed
	}
	return c, nil
}

func uvarint(b *[]byte) (uint64, bool) {
	v, n := binary.Uvarint(*b)
	if n <= 0 {
		return 0, false
	}
	*b = (*b)[n:]
	return v, true
}

// widen gives c the partitions after its own at pos: a cursor minted
// before partitions were added to the events topic reads them from pos.
func (c *cursor) widen(pos []int64) {
	for p := len(c.to); p < len(pos); p++ {
		c.from = append(c.from, pos[p])
		c.to = append(c.to, pos[p])
	}
}

// rewindID is the replay sub's cursors are minted under: its last
// replay's id, "" before any.
func rewindID(sub subscriptions.Subscription) string {
	if sub.Rewind == nil {
		return ""
	}
	return sub.Rewind.ID
}
