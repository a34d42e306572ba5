package ingest

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookstream/hookstream/signature"
)

// The signers below compute signatures the way each provider documents them,
// independently of verify.go.

func verifyTestMAC(newHash func() hash.Hash, key, msg string) []byte {
	h := hmac.New(newHash, []byte(key))
	h.Write([]byte(msg))
	return h.Sum(nil)
}

// docs.github.com, "Validating webhook deliveries".
func signGitHub(secret, body string) string {
	return "sha256=" + hex.EncodeToString(verifyTestMAC(sha256.New, secret, body))
}

// docs.stripe.com, "Verify webhook signatures manually": the signed payload is
// the timestamp, a dot and the body; the key is the endpoint secret as is.
func signStripe(secret string, t int64, body string) string {
	return hex.EncodeToString(verifyTestMAC(sha256.New, secret, fmt.Sprintf("%d.%s", t, body)))
}

// shopify.dev, "Verify webhooks": base64 of the HMAC-SHA256 of the body.
func signShopify(secret, body string) string {
	return base64.StdEncoding.EncodeToString(verifyTestMAC(sha256.New, secret, body))
}

// docs.slack.dev, "Verifying requests from Slack".
func signSlack(secret string, ts int64, body string) string {
	return "v0=" + hex.EncodeToString(verifyTestMAC(sha256.New, secret, fmt.Sprintf("v0:%d:%s", ts, body)))
}

// standardwebhooks.com: the key is the base64 after whsec_; secret must be
// valid.
func signStandard(secret, id string, ts int64, body string) string {
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	h := hmac.New(sha256.New, key)
	fmt.Fprintf(h, "%s.%d.%s", id, ts, body)
	return "v1," + base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// verifyTestHeader builds a header from name, value pairs.
func verifyTestHeader(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func mustVerifier(t testing.TB, c Verify) Verifier {
	t.Helper()
	v, err := NewVerifier(c)
	if err != nil {
		t.Fatalf("NewVerifier(%+v): %v", c, err)
	}
	return v
}

type verifyCase struct {
	name   string
	cfg    Verify
	header http.Header
	body   string    // default verifyTestBody
	now    time.Time // default verifyTestNow
	want   error     // nil, ErrInvalidSignature or signature.ErrTimestamp
}

const verifyTestBody = `{"id":"evt_1","type":"push","data":{"n":1}}`

var verifyTestNow = time.Unix(1_700_000_000, 0)

func runVerifyCases(t *testing.T, cases []verifyCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body, now := tc.body, tc.now
			if body == "" {
				body = verifyTestBody
			}
			if now.IsZero() {
				now = verifyTestNow
			}
			err := mustVerifier(t, tc.cfg).Verify(tc.header, []byte(body), now)
			if got := errors.Is(err, tc.want) && (err == nil) == (tc.want == nil); got != true {
				t.Fatalf("error: got %v, want %v", err, tc.want)
			}
			if err == nil {
				return
			}
			if got := errors.Is(err, ErrInvalidSignature); got != true {
				t.Errorf("errors.Is(%v, ErrInvalidSignature): got %v, want %v", err, got, true)
			}
			for _, s := range append([]string{tc.cfg.Secret}, tc.cfg.OldSecrets...) {
				if got := strings.Contains(err.Error(), s); got != false {
					t.Errorf("error %q contains a secret", err)
				}
			}
			for _, vals := range tc.header {
				for _, v := range vals {
					if got := len(v) >= 8 && strings.Contains(err.Error(), v); got != false {
						t.Errorf("error %q echoes header value %q", err, v)
					}
				}
			}
		})
	}
}

