// Command consumer is the reference consumer of hookstream's events topic,
// <prefix>.events: what a downstream team's service needs to read it
// correctly, and no more. Copy it and replace handle.
//
// It reads with isolation level read_committed (the processor writes in
// transactions: a read_uncommitted reader would see records of aborted
// transactions), in a consumer group (scale it up to the topic's partition
// count, HOOKSTREAM_PARTITIONS; a new group starts at the oldest retained
// event), and commits offsets only after the events it polled are handled. Each event is handled once per envelope id:
// replays (envelope "replay", header hs-replay) and a group reset that
// reads records again are skipped by a small Pebble store of handled ids,
// written in one synced batch with whatever handle puts in it, before the
// offsets are committed. A crash between the two re-reads events the store
// already holds, and skips them. SIGINT or SIGTERM stop it cleanly: the
// events polled are handled and committed, then it leaves the group.
//
// EXAMPLES
//
//	go run ./examples/consumer --brokers 127.0.0.1:9092 --group billing-sync
//	go run ./examples/consumer --brokers kafka-1:9092 --topic hookstream.events --group billing-sync --source stripe --store ./consumer-state
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

func main() {
	var cfg config
	var brokers, sources string
	flag.StringVar(&brokers, "brokers", "127.0.0.1:9092", "Kafka seed brokers, comma separated")
	flag.StringVar(&cfg.topic, "topic", "hookstream.events", "the events topic, <prefix>.events")
	flag.StringVar(&cfg.group, "group", "", "this service's consumer group (required)")
	flag.StringVar(&cfg.storeDir, "store", "./consumer-state", "directory of the store of handled event ids")
	flag.StringVar(&sources, "source", "", "handle only these sources, comma separated (read from the hs-source header, without decoding)")
	flag.DurationVar(&cfg.forgetAfter, "forget-after", defaultForgetAfter, "how long a handled id is remembered; longer than the topic's retention")
	flag.Parse()
	cfg.brokers = strings.Split(brokers, ",")
	if sources != "" {
		cfg.sources = strings.Split(sources, ",")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if cfg.group == "" {
		fmt.Fprintln(os.Stderr, "consumer: --group is required: name the consumer group of your service")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, handle, log); err != nil {
		log.Error("consumer stopped", "err", err)
		os.Exit(1)
	}
}

// handle is where a service does its work with one event, once per id. What
// it writes to b commits atomically with the record that the event was
// handled, so an effect kept in the store happens exactly once. An effect
// elsewhere (a database, an API call, stdout here) can happen again if the
// process dies after it and before the batch commits: make it idempotent,
// keyed by e.ID (an idempotency key, an upsert, a unique constraint).
func handle(b *pebble.Batch, e *envelope) error {
	mark := ""
	switch {
	case e.Replay > 0:
		mark = fmt.Sprintf(" (replay %d)", e.Replay)
	case e.RedrivenFrom != "":
		mark = " (redriven from " + e.RedrivenFrom + ")"
	}
	fmt.Printf("%s %s type=%s received_at=%s%s\n", time.Now().UTC().Format(time.RFC3339), e.ID, e.Type, e.ReceivedAt.Format(time.RFC3339Nano), mark)
	return nil
}
