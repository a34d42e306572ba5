package ingest

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hookstream/hookstream/signature"
)

// Verifier checks that a request comes from its provider.
type Verifier interface {
	// Verify returns nil for an authentic request, else an error wrapping
	// ErrInvalidSignature (and signature.ErrTimestamp when the timestamp is
	// malformed or outside the tolerance). Errors never contain secrets or
	// expected signatures. Verify is safe for concurrent use.
	Verify(h http.Header, body []byte, now time.Time) error
	// Headers names the request headers the scheme reads, canonical form;
	// they are carried to Kafka. Headers that carry the secret itself (the
	// token scheme's) are left out.
	Headers() []string
}

// ErrInvalidSignature is wrapped by every verification failure. It is
// signature.ErrInvalidSignature, so that one errors.Is covers both packages.
var ErrInvalidSignature = signature.ErrInvalidSignature

// The request headers of the built-in schemes, canonical form.
const (
	verifyHeaderGitHub         = "X-Hub-Signature-256"
	verifyHeaderStripe         = "Stripe-Signature"
	verifyHeaderShopify        = "X-Shopify-Hmac-Sha256"
	verifyHeaderSlackSignature = "X-Slack-Signature"
	verifyHeaderSlackTimestamp = "X-Slack-Request-Timestamp"
)

var (
	errSignatureMismatch = fmt.Errorf("%w: no signature matches", ErrInvalidSignature)
	errTokenMismatch     = fmt.Errorf("%w: token does not match", ErrInvalidSignature)
)

// NewVerifier compiles the verification of one source. It returns an error,
// naming the field at fault, for an unusable configuration; the error never
// contains a secret.
func NewVerifier(c Verify) (Verifier, error) {
	if err := errors.Join(c.problems()...); err != nil {
		return nil, err
	}
	tolerance := c.Tolerance
	if tolerance == 0 {
		tolerance = DefaultTolerance
	}
	secrets := append([]string{c.Secret}, c.OldSecrets...)
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		keys[i] = []byte(s)
	}
	switch c.Scheme {
	case SchemeGitHub:
		return newBodyMACVerifier(verifyHeaderGitHub, "sha256=", sha256.New, sigHex, keys), nil
	case SchemeShopify:
		return newBodyMACVerifier(verifyHeaderShopify, "", sha256.New, sigBase64, keys), nil
	case SchemeHMAC:
		return newBodyMACVerifier(c.Header, c.Prefix, verifyAlgorithms[c.Algorithm], verifyEncodings[c.Encoding], keys), nil
	case SchemeStripe:
		return &stripeVerifier{
			sig:       newSchemeHeader(verifyHeaderStripe),
			tolerance: tolerance,
			keys:      newMACKeyring(sha256.New, keys),
		}, nil
	case SchemeSlack:
		return &slackVerifier{
			sig:       newSchemeHeader(verifyHeaderSlackSignature),
			ts:        newSchemeHeader(verifyHeaderSlackTimestamp),
			tolerance: tolerance,
			keys:      newMACKeyring(sha256.New, keys),
		}, nil
	case SchemeStandard:
		v := &standardVerifier{
			id:        newSchemeHeader(signature.HeaderID),
			ts:        newSchemeHeader(signature.HeaderTimestamp),
			sig:       newSchemeHeader(signature.HeaderSignature),
			tolerance: tolerance,
		}
		for i, s := range secrets {
			key, err := signature.DecodeSecret(s)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", secretField(i), err)
			}
			v.keys = append(v.keys, key)
		}
		return v, nil
	case SchemeToken:
		v := &tokenVerifier{token: newSchemeHeader(c.Header), secrets: keys}
		longest := 0
		for _, k := range keys {
			longest = max(longest, len(k))
		}
		v.bufs.New = func() any { b := make([]byte, longest); return &b }
		return v, nil
	}
	return noneVerifier{}, nil
}

var verifyAlgorithms = map[string]func() hash.Hash{
	"":       sha256.New,
	"sha256": sha256.New,
	"sha1":   sha1.New,
	"sha512": sha512.New,
}

var verifyEncodings = map[string]sigEncoding{"": sigHex, "hex": sigHex, "base64": sigBase64}

// schemeHeader is a request header a scheme reads, with its errors built once
// so that rejecting a request allocates nothing.
type schemeHeader struct {
	name               string // canonical
	missing, malformed error
}

func newSchemeHeader(name string) schemeHeader {
	name = http.CanonicalHeaderKey(name)
	return schemeHeader{
		name:      name,
		missing:   fmt.Errorf("%w: missing %s header", ErrInvalidSignature, name),
		malformed: fmt.Errorf("%w: malformed %s header", ErrInvalidSignature, name),
	}
}

