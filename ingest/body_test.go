package ingest

import (
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
	h := &Handler{cfg: Config{MaxBody: maxBody}}
	e := echo.New()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range requests {
		req := httptest.NewRequest(http.MethodPost, "/webhooks/open", strings.NewReader("0123456789"))
		req.ContentLength = maxBody
		if _, err := h.readBody(e.NewContext(req, httptest.NewRecorder())); err == nil {
			t.Fatal("a body shorter than announced: read without error")
		}
	}
	runtime.ReadMemStats(&after)
	if perRequest := (after.TotalAlloc - before.TotalAlloc) / requests; perRequest > 64<<10 {
		t.Errorf("allocated %d bytes per request announcing %d and sending 10, want under 64 KiB", perRequest, maxBody)
	}
}
