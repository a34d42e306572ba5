package webhook

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hookstream/hookstream/signature"
	"github.com/hookstream/hookstream/subscriptions"
)

// VerificationType is the type of a verification request's body.
const VerificationType = "hookstream.verification"

// VerificationRequest is the body of the request that proves a subscriber
// URL is wanted before a subscription is created: the endpoint answers 2xx
// echoing Challenge, as the body itself or as {"challenge": "..."}.
type VerificationRequest struct {
	Type      string `json:"type"`
	Challenge string `json:"challenge"`
}

// verifyMaxAnswer bounds the part of a verification answer that is read.
const verifyMaxAnswer = 4 << 10

// Verify sends a verification request to rawURL, signed with keys like a
// delivery (webhook-id "verify_<challenge>"), and returns nil only when the
// endpoint answers 2xx echoing its random challenge.
func (c *Client) Verify(parent context.Context, rawURL string, keys [][]byte) error {
	var b [18]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on Linux
	challenge := base64.RawURLEncoding.EncodeToString(b[:])
	body, err := json.Marshal(VerificationRequest{Type: VerificationType, Challenge: challenge})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(parent, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) { // do not repeat the URL, which may hold secrets
			err = ue.Err
		}
		return fmt.Errorf("url: %w", err)
	}
	target := redactURL(req.URL)
	if err := subscriptions.CheckTarget(req.URL, c.requireHTTPS); err != nil {
		return err
	}
	if len(keys) == 0 {
		return fmt.Errorf("verify %s: no signing key", target)
	}
	req.Header = http.Header{"Content-Type": {"application/json"}}
	signature.SignRequest(req.Header, keys, "verify_"+challenge, time.Now(), body)
	if c.userAgent != "" {
		req.Header["User-Agent"] = []string{c.userAgent}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("verify %s: %w", target, describeTransportError(parent, ctx, c.timeout, target, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return &RefusedError{Target: target, Status: resp.StatusCode}
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, verifyMaxAnswer))
	if err != nil {
		return fmt.Errorf("verify %s: reading the answer: %w", target, err)
	}
	if !echoes(answer, challenge) {
		return fmt.Errorf("verify %s: answered %s but did not echo the challenge (answer with it as the body or as {\"challenge\": \"...\"})", target, statusText(resp.StatusCode))
	}
	return nil
}

// echoes reports whether answer is challenge, or a JSON object whose
// "challenge" is.
func echoes(answer []byte, challenge string) bool {
	var obj struct {
		Challenge string `json:"challenge"`
	}
	got := strings.TrimSpace(string(answer))
	if json.Unmarshal(answer, &obj) == nil && obj.Challenge != "" {
		got = obj.Challenge
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(challenge)) == 1
}

// RefusedError is Verify's error for an endpoint that answered its
// challenge with a status other than 2xx.
type RefusedError struct {
	Target string
	Status int
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("verify %s: answered %s, want 2xx echoing the challenge", e.Target, statusText(e.Status))
}
