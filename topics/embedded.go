package topics

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Embedded is the development broker: franz-go's kfake, a single-node
// Kafka-protocol broker in process, persisted under a directory. Other
// processes reach it over the Kafka protocol like any broker.
type Embedded struct {
	cluster *kfake.Cluster
}

// StartEmbedded starts the embedded broker on addr, persisting its log
// under dataDir/kafka. Records survive a restart on the same directory.
func StartEmbedded(dataDir, addr string, log *slog.Logger) (*Embedded, error) {
	dir := filepath.Join(dataDir, "kafka")
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.DataDir(dir),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, addr)
		}),
		kfake.WithLogger(kfakeLogger{log}),
	)
	if err != nil {
		return nil, fmt.Errorf("embedded broker on %s (data %s): %w", addr, dir, err)
	}
	return &Embedded{cluster: c}, nil
}

// Addr is the address the broker listens on.
func (e *Embedded) Addr() string { return e.cluster.ListenAddrs()[0] }

// Close stops the broker and flushes its log to disk.
func (e *Embedded) Close() { e.cluster.Close() }

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
