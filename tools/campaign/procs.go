package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one hookstream process of the deployment under test. It keeps
// its name, data directory and addresses across restarts.
type proc struct {
	name, roles string
	env         []string
	adminAddr   string
	httpAddr    string
	logPath     string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	maxRSS int64 // bytes
	starts int
}

// start launches the process; its output is appended to its log file.
func (p *proc) start(bin string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.starts++
	fmt.Fprintf(f, "==== campaign: start #%d at %s\n", p.starts, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(bin, "run", "--roles", p.roles)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the status is read from ProcessState
		f.Close()
		close(exited)
	}()
	p.cmd, p.exited = cmd, exited
	return nil
}

func (p *proc) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.exited
}

func (p *proc) alive() bool {
	_, exited := p.current()
	if exited == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

func (p *proc) signal(sig syscall.Signal) error {
	cmd, _ := p.current()
	if cmd == nil || !p.alive() {
		return fmt.Errorf("%s is not running", p.name)
	}
	return cmd.Process.Signal(sig)
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() {
	cmd, exited := p.current()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies on SIGKILL too; this keeps it simple
	_ = cmd.Process.Kill()                  // fails only if it exited already
	<-exited
}

// stop sends SIGTERM and waits up to timeout; it reports whether the
// process exited in time (it is killed otherwise).
func (p *proc) stop(timeout time.Duration) (bool, error) {
	cmd, exited := p.current()
	if cmd == nil || !p.alive() {
		return true, nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			return true, fmt.Errorf("%s exited with %s after SIGTERM", p.name, cmd.ProcessState)
		}
		return true, nil
	case <-time.After(timeout):
		p.kill()
		return false, fmt.Errorf("%s still running %v after SIGTERM: killed", p.name, timeout)
	}
}

// waitReady polls /readyz until it answers 200.
func (p *proc) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	var last string
	for {
		if !p.alive() {
			return fmt.Errorf("%s exited while starting", p.name)
		}
		resp, err := client.Get("http://" + p.adminAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %s", p.name, timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// sampleRSS records the resident set size from /proc.
func (p *proc) sampleRSS() {
	cmd, _ := p.current()
	if cmd == nil || !p.alive() {
		return
	}
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "status"))
	if err != nil {
		return
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					p.mu.Lock()
					p.maxRSS = max(p.maxRSS, kb*1024)
					p.mu.Unlock()
				}
			}
		}
	}
}

func (p *proc) peakRSS() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.maxRSS
}

// freeAddr returns a loopback address nothing listens on, with a port
// below Linux's ephemeral range so outgoing connections cannot take it.
func freeAddr(taken map[string]bool) (string, error) {
	for range 1000 {
		addr := fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000))
		if taken[addr] {
			continue
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		ln.Close()
		taken[addr] = true
		return addr, nil
	}
	return "", errors.New("no free loopback port between 20000 and 32000")
}

// cli runs a hookstream command with the deployment's environment and
// returns its standard output.
func cli(ctx context.Context, bin string, env []string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("hookstream %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// baseEnviron is this process's environment without HOOKSTREAM_* variables.
func baseEnviron() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOOKSTREAM_") {
			out = append(out, kv)
		}
	}
	return out
}
