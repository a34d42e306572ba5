package signature

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The example of the Standard Webhooks specification
// (github.com/standard-webhooks/standard-webhooks, spec/standard-webhooks.md).
const (
	specSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specTimestamp = 1614265330
	specBody      = `{"test": 2432232314}`
	specSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

// specSign signs as the specification describes it, independently of Sign:
// base64(HMAC-SHA256(base64-decoded secret, "id.timestamp.body")).
func specSign(t testing.TB, secret, id string, ts int64, body string) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatalf("decode %s: %v", secret, err)
	}
	h := hmac.New(sha256.New, key)
	fmt.Fprintf(h, "%s.%d.%s", id, ts, body)
	return "v1," + base64.StdEncoding.EncodeToString(h.Sum(nil))
}

func mustDecode(t testing.TB, secret string) []byte {
	t.Helper()
	key, err := DecodeSecret(secret)
	if err != nil {
		t.Fatalf("DecodeSecret(%q): %v", secret, err)
	}
	return key
}

func TestSigLen(t *testing.T) {
	if got, want := sigLen, base64.StdEncoding.EncodedLen(sha256.Size); got != want {
		t.Errorf("sigLen: got %d, want %d", got, want)
	}
}

func TestSpecExample(t *testing.T) {
	if got := specSign(t, specSecret, specID, specTimestamp, specBody); got != specSignature {
		t.Fatalf("test signer: got %s, want %s", got, specSignature)
	}
	got := Sign(mustDecode(t, specSecret), specID, time.Unix(specTimestamp, 0), []byte(specBody))
	if got != specSignature {
		t.Errorf("Sign: got %s, want %s", got, specSignature)
	}
}