func TestVerifyGitHub(t *testing.T) {
	const secret, old = "It's a Secret to Everybody", "the-previous-secret"
	cfg := Verify{Scheme: "github", Secret: secret}
	rotating := Verify{Scheme: "github", Secret: secret, OldSecrets: []string{old}}
	valid := signGitHub(secret, verifyTestBody)
	runVerifyCases(t, []verifyCase{
		{name: "documented example", cfg: cfg, body: "Hello, World!",
			header: verifyTestHeader("X-Hub-Signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")},
		{name: "valid", cfg: cfg, header: verifyTestHeader("X-Hub-Signature-256", valid)},
		{name: "lower-case header name", cfg: cfg, header: http.Header{"X-Hub-Signature-256": {valid}}},
		{name: "upper-case hex", cfg: cfg, header: verifyTestHeader("X-Hub-Signature-256", "sha256="+strings.ToUpper(valid[7:]))},
		{name: "old secret during rotation", cfg: rotating, header: verifyTestHeader("X-Hub-Signature-256", signGitHub(old, verifyTestBody))},
		{name: "current secret during rotation", cfg: rotating, header: verifyTestHeader("X-Hub-Signature-256", valid)},
		{name: "old secret after rotation", cfg: cfg, header: verifyTestHeader("X-Hub-Signature-256", signGitHub(old, verifyTestBody)), want: ErrInvalidSignature},
		{name: "wrong secret", cfg: cfg, header: verifyTestHeader("X-Hub-Signature-256", signGitHub("wrong", verifyTestBody)), want: ErrInvalidSignature},
		{name: "tampered body", cfg: cfg, body: verifyTestBody + " ", header: verifyTestHeader("X-Hub-Signature-256", valid), want: ErrInvalidSignature},
		{name: "missing header", cfg: cfg, header: verifyTestHeader("X-Hub-Signature", "sha1=0000"), want: ErrInvalidSignature},
		{name: "empty header", cfg: cfg, header: verifyTestHeader("X-Hub-Signature-256", ""), want: ErrInvalidSignature},
		{name: "no prefix", cfg: cfg, header: verifyTestHeader("X-Hub-Signature-256", valid[7:]), want: ErrInvalidSignature},
		{name: "sha1 prefix", cfg: cfg, header: verifyTestHeader("X-Hub-Signature-256", "sha1="+valid[7:]), want: ErrInvalidSignature},
		{name: "short", cfg: cfg, header: verifyTestHeader("X-Hub-Signature-256", valid[:len(valid)-2]), want: ErrInvalidSignature},
		{name: "not hex", cfg: cfg, header: verifyTestHeader("X-Hub-Signature-256", "sha256="+strings.Repeat("zz", 32)), want: ErrInvalidSignature},
		{name: "base64", cfg: cfg, header: verifyTestHeader("X-Hub-Signature-256", "sha256="+signShopify(secret, verifyTestBody)), want: ErrInvalidSignature},
	})
}