// value returns the first value of the header, or its missing error.
func (sh *schemeHeader) value(h http.Header) (string, error) {
	if v := h.Get(sh.name); v != "" {
		return v, nil
	}
	return "", sh.missing
}

// noneVerifier accepts every request.
type noneVerifier struct{}

func (noneVerifier) Verify(http.Header, []byte, time.Time) error { return nil }
func (noneVerifier) Headers() []string                           { return nil }

// bodyMACVerifier checks one header holding prefix + the encoded HMAC of the
// body: the github, shopify and hmac schemes.
type bodyMACVerifier struct {
	sig    schemeHeader
	prefix string
	enc    sigEncoding
	sigLen int // length of an encoded MAC, after the prefix
	keys   *macKeyring
}

func newBodyMACVerifier(header, prefix string, newHash func() hash.Hash, enc sigEncoding, keys [][]byte) *bodyMACVerifier {
	kr := newMACKeyring(newHash, keys)
	return &bodyMACVerifier{
		sig:    newSchemeHeader(header),
		prefix: prefix,
		enc:    enc,
		sigLen: enc.encodedLen(kr.size),
		keys:   kr,
	}
}

func (v *bodyMACVerifier) Verify(h http.Header, body []byte, _ time.Time) error {
	header, err := v.sig.value(h)
	if err != nil {
		return err
	}
	sig, ok := strings.CutPrefix(header, v.prefix)
	if !ok || len(sig) != v.sigLen {
		return v.sig.malformed
	}
	s := v.keys.get()
	defer v.keys.put(s)
	got, ok := s.decode(sig, v.enc)
	if !ok {
		return v.sig.malformed
	}
	s.sum(nil, body)
	if s.matches(got) {
		return nil
	}
	return errSignatureMismatch
}

func (v *bodyMACVerifier) Headers() []string { return []string{v.sig.name} }

// stripeVerifier checks Stripe-Signature: "t=<unix>,v1=<hex>[,v1=<hex>...]",
// each v1 the hex HMAC-SHA256 of t + "." + body; other fields are ignored.
type stripeVerifier struct {
	sig       schemeHeader
	tolerance time.Duration
	keys      *macKeyring
}

func (v *stripeVerifier) Verify(h http.Header, body []byte, now time.Time) error {
	header, err := v.sig.value(h)
	if err != nil {
		return err
	}
	ts, signed := "", false
	for field := range strings.SplitSeq(header, ",") {
		switch k, val, _ := strings.Cut(strings.TrimSpace(field), "="); k {
		case "t":
			if ts == "" {
				ts = val
			}
		case "v1":
			signed = true
		}
	}
	if ts == "" || !signed {
		return v.sig.malformed
	}
	if err := signature.CheckTimestamp(ts, now, v.tolerance); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSignature, err)
	}
	s := v.keys.get()
	defer v.keys.put(s)
	s.sum(append(append(s.head[:0], ts...), '.'), body)
	for field := range strings.SplitSeq(header, ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(field), "=")
		if k != "v1" || len(val) != 2*sha256.Size {
			continue
		}
		if got, ok := s.decode(val, sigHex); ok && s.matches(got) {
			return nil
		}
	}
	return errSignatureMismatch
}

func (v *stripeVerifier) Headers() []string { return []string{v.sig.name} }

// slackVerifier checks X-Slack-Signature: "v0=" + the hex HMAC-SHA256 of
// "v0:" + X-Slack-Request-Timestamp + ":" + body.
type slackVerifier struct {
	sig, ts   schemeHeader
	tolerance time.Duration
	keys      *macKeyring
}

func (v *slackVerifier) Verify(h http.Header, body []byte, now time.Time) error {
	header, err := v.sig.value(h)
	if err != nil {
		return err
	}
	ts, err := v.ts.value(h)
	if err != nil {
		return err
	}
	sig, ok := strings.CutPrefix(header, "v0=")
	if !ok || len(sig) != 2*sha256.Size {
		return v.sig.malformed
	}
	if err := signature.CheckTimestamp(ts, now, v.tolerance); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSignature, err)
	}
	s := v.keys.get()
	defer v.keys.put(s)
	got, ok := s.decode(sig, sigHex)
	if !ok {
		return v.sig.malformed
	}
	head := append(s.head[:0], "v0:"...)
	s.sum(append(append(head, ts...), ':'), body)
	if s.matches(got) {
		return nil
	}
	return errSignatureMismatch
}

func (v *slackVerifier) Headers() []string { return []string{v.sig.name, v.ts.name} }

// standardVerifier checks Standard Webhooks headers with package signature.
type standardVerifier struct {
	id, ts, sig schemeHeader
	tolerance   time.Duration
	keys        [][]byte
}

