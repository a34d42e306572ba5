package topics

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Embedded is the development broker: franz-go's kfake, a single-node
// Kafka-protocol broker in process, persisted under a directory. Other
// processes reach it over the Kafka protocol like any broker.
type Embedded struct {
	cluster  *kfake.Cluster
	addrFile string
}

// EmbeddedAddrFile is the file under dataDir where a running embedded
// broker writes the address it listens on, so that other processes on the
// same data directory find it wherever it listens.
func EmbeddedAddrFile(dataDir string) string { return filepath.Join(dataDir, "kafka.addr") }

// RunningEmbedded returns the address of the embedded broker running on
// dataDir, as it wrote it; ok is false when none is running (or one was
// killed before it could remove the file, in which case nothing answers
// at the address).
func RunningEmbedded(dataDir string) (addr string, ok bool) {
	b, err := os.ReadFile(EmbeddedAddrFile(dataDir))
	if err != nil {
		return "", false
	}
	addr = strings.TrimSpace(string(b))
	return addr, addr != ""
}

// StartEmbedded starts the embedded broker on addr, persisting its log
// under dataDir/kafka. Records survive a restart on the same directory.
// opts come last and win (the fault campaign's ListenFn advertises its
// fault proxy's address instead of addr).
func StartEmbedded(dataDir, addr string, log *slog.Logger, opts ...kfake.Opt) (*Embedded, error) {
	dir := filepath.Join(dataDir, "kafka")
	c, err := kfake.NewCluster(append([]kfake.Opt{
		kfake.NumBrokers(1),
		kfake.DataDir(dir),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, addr)
		}),
		kfake.WithLogger(kfakeLogger{log}),
	}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("embedded broker on %s (data %s): %w", addr, dir, err)
	}
	e := &Embedded{cluster: c, addrFile: EmbeddedAddrFile(dataDir)}
	if err := os.WriteFile(e.addrFile, []byte(e.Addr()+"\n"), 0o644); err != nil {
		c.Close()
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	return e, nil
}

// Addr is the address the broker listens on.
func (e *Embedded) Addr() string { return e.cluster.ListenAddrs()[0] }

// Close stops the broker, flushes its log to disk and removes its address
// file.
func (e *Embedded) Close() {
	_ = os.Remove(e.addrFile) // a file left behind names an address where nothing answers
	e.cluster.Close()
}

// Cluster exposes the broker for tests that inject faults.
func (e *Embedded) Cluster() *kfake.Cluster { return e.cluster }

type kfakeLogger struct{ log *slog.Logger }

func (l kfakeLogger) Logf(level kfake.LogLevel, msg string, args ...any) {
	var lvl slog.Level
	switch level {
	case kfake.LogLevelError:
		lvl = slog.LevelError
	case kfake.LogLevelWarn:
		lvl = slog.LevelWarn
	default:
		return // kfake's info logs every request
	}
	if l.log.Enabled(context.Background(), lvl) {
		l.log.Log(context.Background(), lvl, fmt.Sprintf(msg, args...))
	}
}