func TestVerifyStripe(t *testing.T) {
	const secret, old = "whsec_stripe_current", "whsec_stripe_previous"
	cfg := Verify{Scheme: "stripe", Secret: secret}
	rotating := Verify{Scheme: "stripe", Secret: secret, OldSecrets: []string{old}}
	ts := verifyTestNow.Unix()
	valid := signStripe(secret, ts, verifyTestBody)
	stripe := func(v string) http.Header { return verifyTestHeader("Stripe-Signature", v) }
	runVerifyCases(t, []verifyCase{
		{name: "valid", cfg: cfg, header: stripe(fmt.Sprintf("t=%d,v1=%s", ts, valid))},
		{name: "with v0 and unknown fields", cfg: cfg, header: stripe(fmt.Sprintf("t=%d,v1=%s,v0=%s,x=y", ts, valid, strings.Repeat("0", 64)))},
		{name: "several v1, last matches", cfg: cfg, header: stripe(fmt.Sprintf("t=%d,v1=%s,v1=%s", ts, signStripe("other", ts, verifyTestBody), valid))},
		{name: "fields in any order with spaces", cfg: cfg, header: stripe(fmt.Sprintf("v1=%s, t=%d", valid, ts))},
		{name: "old secret during rotation", cfg: rotating, header: stripe(fmt.Sprintf("t=%d,v1=%s", ts, signStripe(old, ts, verifyTestBody)))},
		{name: "within tolerance", cfg: cfg, now: verifyTestNow.Add(5 * time.Minute), header: stripe(fmt.Sprintf("t=%d,v1=%s", ts, valid))},
		{name: "custom tolerance", cfg: Verify{Scheme: "stripe", Secret: secret, Tolerance: time.Hour},
			now: verifyTestNow.Add(59 * time.Minute), header: stripe(fmt.Sprintf("t=%d,v1=%s", ts, valid))},
		{name: "stale", cfg: cfg, now: verifyTestNow.Add(5*time.Minute + time.Second), header: stripe(fmt.Sprintf("t=%d,v1=%s", ts, valid)), want: signature.ErrTimestamp},
		{name: "future", cfg: cfg, now: verifyTestNow.Add(-6 * time.Minute), header: stripe(fmt.Sprintf("t=%d,v1=%s", ts, valid)), want: signature.ErrTimestamp},
		{name: "wrong secret", cfg: cfg, header: stripe(fmt.Sprintf("t=%d,v1=%s", ts, signStripe("wrong", ts, verifyTestBody))), want: ErrInvalidSignature},
		{name: "tampered body", cfg: cfg, body: `{"id":"evt_2"}`, header: stripe(fmt.Sprintf("t=%d,v1=%s", ts, valid)), want: ErrInvalidSignature},
		{name: "tampered timestamp", cfg: cfg, header: stripe(fmt.Sprintf("t=%d,v1=%s", ts+1, valid)), want: ErrInvalidSignature},
		{name: "only v0", cfg: cfg, header: stripe(fmt.Sprintf("t=%d,v0=%s", ts, valid)), want: ErrInvalidSignature},
		{name: "missing header", cfg: cfg, header: verifyTestHeader("Stripe-Sig", fmt.Sprintf("t=%d,v1=%s", ts, valid)), want: ErrInvalidSignature},
		{name: "no timestamp", cfg: cfg, header: stripe("v1=" + valid), want: ErrInvalidSignature},
		{name: "no signature", cfg: cfg, header: stripe(fmt.Sprintf("t=%d", ts)), want: ErrInvalidSignature},
		{name: "bad timestamp", cfg: cfg, header: stripe("t=yesterday,v1=" + valid), want: signature.ErrTimestamp},
		{name: "short signature", cfg: cfg, header: stripe(fmt.Sprintf("t=%d,v1=%s", ts, valid[:63])), want: ErrInvalidSignature},
		{name: "not hex", cfg: cfg, header: stripe(fmt.Sprintf("t=%d,v1=%s", ts, strings.Repeat("g", 64))), want: ErrInvalidSignature},
		{name: "garbage", cfg: cfg, header: stripe(",,=,t,v1,=="), want: ErrInvalidSignature},
	})
}

func TestVerifyShopify(t *testing.T) {
	const secret, old = "shpss_current", "shpss_previous"
	cfg := Verify{Scheme: "shopify", Secret: secret}
	rotating := Verify{Scheme: "shopify", Secret: secret, OldSecrets: []string{old}}
	valid := signShopify(secret, verifyTestBody)
	shopify := func(v string) http.Header { return verifyTestHeader("X-Shopify-Hmac-SHA256", v) }
	runVerifyCases(t, []verifyCase{
		{name: "valid", cfg: cfg, header: shopify(valid)},
		{name: "old secret during rotation", cfg: rotating, header: shopify(signShopify(old, verifyTestBody))},
		{name: "wrong secret", cfg: cfg, header: shopify(signShopify("wrong", verifyTestBody)), want: ErrInvalidSignature},
		{name: "tampered body", cfg: cfg, body: "{}", header: shopify(valid), want: ErrInvalidSignature},
		{name: "missing header", cfg: cfg, header: verifyTestHeader("X-Shopify-Topic", "orders/create"), want: ErrInvalidSignature},
		{name: "hex", cfg: cfg, header: shopify(hex.EncodeToString(verifyTestMAC(sha256.New, secret, verifyTestBody))), want: ErrInvalidSignature},
		{name: "unpadded", cfg: cfg, header: shopify(strings.TrimRight(valid, "=")), want: ErrInvalidSignature},
		{name: "not base64", cfg: cfg, header: shopify(strings.Repeat("*", len(valid))), want: ErrInvalidSignature},
	})
}