func (v *standardVerifier) Verify(h http.Header, body []byte, now time.Time) error {
	id, err := v.id.value(h)
	if err != nil {
		return err
	}
	ts, err := v.ts.value(h)
	if err != nil {
		return err
	}
	sig, err := v.sig.value(h)
	if err != nil {
		return err
	}
	err = signature.Verify(v.keys, id, ts, sig, body, now, v.tolerance)
	if err == nil || errors.Is(err, ErrInvalidSignature) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrInvalidSignature, err)
}

func (v *standardVerifier) Headers() []string { return []string{v.id.name, v.ts.name, v.sig.name} }

// tokenVerifier checks that a header holds one of the secrets.
type tokenVerifier struct {
	token   schemeHeader
	secrets [][]byte
	bufs    sync.Pool // of *[]byte as long as the longest secret
}

func (v *tokenVerifier) Verify(h http.Header, _ []byte, _ time.Time) error {
	token, err := v.token.value(h)
	if err != nil {
		return err
	}
	buf := v.bufs.Get().(*[]byte)
	defer v.bufs.Put(buf)
	if len(token) > len(*buf) {
		return errTokenMismatch
	}
	got := (*buf)[:copy(*buf, token)]
	for _, secret := range v.secrets {
		if subtle.ConstantTimeCompare(got, secret) == 1 {
			return nil
		}
	}
	return errTokenMismatch
}

// Headers leaves the token out: it is the secret, and records are read by
// every consumer of the ingest topic.
func (v *tokenVerifier) Headers() []string { return nil }

// sigEncoding is how a scheme writes a MAC in its header.
type sigEncoding uint8

const (
	sigHex sigEncoding = iota
	sigBase64
)

func (e sigEncoding) encodedLen(n int) int {
	if e == sigBase64 {
		return base64.StdEncoding.EncodedLen(n)
	}
	return hex.EncodedLen(n)
}

// macKeyring computes a scheme's HMACs under its secret and old secrets.
// Keyed hashes and buffers are pooled: verifying allocates nothing.
type macKeyring struct {
	size int       // bytes of a MAC
	pool sync.Pool // of *macScratch
}

// macScratch is what one verification borrows from a macKeyring.
type macScratch struct {
	size   int         // bytes of a MAC
	hashes []hash.Hash // one per key
	sums   [][]byte    // sums[i]: the last MAC under hashes[i]
	head   []byte      // room for what the signed content has before the body
	enc    []byte      // room for an encoded MAC
	dec    []byte      // room for a decoded MAC
}

func newMACKeyring(newHash func() hash.Hash, keys [][]byte) *macKeyring {
	kr := &macKeyring{size: newHash().Size()}
	kr.pool.New = func() any {
		s := &macScratch{
			size:   kr.size,
			hashes: make([]hash.Hash, len(keys)),
			sums:   make([][]byte, len(keys)),
			head:   make([]byte, 0, 32),
			enc:    make([]byte, 2*kr.size), // hex; base64 is shorter
			dec:    make([]byte, kr.size+2), // base64 decodes up to 2 bytes of padding
		}
		for i, k := range keys {
			s.hashes[i] = hmac.New(newHash, k)
			s.sums[i] = make([]byte, 0, kr.size)
		}
		return s
	}
	return kr
}

func (kr *macKeyring) get() *macScratch  { return kr.pool.Get().(*macScratch) }
func (kr *macKeyring) put(s *macScratch) { kr.pool.Put(s) }

// decode decodes an encoded MAC into s.dec. It reports false for anything
// that cannot be a MAC of this keyring.
func (s *macScratch) decode(sig string, enc sigEncoding) ([]byte, bool) {
	if len(sig) > len(s.enc) {
		return nil, false
	}
	src := s.enc[:copy(s.enc, sig)]
	var (
		n   int
		err error
	)
	if enc == sigBase64 {
		n, err = base64.StdEncoding.Decode(s.dec, src)
	} else {
		n, err = hex.Decode(s.dec, src)
	}
	if err != nil || n != s.size {
		return nil, false
	}
	return s.dec[:n], true
}

// sum computes the MAC of head + body under every key.
func (s *macScratch) sum(head, body []byte) {
	s.head = head[:0] // keeps a grown buffer
	for i, h := range s.hashes {
		h.Reset()
		h.Write(head)
		h.Write(body)
		s.sums[i] = h.Sum(s.sums[i][:0])
	}
}

// matches reports, in constant time for each key, whether got is the MAC
// last summed under any key.
func (s *macScratch) matches(got []byte) bool {
	for _, sum := range s.sums {
		if hmac.Equal(got, sum) {
			return true
		}
	}
	return false
}
