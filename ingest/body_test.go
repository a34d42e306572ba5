package ingest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/labstack/echo/v5"
)

// TestAnnouncedLengthReservesNothing: a request announcing the body limit
// and sending 10 bytes allocates about what arrived, not the announcement:
// senders cannot reserve the receiver's memory with a Content-Length.
func TestAnnouncedLengthReservesNothing(t *testing.T) {
	const maxBody, requests = 1 << 20, 20
	h := &Handler{cfg: Config{MaxBody: maxBody}, bodies: bodyBudget{max: maxBody}}
	e := echo.New()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range requests {
		req := httptest.NewRequest(http.MethodPost, "/webhooks/open", strings.NewReader("0123456789"))
		req.ContentLength = maxBody
		if _, err := h.readBody(e.NewContext(req, httptest.NewRecorder())); err == nil || err == errOverloaded {
			t.Fatalf("a body shorter than announced: got %v, want it refused as short", err)
		}
	}
	runtime.ReadMemStats(&after)
	if perRequest := (after.TotalAlloc - before.TotalAlloc) / requests; perRequest > 64<<10 {
		t.Errorf("allocated %d bytes per request announcing %d and sending 10, want under 64 KiB", perRequest, maxBody)
	}
}

// TestReadBodyHoldsWhatItReserved: a body, announced or chunked, is read
// whole within the body limit into a buffer whose capacity is what it
// holds of the budget; a refused body holds nothing.
func TestReadBodyHoldsWhatItReserved(t *testing.T) {
	const maxBody = 200 << 10
	h := &Handler{cfg: Config{MaxBody: maxBody}, bodies: bodyBudget{max: 4 * maxBody}}
	e := echo.New()
	for _, size := range []int{0, 1, preallocatedBody, preallocatedBody + 1, 100 << 10, maxBody, maxBody + 1} {
		for _, chunked := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d bytes chunked %v", size, chunked), func(t *testing.T) {
				sent := strings.Repeat("x", size)
				req := httptest.NewRequest(http.MethodPost, "/webhooks/open", strings.NewReader(sent))
				if chunked {
					req.ContentLength = -1
				}
				body, err := h.readBody(e.NewContext(req, httptest.NewRecorder()))
				switch {
				case size == 0 && err != errEmptyBody, size > maxBody && err != errTooLarge:
					t.Errorf("got %v, want it refused", err)
				case size > 0 && size <= maxBody && (err != nil || string(body) != sent):
					t.Errorf("got %d bytes, %v, want the %d sent", len(body), err, size)
				}
				if held := h.bodies.held.Load(); held != int64(cap(body)) {
					t.Errorf("bytes held: got %d, want the buffer's capacity %d", held, cap(body))
				}
				h.bodies.release(int64(cap(body)))
			})
		}
	}
}
