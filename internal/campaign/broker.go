package main

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hookstream/hookstream/topics"
)

// broker is the Kafka the deployment runs on: kfake hosted in this
// process (stopped and restarted on its data directory), or an Apache
// Kafka cluster run by scripts/kafka-local.sh (one node killed with -9
// and started again).
type broker struct {
	kind   string // kfake or kafka3
	seeds  []string
	nodes  int
	script string
	log    *slog.Logger

	// kfake
	dir, addr string
	mu        sync.Mutex
	emb       *topics.Embedded
}

func startKfake(dir, addr string, log *slog.Logger) (*broker, error) {
	b := &broker{kind: "kfake", seeds: []string{addr}, nodes: 1, dir: dir, addr: addr, log: log}
	emb, err := topics.StartEmbedded(dir, addr, log)
	if err != nil {
		return nil, err
	}
	b.emb = emb
	return b, nil
}

// bounce takes node (1-based) down for down, then brings it back.
func (b *broker) bounce(ctx context.Context, node int, down time.Duration) error {
	switch b.kind {
	case "kfake":
		b.mu.Lock()
		b.emb.Close()
		b.emb = nil
		b.mu.Unlock()
		sleepCtx(ctx, down)
		var err error
		for range 50 { // the port can linger a moment after Close
			var emb *topics.Embedded
			if emb, err = topics.StartEmbedded(b.dir, b.addr, b.log); err == nil {
				b.mu.Lock()
				b.emb = emb
				b.mu.Unlock()
				return nil
			}
			sleepCtx(ctx, 200*time.Millisecond)
		}
		return fmt.Errorf("restart kfake: %w", err)
	default:
		if err := b.runScript(ctx, "stop-broker", strconv.Itoa(node)); err != nil {
			return err
		}
		sleepCtx(ctx, down)
		return b.runScript(ctx, "start-broker", strconv.Itoa(node))
	}
}

func (b *broker) runScript(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, b.script, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", b.script, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (b *broker) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.emb != nil {
		b.emb.Close()
		b.emb = nil
	}
}

// sleepCtx waits for d or until ctx ends. It is for spacing faults on the
// schedule, never for waiting on a condition.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
