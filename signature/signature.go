// Package signature owns the signing format of Standard Webhooks
// (https://www.standardwebhooks.com): "whsec_" secrets, the
// "v1,<base64 HMAC-SHA256>" signature over "id.timestamp.body", several
// space-separated signatures in one header during a key rotation, and the
// timestamp tolerance that bounds replays. hookstream uses it to verify
// inbound deliveries of the standard scheme and to sign its own outbound
// deliveries.
//
// It also owns the request format: the header names (HeaderID,
// HeaderTimestamp, HeaderSignature), SignRequest and VerifyRequest. It
// refuses the rest of HTTP (status codes, bodies, clients) and secrets
// storage (where keys live, how they rotate): callers pass decoded keys in.
package signature

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The request headers of a Standard Webhooks message, canonical form.
const (
	// HeaderID carries the message id, stable across retries.
	HeaderID = "Webhook-Id"
	// HeaderTimestamp carries the time of signing, in Unix seconds.
	HeaderTimestamp = "Webhook-Timestamp"
	// HeaderSignature carries the space-separated signatures.
	HeaderSignature = "Webhook-Signature"
)

// SignRequest sets the Standard Webhooks headers of a message on h: its id,
// now as its timestamp, and one v1 signature per key (current first).
func SignRequest(h http.Header, keys [][]byte, id string, now time.Time, body []byte) {
	sigs := make([]string, len(keys))
	for i, key := range keys {
		sigs[i] = Sign(key, id, now, body)
	}
	h[HeaderID] = []string{id}
	h[HeaderTimestamp] = []string{strconv.FormatInt(now.Unix(), 10)}
	h[HeaderSignature] = []string{strings.Join(sigs, " ")}
}

// VerifyRequest checks the Standard Webhooks headers of h against body, as
// Verify does, and returns the message id.
func VerifyRequest(h http.Header, keys [][]byte, body []byte, now time.Time, tolerance time.Duration) (id string, err error) {
	id = h.Get(HeaderID)
	return id, Verify(keys, id, h.Get(HeaderTimestamp), h.Get(HeaderSignature), body, now, tolerance)
}

var (
	// ErrInvalidSignature reports that no signature of a message matches any key,
	// or that the signature header carries none at all.
	ErrInvalidSignature = errors.New("invalid signature")
	// ErrTimestamp reports a timestamp that is not integer seconds or lies
	// outside the tolerance around now.
	ErrTimestamp = errors.New("invalid timestamp")
)

// secretPrefix starts every Standard Webhooks secret.
const secretPrefix = "whsec_"

// version1 starts a v1 (HMAC-SHA256) signature.
const version1 = "v1,"

// sigLen is the length of the base64 of an HMAC-SHA256:
// base64.StdEncoding.EncodedLen(sha256.Size).
const sigLen = 44

