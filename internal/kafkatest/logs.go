package kafkatest

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
)

// Logs keeps the lines a logger wrote, each decoded from JSON.
type Logs struct {
	mu    sync.Mutex
	lines []map[string]any
}

// CaptureLogs returns a logger that writes to the test log as Logger does
// and keeps every line at info level and above in logs.
func CaptureLogs(t testing.TB) (*slog.Logger, *Logs) {
	logs := &Logs{}
	keep := slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})
	return slog.New(both{keep, Logger(t).Handler()}), logs
}

// Write takes one line of the JSON handler.
func (l *Logs) Write(p []byte) (int, error) {
	var line map[string]any
	if err := json.Unmarshal(p, &line); err != nil {
		return 0, err
	}
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	return len(p), nil
}

// Lines returns the lines kept so far whose message is msg.
func (l *Logs) Lines(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range l.lines {
		if line[slog.MessageKey] == msg {
			out = append(out, line)
		}
	}
	return out
}

// both is a handler writing to two.
type both [2]slog.Handler

func (b both) Enabled(ctx context.Context, level slog.Level) bool {
	return b[0].Enabled(ctx, level) || b[1].Enabled(ctx, level)
}

func (b both) Handle(ctx context.Context, r slog.Record) error {
	for _, h := range b {
		if h.Enabled(ctx, r.Level) {
			if err := h.Handle(ctx, r.Clone()); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b both) WithAttrs(attrs []slog.Attr) slog.Handler {
	return both{b[0].WithAttrs(attrs), b[1].WithAttrs(attrs)}
}

func (b both) WithGroup(name string) slog.Handler {
	return both{b[0].WithGroup(name), b[1].WithGroup(name)}
}