func TestDecodeSecret(t *testing.T) {
	for _, tc := range []struct {
		name, secret string
		wantLen      int // 0: want an error
	}{
		{"spec example", specSecret, 24},
		{"padded", "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 32)), 32},
		{"no prefix", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 0},
		{"other prefix", "whsk_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 0},
		{"empty", "", 0},
		{"prefix only", "whsec_", 0},
		{"not base64", "whsec_not*base64!", 0},
		{"url alphabet", "whsec_-_-_", 0},
		{"missing padding", "whsec_" + base64.RawStdEncoding.EncodeToString(make([]byte, 32)), 0},
		{"trailing newline", specSecret + "\n", 24}, // base64 skips line breaks
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, err := DecodeSecret(tc.secret)
			if tc.wantLen == 0 {
				if err == nil {
					t.Fatalf("error: got nil, want one")
				}
				if enc := strings.TrimPrefix(tc.secret, "whsec_"); len(enc) > 3 && strings.Contains(err.Error(), enc) {
					t.Errorf("error %q contains the secret", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("error: got %v, want nil", err)
			}
			if got := len(key); got != tc.wantLen {
				t.Errorf("key length: got %d, want %d", got, tc.wantLen)
			}
		})
	}
}

func TestNewSecret(t *testing.T) {
	a, b := NewSecret(), NewSecret()
	if got := strings.HasPrefix(a, "whsec_"); got != true {
		t.Errorf("prefix of %q: got %v, want %v", a, got, true)
	}
	if got := len(mustDecode(t, a)); got != 32 {
		t.Errorf("key length: got %d, want %d", got, 32)
	}
	if a == b {
		t.Errorf("two secrets: got %q twice, want different ones", a)
	}
}

func TestVerify(t *testing.T) {
	key := mustDecode(t, specSecret)
	const oldSecret = "whsec_c2VjcmV0LW9mLWEtcm90YXRlZC1lbmRwb2ludA=="
	oldKey := mustDecode(t, oldSecret)
	wrongKey := mustDecode(t, "whsec_"+base64.StdEncoding.EncodeToString([]byte("not the key at all, really")))
	sent := time.Unix(specTimestamp, 0)
	ts := fmt.Sprint(specTimestamp)
	oldSig := specSign(t, oldSecret, specID, specTimestamp, specBody)
	other := specSign(t, specSecret, "msg_other", specTimestamp, specBody)

	for _, tc := range []struct {
		name      string
		keys      [][]byte
		id        string
		timestamp string
		header    string
		body      string
		now       time.Time
		want      error
	}{
		{name: "spec example", header: specSignature},
		{name: "within tolerance before", header: specSignature, now: sent.Add(-5 * time.Minute)},
		{name: "within tolerance after", header: specSignature, now: sent.Add(5 * time.Minute)},
		{name: "several signatures, last matches", header: other + " " + specSignature},
		{name: "several signatures, first matches", header: specSignature + " " + other},
		{name: "other versions skipped", header: "v1a,c2lnbmF0dXJl v2," + specSignature[3:] + " " + specSignature},
		{name: "extra spaces", header: "  " + other + "   " + specSignature + " "},
		{name: "old key during rotation", keys: [][]byte{key, oldKey}, header: oldSig},
		{name: "current key among several", keys: [][]byte{oldKey, key}, header: specSignature},
		{name: "wrong key", keys: [][]byte{wrongKey}, header: specSignature, want: ErrInvalidSignature},
		{name: "no keys", keys: [][]byte{}, header: specSignature, want: ErrInvalidSignature},
		{name: "tampered body", header: specSignature, body: `{"test": 2432232315}`, want: ErrInvalidSignature},
		{name: "tampered id", id: "msg_other", header: specSignature, want: ErrInvalidSignature},
		{name: "tampered timestamp", timestamp: fmt.Sprint(specTimestamp + 1), header: specSignature, want: ErrInvalidSignature},
		{name: "leading zero in timestamp", timestamp: "0" + ts, header: specSignature, want: ErrInvalidSignature},
		{name: "signature of another message", header: other, want: ErrInvalidSignature},
		{name: "stale", header: specSignature, now: sent.Add(5*time.Minute + time.Second), want: ErrTimestamp},
		{name: "future", header: specSignature, now: sent.Add(-5*time.Minute - time.Second), want: ErrTimestamp},
		{name: "far future", timestamp: "999999999999999999", header: specSignature, want: ErrTimestamp},
		{name: "zero timestamp", timestamp: "0", header: specSignature, want: ErrTimestamp},
		{name: "empty timestamp", timestamp: " ", header: specSignature, want: ErrTimestamp},
		{name: "signed timestamp", timestamp: "+" + ts, header: specSignature, want: ErrTimestamp},
		{name: "negative timestamp", timestamp: "-1", header: specSignature, want: ErrTimestamp},
		{name: "fractional timestamp", timestamp: ts + ".5", header: specSignature, want: ErrTimestamp},
		{name: "milliseconds timestamp", timestamp: ts + "000", header: specSignature, want: ErrTimestamp},
		{name: "overflowing timestamp", timestamp: "99999999999999999999999", header: specSignature, want: ErrTimestamp},
		{name: "empty id", id: " ", header: specSignature, want: ErrInvalidSignature},
		{name: "empty header", header: "", want: ErrInvalidSignature},
		{name: "spaces", header: "   ", want: ErrInvalidSignature},
		{name: "version only", header: "v1", want: ErrInvalidSignature},
		{name: "empty signature", header: "v1,", want: ErrInvalidSignature},
		{name: "not base64", header: "v1," + strings.Repeat("!", 44), want: ErrInvalidSignature},
		{name: "short", header: specSignature[:len(specSignature)-2], want: ErrInvalidSignature},
		{name: "long", header: specSignature + "AA", want: ErrInvalidSignature},
		{name: "comma separated", header: other + "," + specSignature, want: ErrInvalidSignature},
		{name: "no version", header: specSignature[3:], want: ErrInvalidSignature},
		{name: "upper case version", header: "V1," + specSignature[3:], want: ErrInvalidSignature},
		{name: "raw bytes", header: "v1,\x00\xff\xfe" + strings.Repeat("\x80", 41), want: ErrInvalidSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := tc.keys
			if keys == nil {
				keys = [][]byte{key}
			}
			id, timestamp, body, now := tc.id, tc.timestamp, tc.body, tc.now
			if id == "" {
				id = specID
			} else if id == " " {
				id = ""
			}
			if timestamp == "" {
				timestamp = ts
			} else if timestamp == " " {
				timestamp = ""
			}
			if body == "" {
				body = specBody
			}
			if now.IsZero() {
				now = sent
			}
			err := Verify(keys, id, timestamp, tc.header, []byte(body), now, 5*time.Minute)
			if got := errors.Is(err, tc.want) && (err == nil) == (tc.want == nil); got != true {
				t.Fatalf("error: got %v, want %v", err, tc.want)
			}
			if err != nil {
				for _, secret := range []string{specSignature[3:], oldSig[3:], specSecret[6:], oldSecret[6:]} {
					if strings.Contains(err.Error(), secret) {
						t.Errorf("error %q contains a key or an expected signature", err)
					}
				}
			}
		})
	}
}

func TestCheckTimestamp(t *testing.T) {
	now := time.Unix(specTimestamp, 0)
	for _, tc := range []struct {
		name      string
		timestamp string
		now       time.Time
		tolerance time.Duration
		wantErr   string // empty: want nil
	}{
		{"now", "1614265330", now, 0, ""},
		{"sub-second now", "1614265330", now.Add(999 * time.Millisecond), time.Second, ""},
		{"zero tolerance", "1614265330", now.Add(time.Millisecond), 0, "invalid timestamp: 0s old (tolerance 0s)"},
		{"negative tolerance", "1614265330", now, -time.Second, "invalid timestamp: 0s old (tolerance -1s)"},
		{"old", "1614265330", now.Add(12*time.Minute + 300*time.Millisecond), 5 * time.Minute, "invalid timestamp: 12m0s old (tolerance 5m0s)"},
		{"future", "1614265330", now.Add(-2 * time.Minute), time.Minute, "invalid timestamp: 2m0s in the future (tolerance 1m0s)"},
		{"year 33658", "999999999999", now, time.Minute, "invalid timestamp: 2562047h47m16s in the future (tolerance 1m0s)"},
		{"hex", "0x60372c72", now, time.Minute, "invalid timestamp: not integer Unix seconds"},
		{"exponent", "1.6e9", now, time.Minute, "invalid timestamp: not integer Unix seconds"},
		{"space", " 1614265330", now, time.Minute, "invalid timestamp: not integer Unix seconds"},
		{"unicode digits", "١٦١٤٢٦٥٣٣٠", now, time.Minute, "invalid timestamp: not integer Unix seconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckTimestamp(tc.timestamp, tc.now, tc.tolerance)
			got := ""
			if err != nil {
				got = err.Error()
				if errors.Is(err, ErrTimestamp) != true {
					t.Errorf("errors.Is(%v, ErrTimestamp): got false, want true", err)
				}
			}
			if got != tc.wantErr {
				t.Errorf("error: got %q, want %q", got, tc.wantErr)
			}
		})
	}
}