func TestVerifySlack(t *testing.T) {
	const secret, old = "8f742231b10e8888abcd99yyyzzz85a5", "slack-previous-secret"
	cfg := Verify{Scheme: "slack", Secret: secret}
	rotating := Verify{Scheme: "slack", Secret: secret, OldSecrets: []string{old}}
	ts := verifyTestNow.Unix()
	valid := signSlack(secret, ts, verifyTestBody)
	slack := func(sig string, ts int64) http.Header {
		return verifyTestHeader("X-Slack-Signature", sig, "X-Slack-Request-Timestamp", fmt.Sprint(ts))
	}
	const docBody = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
	runVerifyCases(t, []verifyCase{
		{name: "documented example", cfg: cfg, body: docBody, now: time.Unix(1531420618, 0).Add(time.Minute),
			header: slack("v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503", 1531420618)},
		{name: "valid", cfg: cfg, header: slack(valid, ts)},
		{name: "old secret during rotation", cfg: rotating, header: slack(signSlack(old, ts, verifyTestBody), ts)},
		{name: "wrong secret", cfg: cfg, header: slack(signSlack("wrong", ts, verifyTestBody), ts), want: ErrInvalidSignature},
		{name: "tampered body", cfg: cfg, body: "{}", header: slack(valid, ts), want: ErrInvalidSignature},
		{name: "tampered timestamp", cfg: cfg, header: slack(valid, ts-1), want: ErrInvalidSignature},
		{name: "stale", cfg: cfg, header: slack(signSlack(secret, ts-301, verifyTestBody), ts-301), want: signature.ErrTimestamp},
		{name: "future", cfg: cfg, header: slack(signSlack(secret, ts+301, verifyTestBody), ts+301), want: signature.ErrTimestamp},
		{name: "missing signature", cfg: cfg, header: verifyTestHeader("X-Slack-Request-Timestamp", fmt.Sprint(ts)), want: ErrInvalidSignature},
		{name: "missing timestamp", cfg: cfg, header: verifyTestHeader("X-Slack-Signature", valid), want: ErrInvalidSignature},
		{name: "bad timestamp", cfg: cfg, header: verifyTestHeader("X-Slack-Signature", valid, "X-Slack-Request-Timestamp", "now"), want: signature.ErrTimestamp},
		{name: "no version", cfg: cfg, header: slack(valid[3:], ts), want: ErrInvalidSignature},
		{name: "v1", cfg: cfg, header: slack("v1="+valid[3:], ts), want: ErrInvalidSignature},
		{name: "not hex", cfg: cfg, header: slack("v0="+strings.Repeat("x", 64), ts), want: ErrInvalidSignature},
	})
}

