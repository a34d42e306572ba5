package main

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// TestNetworkCutsOneProcess: a connection through a front reaches the
// broker through its process's own proxy, so a toxic on that process's
// links cuts it alone; a connection of another process (this test's) goes
// on.
func TestNetworkCutsOneProcess(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	frontLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	frontAddr := frontLn.Addr().String()
	frontLn.Close()

	var mu sync.Mutex
	pids := map[int]string{}
	n, err := newNetwork([]string{frontAddr}, []string{echo.Addr().String()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer n.close()
	n.follow(func() map[int]string {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(pids)
	})
	if err := n.addProcess("child"); err != nil {
		t.Fatal(err)
	}

	// child runs a process that sends a line through the front and prints
	// what came back.
	_, port, _ := net.SplitHostPort(frontAddr)
	child := func() string {
		t.Helper()
		cmd := exec.Command("bash", "-c", fmt.Sprintf(`read -r go; exec 3<>/dev/tcp/127.0.0.1/%s; echo ping >&3; if read -r -t 5 line <&3; then echo "got $line"; else echo cut; fi`, port))
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		cmd.Stdout = &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		pids[cmd.Process.Pid] = "child" // before it connects: the front looks it up on accept
		mu.Unlock()
		fmt.Fprintln(in, "go")
		_ = cmd.Wait()
		mu.Lock()
		delete(pids, cmd.Process.Pid)
		mu.Unlock()
		return strings.TrimSpace(out.String())
	}
	ours := func() string {
		t.Helper()
		c, err := net.Dial("tcp", frontAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintln(c, "pong")
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return "cut"
		}
		return "got " + strings.TrimSpace(line)
	}

	if got := child(); got != "got ping" {
		t.Errorf("child through its proxy: got %q, want %q", got, "got ping")
	}
	remove, err := n.toxic(n.brokerLinks("child"), "cut", "reset_peer", map[string]any{"timeout": 0})
	if err != nil {
		t.Fatal(err)
	}
	if got := child(); got != "cut" {
		t.Errorf("child with its links reset: got %q, want %q", got, "cut")
	}
	if got := ours(); got != "got pong" {
		t.Errorf("another process while the child's links are reset: got %q, want %q", got, "got pong")
	}
	remove()
	if got := child(); got != "got ping" {
		t.Errorf("child once the toxic is removed: got %q, want %q", got, "got ping")
	}
}
