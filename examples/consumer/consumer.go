package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"
)

// defaultForgetAfter outlives the events topic's default retention (7
// days) by a day: a record that can still be read again is remembered.
const defaultForgetAfter = 8 * 24 * time.Hour

type config struct {
	brokers  []string
	topic    string
	group    string
	storeDir string
	// sources, if any, are the only sources handled.
	sources     []string
	forgetAfter time.Duration
}

// envelope holds the fields of hookstream's envelope (schemas/envelope.json)
// this consumer reads; readers ignore fields they do not know.
type envelope struct {
	SchemaVersion string          `json:"schema_version"`
	ID            string          `json:"id"`
	Source        string          `json:"source"`
	EventID       string          `json:"event_id"`
	Type          string          `json:"type"`
	ReceivedAt    time.Time       `json:"received_at"`
	Replay        int             `json:"replay"`
	RedrivenFrom  string          `json:"redriven_from"`
	Data          json.RawMessage `json:"data"`
	DataBase64    []byte          `json:"data_base64"`
}

// schemaMajor is the major version of the envelope schema this consumer
// reads: minor versions only add fields.
const schemaMajor = "1"

// handler does a service's work with one event; see handle.
type handler func(b *pebble.Batch, e *envelope) error

// run consumes until ctx ends, then returns nil; or returns the error that
// stopped it, with nothing committed that was not handled.
func run(ctx context.Context, cfg config, h handler, log *slog.Logger) error {
	db, err := pebble.Open(cfg.storeDir, &pebble.Options{})
	if err != nil {
		return fmt.Errorf("open store %s: %w", cfg.storeDir, err)
	}
	defer db.Close()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(cfg.brokers...),
		kgo.ConsumerGroup(cfg.group),
		kgo.ConsumeTopics(cfg.topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		// No rebalance between a poll and the commit of what it returned:
		// a partition is never handed over with handled, uncommitted events.
		kgo.BlockRebalanceOnPoll(),
	)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close() // leaves the group: its partitions move at once
	// A poll blocks rebalances until AllowRebalance, the last poll too.
	defer cl.AllowRebalance()
	log.Info("consuming", "topic", cfg.topic, "group", cfg.group)
	nextForget := time.Time{}
	for {
		if now := time.Now(); now.After(nextForget) {
			if err := forget(db, now.Add(-cfg.forgetAfter)); err != nil {
				return err
			}
			nextForget = now.Add(time.Hour)
		}
		fs := cl.PollRecords(ctx, 1000)
		if ctx.Err() != nil {
			return nil // anything polled before was handled and committed
		}
		if fs.IsClientClosed() {
			return errors.New("kafka client closed")
		}
		// The client retries what can be retried on its own; the rest
		// (lost data, authorization) is for an operator to see.
		fs.EachError(func(topic string, p int32, err error) {
			log.Error("fetch", "topic", topic, "partition", p, "err", err)
		})
		if err := handleAll(db, cfg, h, fs.Records(), log); err != nil {
			return err
		}
		// The commit must not be cut short by a signal that came while
		// handling: the events are handled, their offsets must follow.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err := cl.CommitUncommittedOffsets(cctx)
		cancel()
		if err != nil {
			// The events are in the store: read again, they are skipped.
			return fmt.Errorf("commit offsets: %w", err)
		}
		cl.AllowRebalance()
	}
}

// handleAll hands each new event of recs to h and records its id, all in
// one batch that is synced before it returns.
func handleAll(db *pebble.DB, cfg config, h handler, recs []*kgo.Record, log *slog.Logger) error {
	if len(recs) == 0 {
		return nil
	}
	b := db.NewIndexedBatch() // reads see its own writes: a replay in the same poll is skipped too
	defer b.Close()
	now := time.Now()
	for _, r := range recs {
		if len(cfg.sources) > 0 && !slices.Contains(cfg.sources, header(r, "hs-source")) {
			continue
		}
		var e envelope
		if err := json.Unmarshal(r.Value, &e); err != nil || e.ID == "" {
			return fmt.Errorf("%s/%d offset %d: not an envelope (%v); stopped without committing it", r.Topic, r.Partition, r.Offset, err)
		}
		if major, _, _ := strings.Cut(e.SchemaVersion, "."); major != schemaMajor {
			return fmt.Errorf("%s/%d offset %d: envelope schema version %q; this consumer reads %s.x; stopped without committing it",
				r.Topic, r.Partition, r.Offset, e.SchemaVersion, schemaMajor)
		}
		seen, err := handled(b, e.ID)
		if err != nil {
			return err
		}
		if seen {
			log.Debug("already handled", "event_id", e.ID, "replay", e.Replay, "partition", r.Partition, "offset", r.Offset)
			continue
		}
		if err := h(b, &e); err != nil {
			return fmt.Errorf("handle %s (%s/%d offset %d): %w", e.ID, r.Topic, r.Partition, r.Offset, err)
		}
		if err := remember(b, e.ID, now); err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	return nil
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// The store holds, per handled id, "id/<id>" with the time it was handled,
// and "at/<time><id>" to forget ids in time order.
const (
	prefixID = "id/"
	prefixAt = "at/"
)

func idKey(id string) []byte { return []byte(prefixID + id) }

func atKey(at time.Time, id string) []byte {
	k := binary.BigEndian.AppendUint64([]byte(prefixAt), uint64(at.UnixNano()))
	return append(k, id...)
}

func handled(b *pebble.Batch, id string) (bool, error) {
	_, closer, err := b.Get(idKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: get %s: %w", id, err)
	}
	return true, closer.Close()
}

func remember(b *pebble.Batch, id string, at time.Time) error {
	v := binary.BigEndian.AppendUint64(nil, uint64(at.UnixNano()))
	if err := b.Set(idKey(id), v, nil); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if err := b.Set(atKey(at, id), nil, nil); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// forget deletes the ids handled before cutoff.
func forget(db *pebble.DB, cutoff time.Time) error {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte(prefixAt), UpperBound: atKey(cutoff, "")})
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	b := db.NewBatch()
	defer b.Close()
	for it.First(); it.Valid(); it.Next() {
		id := string(it.Key()[len(prefixAt)+8:])
		if err := errors.Join(b.Delete(idKey(id), nil), b.Delete(it.Key(), nil)); err != nil {
			it.Close()
			return fmt.Errorf("store: %w", err)
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store: forget ids handled before %s: %w", cutoff.Format(time.RFC3339), err)
	}
	return nil
}
