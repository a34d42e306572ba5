package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Ceiling is the bare exactly-once pipeline's latency on the same
// cluster, measured in the same round: what any exactly-once webhook
// pipeline on these brokers pays before doing any work of its own.
//
// A producer writes each event, acks=all, to an input topic at the
// rate; a read-process-write loop (kgo's GroupTransactSession, the
// processor's own transaction shape and client settings: read_committed,
// one transaction per polled batch, linger until the flush, 20 ms
// metadata age) copies it to an output topic and commits its offsets in
// the same transaction; a read_committed consumer of the output sees it.
// Ack is the producer's; end to end is from the send to the consumer
// seeing the event. hookstream adds to it the receiver, the dedup state,
// the envelope, the dispatcher and the subscriber's POST.
type Ceiling struct {
	Ack      Stage `json:"ack"`
	EndToEnd Stage `json:"end_to_end"`
	Events   int64 `json:"events"`
}

// partitions of the ceiling's topics, as of hookstream's by default.
const partitions = 12

// ceiling measures the bare pipeline at rate for d after warmUp, on
// topics of its own under prefix (deleted with the others).
func ceiling(ctx context.Context, brokers []string, prefix string, rate float64, warmUp, d time.Duration) (Ceiling, error) {
	in, out, group := prefix+"-ceiling-in", prefix+"-ceiling-out", prefix+"-ceiling"
	admCl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return Ceiling{}, err
	}
	defer admCl.Close()
	// Topics as hookstream creates its own: 12 partitions, three replicas
	// (fewer brokers: one each), min.insync.replicas one less.
	adm := kadm.NewClient(admCl)
	meta, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return Ceiling{}, err
	}
	rf := min(3, len(meta.Brokers))
	minISR := strconv.Itoa(max(1, rf-1))
	created, err := adm.CreateTopics(ctx, partitions, int16(rf), map[string]*string{"min.insync.replicas": &minISR}, in, out)
	if err == nil {
		err = created.Error()
	}
	if err != nil {
		return Ceiling{}, err
	}
	copier, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(in),
		kgo.TransactionalID(group),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(250*time.Millisecond),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.ProducerLinger(100*time.Millisecond),
		kgo.MetadataMinAge(20*time.Millisecond),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	if err != nil {
		return Ceiling{}, err
	}
	defer copier.Close()
	reader, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(out),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		return Ceiling{}, err
	}
	defer reader.Close()
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		return Ceiling{}, err
	}
	defer producer.Close()

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() { defer wg.Done(); errs <- copyLoop(runCtx, copier, out) }()
	seen := hdrhistogram.New(1, 60_000_000, 3) // microseconds
	var from time.Time                         // sends from then on are measured
	var mu sync.Mutex
	go func() {
		defer wg.Done()
		for runCtx.Err() == nil {
			fetches := reader.PollFetches(runCtx)
			now := time.Now()
			mu.Lock()
			fetches.EachRecord(func(r *kgo.Record) {
				if sent := sentAt(r.Value); !from.IsZero() && !sent.Before(from) {
					_ = seen.RecordValue(max(1, now.Sub(sent).Microseconds()))
				}
			})
			mu.Unlock()
		}
		errs <- nil
	}()

	acks := hdrhistogram.New(1, 60_000_000, 3)
	var sent, all int64
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	start := time.Now()
	measured := start.Add(warmUp)
	end := measured.Add(d)
	var pending sync.WaitGroup
	for now := range tick.C {
		if now.After(end) || ctx.Err() != nil {
			break
		}
		if from.IsZero() && now.After(measured) {
			mu.Lock()
			from = now
			mu.Unlock()
		}
		value := make([]byte, 1024)
		binary.BigEndian.PutUint64(value, uint64(now.UnixNano()))
		counted := now.After(measured)
		if counted {
			sent++
		}
		all++
		pending.Add(1)
		producer.Produce(ctx, &kgo.Record{Topic: in, Partition: int32(all % partitions), Value: value}, func(_ *kgo.Record, err error) {
			defer pending.Done()
			if err == nil && counted {
				mu.Lock()
				_ = acks.RecordValue(max(1, time.Since(now).Microseconds()))
				mu.Unlock()
			}
		})
	}
	pending.Wait()
	// Wait for the last events to be seen, a bounded while.
	for wait := time.Now().Add(30 * time.Second); time.Now().Before(wait); {
		mu.Lock()
		n := seen.TotalCount()
		mu.Unlock()
		if n >= sent {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return Ceiling{}, err
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if seen.TotalCount() < sent {
		return Ceiling{}, fmt.Errorf("the bare pipeline delivered %d of %d events within 30s of the load's end", seen.TotalCount(), sent)
	}
	return Ceiling{
		Ack:      Stage{Name: "ceiling ack", P50: us(acks.ValueAtQuantile(50)), P99: us(acks.ValueAtQuantile(99))},
		EndToEnd: Stage{Name: "ceiling end to end", P50: us(seen.ValueAtQuantile(50)), P99: us(seen.ValueAtQuantile(99))},
		Events:   sent,
	}, nil
}

// copyLoop copies each polled batch of the input to the same partition
// of out in one transaction with the batch's offsets, as the processor
// does, until ctx ends.
func copyLoop(ctx context.Context, s *kgo.GroupTransactSession, out string) error {
	for ctx.Err() == nil {
		fetches := s.PollFetches(ctx)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			return nil
		}
		if err := fetches.Err(); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("ceiling: fetch: %w", err)
		}
		if fetches.NumRecords() == 0 {
			continue
		}
		if err := s.Begin(); err != nil {
			return fmt.Errorf("ceiling: begin: %w", err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			s.Produce(ctx, &kgo.Record{Topic: out, Partition: r.Partition, Value: r.Value}, nil)
		})
		if _, err := s.End(ctx, kgo.TryCommit); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("ceiling: commit: %w", err)
		}
	}
	return nil
}

// sentAt is the send time written in an event's first 8 bytes.
func sentAt(v []byte) time.Time {
	if len(v) < 8 {
		return time.Time{}
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(v)))
}

func us(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
