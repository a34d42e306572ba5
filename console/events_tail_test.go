package console_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookstream/hookstream/internal/kafkatest"
)

// tailStream is a live tail b opened: its lines, and close, which ends it
// as a browser going away does.
type tailStream struct {
	lines *bufio.Scanner
	close context.CancelFunc
}

// openTail opens the live tail at path as b, sending header (the jar's
// cookies too), and returns the status; a stream served (200) is checked
// to be server-sent events starting with "event: ready", and stays open,
// holding its place, until closed or the test ends.
func (b *browser) openTail(path string, header http.Header) (*tailStream, int) {
	b.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.h.srv.URL+path, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := b.http.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		return nil, resp.StatusCode
	}
	b.t.Cleanup(func() { cancel(); resp.Body.Close() })
	s := &tailStream{lines: bufio.NewScanner(resp.Body), close: cancel}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		b.t.Fatalf("stream: Content-Type %q, want text/event-stream", ct)
	}
	if !s.lines.Scan() || s.lines.Text() != "event: ready" {
		b.t.Fatalf("stream: first line %q, want event: ready", s.lines.Text())
	}
	return s, resp.StatusCode
}

// TestTailStreamsAreBounded: a live tail streams the events committed
// after it is ready, as server-sent events; an instance serves at most 8
// at once (503 beyond, with Retry-After); one whose browser goes is closed,
// freeing its place.
func TestTailStreamsAreBounded(t *testing.T) {
	h := serve(t, options{token: token})
	b := h.browser(t)
	b.signIn()
	open := func() (*tailStream, int) {
		t.Helper()
		return b.openTail("/ui/events/tail/stream?source=shop", nil)
	}
	var streams []*tailStream
	for range 8 {
		s, status := open()
		if s == nil {
			t.Fatalf("stream %d: got %d, want 200", len(streams)+1, status)
		}
		streams = append(streams, s)
	}
	if _, status := open(); status != http.StatusServiceUnavailable {
		t.Errorf("a 9th stream: got %d, want 503", status)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := h.env.Client(t)
	for _, source := range []string{"github", "shop"} {
		rec := kafkatest.IngestRecord(h.env.Names, source, "tail-1", `{"n":1}`)
		rec.Topic = string(h.env.Names.Events)
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for event := ""; len(got) == 0 && streams[0].lines.Scan(); {
		line := streams[0].lines.Text()
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			event = name
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok && event == "event" {
			got = append(got, data)
		}
	}
	if len(got) != 1 || !strings.Contains(got[0], `"key":"shop:tail-1"`) || !strings.Contains(got[0], `"url":"/ui/events/shop:tail-1"`) {
		t.Errorf("the stream of source shop: got %q, want shop:tail-1 only", got)
	}

	streams[0].close() // the browser goes
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		s, status := open()
		if s == nil {
			return fmt.Errorf("a stream after one closed: got %d, want 200", status)
		}
		return nil
	})
}
