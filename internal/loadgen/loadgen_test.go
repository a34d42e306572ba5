package loadgen

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookstream/hookstream/signature"
)

// TestRunCountsAndSigns runs a short open-loop load against a receiver
// that checks GitHub signatures and answers 202, then 200 for an id it has
// seen; the report counts every request and the sink measures end to end.
func TestRunCountsAndSigns(t *testing.T) {
	sink := NewSink()
	var mu sync.Mutex
	seen := map[string]bool{}
	bad := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mac := hmac.New(sha256.New, []byte("s3cret"))
		mac.Write(body)
		id := r.Header.Get("X-Event-ID")
		mu.Lock()
		defer mu.Unlock()
		if r.Header.Get("X-Hub-Signature-256") != "sha256="+hex.EncodeToString(mac.Sum(nil)) || len(body) < 500 {
			bad++
		}
		status := http.StatusAccepted
		if seen[id] {
			status = http.StatusOK
		}
		seen[id] = true
		w.WriteHeader(status)
		// Deliver the event to the sink, as a dispatcher would.
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		req.Header.Set("webhook-id", "bench:"+id)
		sink.ServeHTTP(httptest.NewRecorder(), req)
	}))
	defer srv.Close()

	cfg := Config{URL: srv.URL, Source: "bench", Rate: 200, Concurrency: 8, Duration: 500 * time.Millisecond,
		BodySize: 512, Duplicates: 0.3, Scheme: "github", Secret: "s3cret"}
	report, err := Run(context.Background(), cfg, srv.Client(), sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	if report.Sent < 50 || report.Completed != report.Sent || report.Errors != 0 {
		t.Errorf("report: sent %d completed %d errors %d, want about 100 sent, all completed", report.Sent, report.Completed, report.Errors)
	}
	if got := report.Status["202"] + report.Status["200"]; got != report.Completed || report.Status["200"] == 0 {
		t.Errorf("status counts: got %v, want 202s and some 200s (duplicates) adding up to %d", report.Status, report.Completed)
	}
	if report.Latency.Count != report.Completed || report.Latency.Max < report.Latency.P50 {
		t.Errorf("latency: got %+v for %d requests", report.Latency, report.Completed)
	}
	if bad != 0 {
		t.Errorf("%d requests were not signed as GitHub signs", bad)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e2e := sink.Wait(ctx)
	if e2e.Count != int64(len(seen)) || sink.Missing() != 0 {
		t.Errorf("end to end: got %d events measured and %d missing, want the %d distinct ids sent and none missing", e2e.Count, sink.Missing(), len(seen))
	}
}

// TestBodySizesSpanTheRange: with MaxBodySize, body sizes are drawn between
// BodySize and MaxBodySize, small ones more often (log-uniform), each body
// still one JSON object.
func TestBodySizesSpanTheRange(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var v map[string]any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Errorf("body of %d bytes: %v", len(body), err)
		}
		mu.Lock()
		sizes = append(sizes, len(body))
		if len(sizes) == 2000 {
			cancel() // enough bodies: the run ends
		}
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	cfg := Config{URL: srv.URL, Source: "bench", Concurrency: 4, Duration: time.Hour, BodySize: 256, MaxBodySize: 60 << 10}
	if _, err := Run(ctx, cfg, srv.Client(), nil, nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var small, large int
	for _, n := range sizes {
		if n < cfg.BodySize || n > cfg.MaxBodySize {
			t.Fatalf("a body of %d bytes, want %d to %d", n, cfg.BodySize, cfg.MaxBodySize)
		}
		if n < 4<<10 {
			small++
		}
		if n > 30<<10 {
			large++
		}
	}
	// log-uniform over 256 B..60 KiB: half below 4 KiB, an eighth above 30 KiB.
	if small < len(sizes)*2/5 || large < len(sizes)/20 {
		t.Errorf("%d bodies: %d under 4 KiB and %d over 30 KiB, want about half and an eighth", len(sizes), small, large)
	}
}

func TestRunRefusesBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"concurrency", Config{Concurrency: 0}, "concurrency: 0 must be at least 1"},
		{"duplicates", Config{Concurrency: 1, Duplicates: 2}, "duplicates: 2 is not between 0 and 1"},
		{"body sizes", Config{Concurrency: 1, BodySize: 512, MaxBodySize: 256}, "max body size: 256 is below the body size 512"},
		{"scheme", Config{Concurrency: 1, Scheme: "md5"}, `scheme: "md5" is not none, github or standard`},
		{"secret", Config{Concurrency: 1, Scheme: "standard", Secret: "nope"}, "secret: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Run(context.Background(), tt.cfg, http.DefaultClient, nil, nil)
			if err == nil || len(err.Error()) < len(tt.want) || err.Error()[:len(tt.want)] != tt.want {
				t.Errorf("got %v, want an error starting %q", err, tt.want)
			}
		})
	}
}

// TestSinkCountsBatchedEvents: a signed batch counts each of its events;
// with keys, a delivery whose signature does not verify is refused with 401
// and counts nothing.
func TestSinkCountsBatchedEvents(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	sink := NewSink()
	sink.Keys = [][]byte{key}
	now := time.Now()
	for _, id := range []string{"bench:1", "bench:2", "bench:3"} {
		sink.sent(id, now)
	}
	deliver := func(id string, keys [][]byte, body string) int {
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		signature.SignRequest(req.Header, keys, id, time.Now(), []byte(body))
		rec := httptest.NewRecorder()
		sink.ServeHTTP(rec, req)
		return rec.Code
	}
	batch := `{"events":[{"id":"bench:1","type":"t"},{"id":"bench:2","type":"t"}]}`
	if code := deliver("batch_x", [][]byte{[]byte("another key, not the sink's one!")}, batch); code != http.StatusUnauthorized {
		t.Errorf("wrongly signed batch: got %d, want 401", code)
	}
	if sink.Missing() != 3 {
		t.Errorf("after a refused batch: %d missing, want 3", sink.Missing())
	}
	if code := deliver("batch_x", [][]byte{key}, batch); code != http.StatusNoContent {
		t.Errorf("batch: got %d, want 204", code)
	}
	if code := deliver("bench:3", [][]byte{key}, `{"id":"bench:3","type":"t"}`); code != http.StatusNoContent {
		t.Errorf("single event: got %d, want 204", code)
	}
	if sink.Missing() != 0 || sink.delivered() != 3 {
		t.Errorf("got %d missing, %d delivered; want every event of the batch and the single one counted", sink.Missing(), sink.delivered())
	}
	// Another subscription's delivery of the same event counts among the
	// deliveries, not as a first delivery.
	if code := deliver("bench:3", [][]byte{key}, `{"id":"bench:3","type":"t"}`); code != http.StatusNoContent {
		t.Errorf("second delivery: got %d, want 204", code)
	}
	if sink.delivered() != 3 || sink.Deliveries() != 4 {
		t.Errorf("after a second delivery: %d first deliveries, %d deliveries; want 3 and 4", sink.delivered(), sink.Deliveries())
	}
}
