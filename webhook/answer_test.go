package webhook

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestClientReadsBoundedAnswers: a subscriber that answers without end,
// or with huge headers, cannot hold a delivery or a verification to the
// attempt's timeout nor make hookstream read more than the bounds: at most
// maxDrain bytes of a delivery's answer, maxHeaderBytes of its
// headers, verifyMaxAnswer of a verification's answer; an error quotes at
// most maxSnippet bytes of the body.
func TestClientReadsBoundedAnswers(t *testing.T) {
	endless := func(status int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			chunk := bytes.Repeat([]byte("x"), 4<<10)
			for {
				if _, err := w.Write(chunk); err != nil {
					return // the client closed the connection
				}
			}
		}
	}
	// Reading any of these answers whole would end in this timeout.
	c := newClientForTest(t, Config{AllowPrivate: true, Timeout: time.Minute})

	t.Run("endless 200", func(t *testing.T) {
		res := c.Deliver(t.Context(), clientTestDelivery(newClientTestServer(t, endless(http.StatusOK)).URL))
		if !res.OK() || res.Err != nil {
			t.Errorf("got status %d, err %v, want delivered (the answer read no further than %d bytes)", res.Status, res.Err, maxDrain)
		}
	})
	t.Run("endless 500", func(t *testing.T) {
		res := c.Deliver(t.Context(), clientTestDelivery(newClientTestServer(t, endless(http.StatusInternalServerError)).URL))
		want := `status 500 Internal Server Error: "` + strings.Repeat("x", maxSnippet) + `"`
		if res.Status != http.StatusInternalServerError || res.Err == nil || res.Err.Error() != want {
			t.Errorf("got status %d, err %v, want 500 with %q", res.Status, res.Err, want)
		}
	})
	t.Run("huge headers", func(t *testing.T) {
		srv := newClientTestServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Huge", strings.Repeat("x", 2*maxHeaderBytes))
			w.WriteHeader(http.StatusOK)
		})
		res := c.Deliver(t.Context(), clientTestDelivery(srv.URL))
		if res.OK() || res.Status != 0 || res.Err == nil || !strings.Contains(res.Err.Error(), "headers exceeded") {
			t.Errorf("got status %d, err %v, want a failed attempt: response headers exceeded", res.Status, res.Err)
		}
	})
	t.Run("endless verification answer", func(t *testing.T) {
		err := c.Verify(t.Context(), newClientTestServer(t, endless(http.StatusOK)).URL, [][]byte{[]byte("k")})
		if err == nil || !strings.Contains(err.Error(), "did not echo the challenge") {
			t.Errorf("got %v, want a refusal: did not echo the challenge (read no further than %d bytes)", err, verifyMaxAnswer)
		}
	})
}