func TestVerifyStandard(t *testing.T) {
	// The example of the Standard Webhooks specification.
	const (
		secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		old    = "whsec_c2VjcmV0LW9mLWEtcm90YXRlZC1lbmRwb2ludA=="
		id     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		ts     = 1614265330
		body   = `{"test": 2432232314}`
		sig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	if got := signStandard(secret, id, ts, body); got != sig {
		t.Fatalf("test signer: got %s, want %s", got, sig)
	}
	now := time.Unix(ts, 0)
	cfg := Verify{Scheme: "standard", Secret: secret}
	rotating := Verify{Scheme: "standard", Secret: secret, OldSecrets: []string{old}}
	std := func(id string, ts int64, sig string) http.Header {
		return verifyTestHeader("webhook-id", id, "webhook-timestamp", fmt.Sprint(ts), "webhook-signature", sig)
	}
	other := signStandard(old, id, ts, body)
	runVerifyCases(t, []verifyCase{
		{name: "spec example", cfg: cfg, body: body, now: now, header: std(id, ts, sig)},
		{name: "several signatures", cfg: cfg, body: body, now: now, header: std(id, ts, other+" "+sig)},
		{name: "old secret during rotation", cfg: rotating, body: body, now: now, header: std(id, ts, other)},
		{name: "wrong secret", cfg: cfg, body: body, now: now, header: std(id, ts, other), want: ErrInvalidSignature},
		{name: "tampered body", cfg: cfg, body: body + " ", now: now, header: std(id, ts, sig), want: ErrInvalidSignature},
		{name: "tampered id", cfg: cfg, body: body, now: now, header: std("msg_other", ts, sig), want: ErrInvalidSignature},
		{name: "stale", cfg: cfg, body: body, now: now.Add(6 * time.Minute), header: std(id, ts, sig), want: signature.ErrTimestamp},
		{name: "future", cfg: cfg, body: body, now: now.Add(-6 * time.Minute), header: std(id, ts, sig), want: signature.ErrTimestamp},
		{name: "missing id", cfg: cfg, body: body, now: now,
			header: verifyTestHeader("webhook-timestamp", fmt.Sprint(ts), "webhook-signature", sig), want: ErrInvalidSignature},
		{name: "missing timestamp", cfg: cfg, body: body, now: now,
			header: verifyTestHeader("webhook-id", id, "webhook-signature", sig), want: ErrInvalidSignature},
		{name: "missing signature", cfg: cfg, body: body, now: now,
			header: verifyTestHeader("webhook-id", id, "webhook-timestamp", fmt.Sprint(ts)), want: ErrInvalidSignature},
		{name: "malformed signature", cfg: cfg, body: body, now: now, header: std(id, ts, "v1="+sig[3:]), want: ErrInvalidSignature},
		{name: "malformed timestamp", cfg: cfg, body: body, now: now,
			header: verifyTestHeader("webhook-id", id, "webhook-timestamp", "2021-02-26T15:02:10Z", "webhook-signature", sig), want: signature.ErrTimestamp},
	})
}

func TestVerifyToken(t *testing.T) {
	const secret, old = "gitlab-token-0123456789-0123456789-0123456789", "gitlab-old"
	cfg := Verify{Scheme: "token", Header: "X-Gitlab-Token", Secret: secret}
	rotating := Verify{Scheme: "token", Header: "x-gitlab-token", Secret: secret, OldSecrets: []string{old}}
	gitlab := func(v string) http.Header { return verifyTestHeader("X-Gitlab-Token", v) }
	runVerifyCases(t, []verifyCase{
		{name: "valid", cfg: cfg, header: gitlab(secret)},
		{name: "old secret during rotation", cfg: rotating, header: gitlab(old)},
		{name: "current secret during rotation", cfg: rotating, header: gitlab(secret)},
		{name: "wrong", cfg: cfg, header: gitlab("gitlab-token-0123456789-0123456789-012345678X"), want: ErrInvalidSignature},
		{name: "other case", cfg: cfg, header: gitlab(strings.ToUpper(secret)), want: ErrInvalidSignature},
		{name: "prefix of the secret", cfg: cfg, header: gitlab(secret[:10]), want: ErrInvalidSignature},
		{name: "longer than the secret", cfg: cfg, header: gitlab(secret + "0"), want: ErrInvalidSignature},
		{name: "missing header", cfg: cfg, header: verifyTestHeader("X-Gitlab-Event", "Push Hook"), want: ErrInvalidSignature},
	})
}

func TestVerifyHMAC(t *testing.T) {
	const secret, old = "generic-secret", "generic-old"
	sha1Hex := Verify{Scheme: "hmac", Header: "X-Signature", Algorithm: "sha1", Secret: secret, OldSecrets: []string{old}}
	sha512B64 := Verify{Scheme: "hmac", Header: "X-Signature", Algorithm: "sha512", Encoding: "base64", Prefix: "sha512=", Secret: secret}
	defaults := Verify{Scheme: "hmac", Header: "X-Signature", Secret: secret}
	hdr := func(v string) http.Header { return verifyTestHeader("X-Signature", v) }
	validSHA1 := hex.EncodeToString(verifyTestMAC(sha1.New, secret, verifyTestBody))
	validSHA512 := "sha512=" + base64.StdEncoding.EncodeToString(verifyTestMAC(sha512.New, secret, verifyTestBody))
	validSHA256 := hex.EncodeToString(verifyTestMAC(sha256.New, secret, verifyTestBody))
	runVerifyCases(t, []verifyCase{
		{name: "sha1 hex", cfg: sha1Hex, header: hdr(validSHA1)},
		{name: "sha1 hex old secret", cfg: sha1Hex, header: hdr(hex.EncodeToString(verifyTestMAC(sha1.New, old, verifyTestBody)))},
		{name: "sha512 base64 prefix", cfg: sha512B64, header: hdr(validSHA512)},
		{name: "defaults sha256 hex", cfg: defaults, header: hdr(validSHA256)},
		{name: "sha1 wrong secret", cfg: sha1Hex, header: hdr(hex.EncodeToString(verifyTestMAC(sha1.New, "wrong", verifyTestBody))), want: ErrInvalidSignature},
		{name: "sha512 tampered body", cfg: sha512B64, body: "{}", header: hdr(validSHA512), want: ErrInvalidSignature},
		{name: "sha512 missing prefix", cfg: sha512B64, header: hdr(strings.TrimPrefix(validSHA512, "sha512=")), want: ErrInvalidSignature},
		{name: "sha256 signature for sha1", cfg: sha1Hex, header: hdr(validSHA256), want: ErrInvalidSignature},
		{name: "missing header", cfg: defaults, header: verifyTestHeader("X-Hub-Signature-256", "sha256="+validSHA256), want: ErrInvalidSignature},
		{name: "unexpected prefix", cfg: defaults, header: hdr("sha256=" + validSHA256), want: ErrInvalidSignature},
	})
}

func TestVerifyNone(t *testing.T) {
	runVerifyCases(t, []verifyCase{
		{name: "none", cfg: Verify{Scheme: "none"}, header: http.Header{}},
		{name: "empty scheme", cfg: Verify{}, header: verifyTestHeader("X-Hub-Signature-256", "sha256=00")},
	})
}

func TestVerifierHeaders(t *testing.T) {
	for _, tc := range []struct {
		cfg  Verify
		want []string
	}{
		{Verify{}, nil},
		{Verify{Scheme: "none"}, nil},
		{Verify{Scheme: "github", Secret: "s"}, []string{"X-Hub-Signature-256"}},
		{Verify{Scheme: "stripe", Secret: "s"}, []string{"Stripe-Signature"}},
		{Verify{Scheme: "shopify", Secret: "s"}, []string{"X-Shopify-Hmac-Sha256"}},
		{Verify{Scheme: "slack", Secret: "s"}, []string{"X-Slack-Signature", "X-Slack-Request-Timestamp"}},
		{Verify{Scheme: "standard", Secret: "whsec_c2VjcmV0"}, []string{"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"}},
		{Verify{Scheme: "hmac", Header: "x-my-SIGNATURE", Secret: "s"}, []string{"X-My-Signature"}},
		{Verify{Scheme: "token", Header: "X-Gitlab-Token", Secret: "s"}, nil}, // the token is the secret
	} {
		t.Run(tc.cfg.Scheme, func(t *testing.T) {
			if got := mustVerifier(t, tc.cfg).Headers(); !slices.Equal(got, tc.want) {
				t.Errorf("Headers: got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNewVerifierErrors(t *testing.T) {
	const secret = "s3cr3t-value"
	for _, tc := range []struct {
		name string
		cfg  Verify
		want string
	}{
		{"unknown scheme", Verify{Scheme: "md5hmac", Secret: secret},
			`verify.scheme: unknown scheme "md5hmac" (want one of github, stripe, shopify, slack, standard, token, hmac, none)`},
		{"no secret", Verify{Scheme: "github"}, "verify.secret: required by scheme github"},
		{"secret without scheme", Verify{Secret: secret}, "verify.secret: not used by scheme none (set verify.scheme)"},
		{"old secrets with none", Verify{Scheme: "none", OldSecrets: []string{secret}}, "verify.old_secrets: not used by scheme none (set verify.scheme)"},
		{"standard secret without prefix", Verify{Scheme: "standard", Secret: "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
			`verify.secret: signature: secret does not start with "whsec_"`},
		{"standard secret not base64", Verify{Scheme: "standard", Secret: "whsec_" + secret + "!"},
			"verify.secret: signature: secret is not whsec_ followed by standard base64"},
		{"standard old secret", Verify{Scheme: "standard", Secret: "whsec_c2VjcmV0", OldSecrets: []string{"whsec_c2VjcmV0", secret}},
			`verify.old_secrets[1]: signature: secret does not start with "whsec_"`},
		{"empty old secret", Verify{Scheme: "github", Secret: secret, OldSecrets: []string{""}}, "verify.old_secrets[0]: empty"},
		{"secret with newline", Verify{Scheme: "slack", Secret: secret + "\n"}, "verify.secret: has leading or trailing white space"},
		{"token without header", Verify{Scheme: "token", Secret: secret}, "verify.header: required by scheme token"},
		{"hmac without header", Verify{Scheme: "hmac", Secret: secret}, "verify.header: required by scheme hmac"},
		{"invalid header name", Verify{Scheme: "token", Header: "X Token:", Secret: secret}, `verify.header: "X Token:" is not a valid header name`},
		{"unknown algorithm", Verify{Scheme: "hmac", Header: "X-Sig", Algorithm: "md5", Secret: secret},
			`verify.algorithm: unknown algorithm "md5" (want sha256, sha1 or sha512)`},
		{"upper-case algorithm", Verify{Scheme: "hmac", Header: "X-Sig", Algorithm: "SHA256", Secret: secret},
			`verify.algorithm: unknown algorithm "SHA256" (want sha256, sha1 or sha512)`},
		{"unknown encoding", Verify{Scheme: "hmac", Header: "X-Sig", Encoding: "base32", Secret: secret},
			`verify.encoding: unknown encoding "base32" (want hex or base64)`},
		{"header for github", Verify{Scheme: "github", Header: "X-Hub-Signature", Secret: secret}, "verify.header: not used by scheme github"},
		{"algorithm for github", Verify{Scheme: "github", Algorithm: "sha1", Secret: secret}, "verify.algorithm: not used by scheme github"},
		{"encoding for shopify", Verify{Scheme: "shopify", Encoding: "hex", Secret: secret}, "verify.encoding: not used by scheme shopify"},
		{"prefix for token", Verify{Scheme: "token", Header: "X-T", Prefix: "Bearer ", Secret: secret}, "verify.prefix: not used by scheme token"},
		{"tolerance for github", Verify{Scheme: "github", Tolerance: time.Minute, Secret: secret}, "verify.tolerance: not used by scheme github"},
		{"negative tolerance", Verify{Scheme: "stripe", Tolerance: -time.Minute, Secret: secret}, "verify.tolerance: must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewVerifier(tc.cfg)
			if err == nil {
				t.Fatalf("NewVerifier: got %T and no error, want %q", v, tc.want)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("error: got %q, want %q", got, tc.want)
			}
			if got := strings.Contains(err.Error(), secret); got != false {
				t.Errorf("error %q contains the secret", err)
			}
		})
	}
}

// verifyTestScheme is a configuration with a signer of valid requests
// written from the provider's docs.
type verifyTestScheme struct {
	name string
	cfg  Verify
	sign func(body []byte, now time.Time) http.Header
}

// verifyTestSchemes returns one configuration of each scheme and of each hmac
// variant.
func verifyTestSchemes() []verifyTestScheme {
	const (
		secret    = "bench-and-fuzz-secret"
		stdSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	)
	return []verifyTestScheme{
		{"github", Verify{Scheme: "github", Secret: secret, OldSecrets: []string{"old"}},
			func(body []byte, _ time.Time) http.Header {
				return verifyTestHeader("X-Hub-Signature-256", signGitHub(secret, string(body)))
			}},
		{"stripe", Verify{Scheme: "stripe", Secret: secret},
			func(body []byte, now time.Time) http.Header {
				v := fmt.Sprintf("t=%d,v1=%s,v0=%s", now.Unix(), signStripe(secret, now.Unix(), string(body)), strings.Repeat("0", 64))
				return verifyTestHeader("Stripe-Signature", v)
			}},
		{"shopify", Verify{Scheme: "shopify", Secret: secret},
			func(body []byte, _ time.Time) http.Header {
				return verifyTestHeader("X-Shopify-Hmac-Sha256", signShopify(secret, string(body)))
			}},
		{"slack", Verify{Scheme: "slack", Secret: secret},
			func(body []byte, now time.Time) http.Header {
				return verifyTestHeader("X-Slack-Signature", signSlack(secret, now.Unix(), string(body)),
					"X-Slack-Request-Timestamp", fmt.Sprint(now.Unix()))
			}},
		{"standard", Verify{Scheme: "standard", Secret: stdSecret},
			func(body []byte, now time.Time) http.Header {
				return verifyTestHeader("Webhook-Id", "msg_1", "Webhook-Timestamp", fmt.Sprint(now.Unix()),
					"Webhook-Signature", signStandard(stdSecret, "msg_1", now.Unix(), string(body)))
			}},
		{"token", Verify{Scheme: "token", Header: "X-Gitlab-Token", Secret: secret},
			func([]byte, time.Time) http.Header { return verifyTestHeader("X-Gitlab-Token", secret) }},
		{"hmac", Verify{Scheme: "hmac", Header: "X-Signature", Algorithm: "sha512", Encoding: "base64", Prefix: "sha512=", Secret: secret},
			func(body []byte, _ time.Time) http.Header {
				return verifyTestHeader("X-Signature", "sha512="+base64.StdEncoding.EncodeToString(verifyTestMAC(sha512.New, secret, string(body))))
			}},
		{"hmac-sha1", Verify{Scheme: "hmac", Header: "X-Signature", Algorithm: "sha1", Secret: secret},
			func(body []byte, _ time.Time) http.Header {
				return verifyTestHeader("X-Signature", hex.EncodeToString(verifyTestMAC(sha1.New, secret, string(body))))
			}},
		{"none", Verify{Scheme: "none"},
			func([]byte, time.Time) http.Header { return http.Header{} }},
	}
}

// FuzzVerifiers checks that no scheme's Verify panics, whatever the request's
// header values and body; that every failure wraps ErrInvalidSignature and
// contains no secret; and that a request signed as the provider documents
// always verifies, whatever its body.
func FuzzVerifiers(f *testing.F) {
	schemes := verifyTestSchemes()
	verifiers := make([]Verifier, len(schemes))
	for i, s := range schemes {
		verifiers[i] = mustVerifier(f, s.cfg)
	}
	now := verifyTestNow
	for _, s := range schemes {
		body := []byte(verifyTestBody)
		h := s.sign(body, now)
		var sig, ts, id string
		for name, vals := range h {
			switch {
			case strings.Contains(name, "Timestamp"):
				ts = vals[0]
			case name == "Webhook-Id":
				id = vals[0]
			default:
				sig = vals[0]
			}
		}
		f.Add(sig, ts, id, body)
	}
	f.Add("t=,v1=,v1", "-1", "", []byte{})
	f.Add("sha256="+strings.Repeat("ÿ", 32), "99999999999999999999", "\x00", []byte("\xff"))
	f.Add("v1,==== v1,"+strings.Repeat("/", 44), "1700000000", "msg", []byte("x"))
	f.Fuzz(func(t *testing.T, sig, ts, id string, body []byte) {
		h := http.Header{}
		for _, name := range []string{"X-Hub-Signature-256", "Stripe-Signature", "X-Shopify-Hmac-Sha256",
			"X-Slack-Signature", "Webhook-Signature", "X-Gitlab-Token", "X-Signature"} {
			h[name] = []string{sig}
		}
		h["X-Slack-Request-Timestamp"] = []string{ts}
		h["Webhook-Timestamp"] = []string{ts}
		h["Webhook-Id"] = []string{id}
		for i, v := range verifiers {
			err := v.Verify(h, body, now)
			if err == nil {
				continue
			}
			if !errors.Is(err, ErrInvalidSignature) {
				t.Errorf("%s: error %v does not wrap ErrInvalidSignature", schemes[i].name, err)
			}
			if strings.Contains(err.Error(), schemes[i].cfg.Secret) {
				t.Errorf("%s: error %q contains the secret", schemes[i].name, err)
			}
		}
		for i, v := range verifiers {
			if err := v.Verify(schemes[i].sign(body, now), body, now); err != nil {
				t.Errorf("%s: signed request with body %q: %v", schemes[i].name, body, err)
			}
		}
	})
}

func BenchmarkVerify(b *testing.B) {
	body := []byte(strings.Repeat(`{"k":"0123456789abcdef0123456789"}`, 32))[:1024]
	now := verifyTestNow
	for _, s := range verifyTestSchemes() {
		v := mustVerifier(b, s.cfg)
		h := s.sign(body, now)
		if err := v.Verify(h, body, now); err != nil {
			b.Fatalf("%s: %v", s.name, err)
		}
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if err := v.Verify(h, body, now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