// DecodeSecret returns the key of a "whsec_" + base64 secret. Errors never
// contain the secret.
func DecodeSecret(s string) ([]byte, error) {
	enc, ok := strings.CutPrefix(s, secretPrefix)
	if !ok {
		return nil, fmt.Errorf("signature: secret does not start with %q", secretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, errors.New("signature: secret is not whsec_ followed by standard base64")
	}
	if len(key) == 0 {
		return nil, errors.New("signature: secret has an empty key")
	}
	return key, nil
}

// NewSecret returns a fresh secret: "whsec_" and the base64 of 32 random bytes.
func NewSecret() string {
	var key [32]byte
	rand.Read(key[:]) // never returns an error; it crashes the program if the system has no randomness
	return secretPrefix + base64.StdEncoding.EncodeToString(key[:])
}

// Sign returns the v1 signature of a message: "v1," followed by the base64 of
// HMAC-SHA256(key, id + "." + ts in Unix seconds + "." + body). Verify
// refuses timestamps before 1970, so ts must not be.
func Sign(key []byte, id string, ts time.Time, body []byte) string {
	mac := sum(key, id, strconv.FormatInt(ts.Unix(), 10), body)
	return version1 + base64.StdEncoding.EncodeToString(mac)
}

// Verify checks a message against its signature header, which holds one or
// more space-separated signatures such as "v1,<base64>" (several during a key
// rotation; signatures of other versions are skipped). It accepts the message
// if any v1 signature matches any of keys, comparing in constant time, and if
// timestamp, in integer Unix seconds, lies within tolerance of now (either
// way). The MAC covers timestamp as sent.
//
// Errors wrap ErrTimestamp or ErrInvalidSignature and never contain keys or
// expected signatures. Verify never panics, whatever its input.
func Verify(keys [][]byte, id, timestamp, signatureHeader string, body []byte, now time.Time, tolerance time.Duration) error {
	if err := CheckTimestamp(timestamp, now, tolerance); err != nil {
		return err
	}
	if id == "" {
		return fmt.Errorf("%w: empty message id", ErrInvalidSignature)
	}
	candidates := v1Signatures(signatureHeader)
	if !hasAny(candidates) {
		return fmt.Errorf("%w: no well-formed v1 signature in header", ErrInvalidSignature)
	}
	var (
		encoded [sigLen]byte
		decoded [sha256.Size + 1]byte // base64.StdEncoding.DecodedLen(sigLen)
	)
	for _, key := range keys {
		mac := sum(key, id, timestamp, body)
		for sig := range candidates {
			n, err := base64.StdEncoding.Decode(decoded[:], encoded[:copy(encoded[:], sig)])
			if err == nil && hmac.Equal(decoded[:n], mac) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: no v1 signature matches", ErrInvalidSignature)
}

// v1Signatures yields the base64 part of each field of a signature header
// that has the form of a v1 signature; other fields are skipped.
func v1Signatures(header string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for rest := header; rest != ""; {
			var field string
			field, rest, _ = strings.Cut(rest, " ")
			if sig, ok := strings.CutPrefix(field, version1); ok && len(sig) == sigLen {
				if !yield(sig) {
					return
				}
			}
		}
	}
}

// hasAny reports whether seq yields anything, so that malformed headers cost
// no HMAC.
func hasAny(seq iter.Seq[string]) bool {
	for range seq {
		return true
	}
	return false
}

// sum returns HMAC-SHA256(key, id + "." + ts + "." + body).
func sum(key []byte, id, ts string, body []byte) []byte {
	// One buffer holds the signed prefix, then the MAC.
	buf := make([]byte, 0, max(len(id)+len(ts)+2, sha256.Size))
	buf = append(append(append(append(buf, id...), '.'), ts...), '.')
	h := hmac.New(sha256.New, key)
	h.Write(buf)
	h.Write(body)
	return h.Sum(buf[:0])
}

// CheckTimestamp returns nil if timestamp is integer Unix seconds (ASCII
// digits only) within tolerance of now, in the past or the future. Otherwise
// the error wraps ErrTimestamp and says how far off the timestamp is.
func CheckTimestamp(timestamp string, now time.Time, tolerance time.Duration) error {
	secs, ok := parseSeconds(timestamp)
	if !ok {
		return fmt.Errorf("%w: not integer Unix seconds", ErrTimestamp)
	}
	// Sub saturates, so timestamps far from now cannot overflow into range;
	// a negative tolerance accepts nothing.
	sent := time.Unix(secs, 0)
	if age := now.Sub(sent); age > tolerance {
		return fmt.Errorf("%w: %s old (tolerance %s)", ErrTimestamp, age.Truncate(time.Second), tolerance)
	}
	if ahead := sent.Sub(now); ahead > tolerance {
		return fmt.Errorf("%w: %s in the future (tolerance %s)", ErrTimestamp, ahead.Truncate(time.Second), tolerance)
	}
	return nil
}

// parseSeconds parses a non-negative decimal number of seconds. Unlike
// strconv.ParseInt it refuses signs, so that only the digits a sender signed
// are accepted.
func parseSeconds(s string) (int64, bool) {
	if s == "" || len(s) > 18 { // 18 digits cannot overflow int64
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
