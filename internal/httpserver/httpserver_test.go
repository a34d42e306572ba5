package httpserver_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/hookstream/hookstream/internal/httpserver"
)

// serve serves h on a loopback listener with DropUnusedConns and returns
// the server and its address.
func serve(t *testing.T, h http.Handler) (*http.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &http.Server{Handler: h, ReadHeaderTimeout: time.Minute}
	httpserver.DropUnusedConns(s)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Close() })
	return s, ln.Addr().String()
}

// TestShutdownClosesUnusedConns: a connection that never sent a request
// (a browser's preconnect) does not hold a graceful shutdown, which
// net/http would otherwise wait 5 seconds for; the client sees it closed.
func TestShutdownClosesUnusedConns(t *testing.T) {
	s, addr := serve(t, http.NotFoundHandler())
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The server has the connection once a request on another one is
	// answered after it was accepted.
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with an unused connection open: %v; want it closed and the shutdown done within its grace", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read on the unused connection after shutdown: %d bytes, %v; want io.EOF", n, err)
	}
}

// TestShutdownWaitsForRequests: a request under way when the shutdown
// begins is answered in full before the shutdown returns.
func TestShutdownWaitsForRequests(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	s, addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(started)
		<-release
		_, _ = io.WriteString(w, "done")
	}))
	type answer struct {
		body string
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		answered <- answer{string(b), err}
	}()
	<-started
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	select {
	case err := <-shut:
		t.Fatalf("shutdown returned (%v) while a request was under way", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if a := <-answered; a.err != nil || a.body != "done" {
		t.Errorf("the request under way at shutdown: %q, %v; want \"done\"", a.body, a.err)
	}
	if err := <-shut; err != nil {
		t.Errorf("shutdown: %v", err)
	}
}