// FuzzVerify checks that Verify never panics, whatever its input, and that a
// signature made by Sign always verifies under the same key, id, timestamp
// and body, alone or beside arbitrary other fields of the header.
func FuzzVerify(f *testing.F) {
	f.Add([]byte("key"), specID, int64(specTimestamp), []byte(specBody), specSignature, "1614265330")
	f.Add([]byte{}, "", int64(0), []byte{}, "", "")
	f.Add([]byte("k"), "id", int64(1), []byte("x"), "v1, v1,,v1 v1,====", "-0")
	f.Add([]byte("\x00"), "a.b", int64(1<<40), []byte("."), "v1,"+strings.Repeat("A", 44)+" v1a,x", "+1")
	f.Fuzz(func(t *testing.T, key []byte, id string, ts int64, body []byte, header, timestamp string) {
		now := time.Unix(specTimestamp, 0)
		// Arbitrary input: any outcome but a panic.
		err := Verify([][]byte{key}, id, timestamp, header, body, now, 5*time.Minute)
		if err != nil && !errors.Is(err, ErrInvalidSignature) && !errors.Is(err, ErrTimestamp) {
			t.Fatalf("error %v wraps neither ErrInvalidSignature nor ErrTimestamp", err)
		}

		if id == "" {
			return // not a message
		}
		if ts < 0 {
			ts = -(ts + 1)
		}
		ts %= 1e15 // keeps the timestamp a valid instant
		sent := time.Unix(ts, 0)
		sig := Sign(key, id, sent, body)
		for _, h := range []string{sig, header + " " + sig, sig + " " + header} {
			if err := Verify([][]byte{bytes.Clone(key)}, id, fmt.Sprint(ts), h, body, sent, 0); err != nil {
				t.Fatalf("Verify of Sign(%q, %q, %d, %q) in header %q: %v", key, id, ts, body, h, err)
			}
		}
	})
}
