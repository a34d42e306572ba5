package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

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
	advertise string // the address kfake advertises, when not addr
	mu        sync.Mutex
	emb       *topics.Embedded
}

// startKfake starts kfake on addr, advertising advertise ("": addr).
func startKfake(dir, addr, advertise string, log *slog.Logger) (*broker, error) {
	b := &broker{kind: "kfake", seeds: []string{addr}, nodes: 1, dir: dir, addr: addr, advertise: advertise, log: log}
	if advertise != "" {
		b.seeds = []string{advertise}
	}
	emb, err := b.startEmbedded()
	if err != nil {
		return nil, err
	}
	b.emb = emb
	return b, nil
}

func (b *broker) startEmbedded() (*topics.Embedded, error) {
	if b.advertise == "" {
		return topics.StartEmbedded(b.dir, b.addr, b.log)
	}
	adv, err := net.ResolveTCPAddr("tcp", b.advertise)
	if err != nil {
		return nil, err
	}
	return topics.StartEmbedded(b.dir, b.addr, b.log, kfake.ListenFn(func(network, _ string) (net.Listener, error) {
		ln, err := net.Listen(network, b.addr)
		if err != nil {
			return nil, err
		}
		return advertising{ln, adv}, nil
	}))
}

// advertising is a listener that reports another address: the one kfake
// then advertises to its clients.
type advertising struct {
	net.Listener
	addr net.Addr
}

func (a advertising) Addr() net.Addr { return a.addr }

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
			if emb, err = b.startEmbedded(); err == nil {
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
