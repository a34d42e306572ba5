// Package harness holds what hookstream's measuring commands (perfcompare,
// latency, fanoutbench) share to run hookstream as a user would and read
// what it costs: building the binary, starting and stopping its
// processes, free loopback addresses, and a process's CPU time, memory
// and sockets as Linux's /proc reports them.
package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/hookstream/hookstream/topics"
)

// The GitHub source the programs configure hookstream with: its webhooks
// are signed with Secret.
const (
	Source = "github"
	Secret = "s3cret"
)

// WriteSources writes dir/sources.yaml, which configures Source verified
// with Secret, and returns its path.
func WriteSources(dir string) (string, error) {
	path := filepath.Join(dir, "sources.yaml")
	yaml := fmt.Sprintf("sources:\n  %s:\n    verify: {scheme: github, secret: %s}\n", Source, Secret)
	return path, os.WriteFile(path, []byte(yaml), 0o600)
}

// Hookstream is the hookstream binary to run: bin when it is given,
// otherwise one built from ./cmd/hookstream into dir.
func Hookstream(ctx context.Context, dir, bin string) (string, error) {
	if bin != "" {
		return bin, nil
	}
	fmt.Fprintln(os.Stderr, "building hookstream")
	if _, err := Build(ctx, dir, "./cmd/hookstream"); err != nil {
		return "", err
	}
	return filepath.Join(dir, "hookstream"), nil
}

// Build builds the packages (as `go build` names them, from the
// repository root) into dir and returns dir.
func Build(ctx context.Context, dir string, packages ...string) (string, error) {
	args := append([]string{"build", "-o", dir + string(filepath.Separator)}, packages...)
	if out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build (run from the repository root): %w\n%s", err, out)
	}
	return dir, nil
}

// Environ is this process's environment without its HOOKSTREAM_ and
// OTEL_ variables, with set added: a hookstream process started with it
// reads only what the harness sets.
func Environ(set map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOOKSTREAM_") && !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return env
}

// Terminate interrupts cmd and waits for it to exit, killing it after 30s.
func Terminate(cmd *exec.Cmd) {
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // a server stopped by a signal exits as it may
		close(exited)
	}()
	_ = cmd.Process.Signal(os.Interrupt) // fails only when it exited already
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// WaitReady polls the admin listener's /readyz until it answers 200, for
// at most timeout.
func WaitReady(ctx context.Context, adminAddr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+adminAddr+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hookstream on %s was not ready within %v", adminAddr, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Median of xs (the mean of the middle two for an even count); 0 for
// none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Sorted(slices.Values(xs))
	if n := len(xs); n%2 == 0 {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	return xs[len(xs)/2]
}

// FreeAddr returns a loopback address nothing listens on.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// LoadAverage is /proc/loadavg, or what kept it from being read.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(string(b))
}

// CPUTime is the CPU time (user and system) process pid has used, read
// from /proc/<pid>/stat; 0 where it cannot be read.
func CPUTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: state is the 3rd field, utime the 14th, stime the 15th.
	_, rest, ok := strings.Cut(string(b), ") ")
	fields := strings.Fields(rest)
	if !ok || len(fields) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	const clockTicks = 100 // USER_HZ: 100 on every Linux hookstream runs on
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// Memory is a process's resident memory, now and at its peak.
type Memory struct {
	RSS  int64 `json:"rss_bytes"`  // VmRSS
	Peak int64 `json:"peak_bytes"` // VmHWM: the highest RSS since it started
}

// MemoryOf reads process pid's Memory from /proc/<pid>/status.
func MemoryOf(pid int) (Memory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, err
	}
	var m Memory
	for line := range strings.Lines(string(b)) {
		name, value, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("/proc/%d/status: %s: %w", pid, name, err)
		}
		if name == "VmRSS" {
			m.RSS = kb << 10
		} else {
			m.Peak = kb << 10
		}
	}
	if m.RSS == 0 {
		return Memory{}, fmt.Errorf("/proc/%d/status holds no VmRSS", pid)
	}
	return m, nil
}

// Sockets counts process pid's open TCP connections whose remote port is
// one of ports (a broker's, say), and all its open file descriptors.
func Sockets(pid int, ports ...int) (connected, fds int, err error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, err
	}
	inodes := make(map[string]bool)
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed since it was listed
		}
		if inode, ok := strings.CutPrefix(target, "socket:["); ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	wanted := make(map[int]bool, len(ports))
	for _, p := range ports {
		wanted[p] = true
	}
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return 0, 0, err
		}
		connected += countConnections(string(b), inodes, wanted)
	}
	return connected, len(entries), nil
}

// countConnections counts the established connections of a
// /proc/net/tcp table whose inode is one of inodes and whose remote port
// is one of ports.
func countConnections(table string, inodes map[string]bool, ports map[int]bool) int {
	const established = "01"
	n := 0
	for i, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		if i == 0 || len(f) < 10 || f[3] != established || !inodes[f[9]] {
			continue
		}
		_, port, ok := strings.Cut(f[2], ":")
		p, err := strconv.ParseInt(port, 16, 32)
		if ok && err == nil && ports[int(p)] {
			n++
		}
	}
	return n
}

// Offsets are the ingest topic's end offsets and the processor group's
// committed offsets on it, each summed over the partitions.
type Offsets struct{ End, Committed int64 }

// ReadOffsets reads the offsets of names' ingest topic and processor group.
func ReadOffsets(ctx context.Context, adm *kadm.Client, names topics.Names) (Offsets, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, string(names.Ingest))
	if err != nil {
		return Offsets{}, err
	}
	if err := ends.Error(); err != nil {
		return Offsets{}, err
	}
	committed, err := adm.FetchOffsets(ctx, string(names.ProcessorGroup()))
	if err != nil {
		return Offsets{}, err
	}
	if err := committed.Error(); err != nil {
		return Offsets{}, err
	}
	var o Offsets
	ends.Each(func(l kadm.ListedOffset) { o.End += l.Offset })
	committed.Each(func(r kadm.OffsetResponse) {
		if r.Topic == string(names.Ingest) && r.At > 0 {
			o.Committed += r.At
		}
	})
	return o, nil
}

// WaitDrained waits until the processor group has committed every record
// of the ingest topic, and returns the offsets then.
func WaitDrained(ctx context.Context, adm *kadm.Client, names topics.Names) (Offsets, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		o, err := ReadOffsets(ctx, adm, names)
		if err == nil && o.End > 0 && o.Committed == o.End {
			return o, nil
		}
		if time.Now().After(deadline) {
			return o, fmt.Errorf("the processor did not catch up with the ingest topic within 60s (offsets %+v, %v)", o, err)
		}
		select {
		case <-ctx.Done():
			return o, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
