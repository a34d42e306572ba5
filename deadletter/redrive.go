package deadletter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// Transactions of a redrive stay small: a few megabytes or a few hundred
// letters each, far inside the transaction timeout. They also bound what a
// redrive holds of the letters' bodies.
const (
	txnMaxLetters = 500
	txnMaxBytes   = 8 << 20
)

// Redrive copies the letters f selects (as List selects them) that no
// redrive copied yet: processor letters to <prefix>.ingest with their
// original key, value and headers minus the error headers, delivery letters
// to <prefix>.delivery-retry due now with attempts reset to 0, so the
// dispatcher's retry consumer delivers them on the whole schedule again.
// Each copy carries hs-redriven-from; each is written with its marker in
// one transaction (see the package comment). It returns how many letters
// it copied and how many it skipped as already redriven.
//
// It reads the DLQ twice: first to choose the letters, holding at most
// f.Limit of them without their bodies (without a limit, every selected
// one), then to copy them, holding one transaction's letters at a time.
//
// The cluster's shared client answers metadata queries; the reading and
// the transactional client are clients of its own, whose options carry
// the producer limits (kgo.ProducerBatchMaxBytes for bodies over 1 MB). A
// delivery letter of a disabled subscription goes straight back to the
// DLQ: enable it first.
func (s *Service) Redrive(ctx context.Context, kind Kind, f Filter) (copied, skipped int, err error) {
	c := s.c
	names := c.Names
	if _, err := ParseKind(string(kind)); err != nil {
		return 0, 0, fmt.Errorf("deadletter: %w", err)
	}
	if f, err = s.scoped(ctx, f); err != nil {
		return 0, 0, err
	}
	dlq := kind.Topic(names)
	txnID := names.Prefix + "-redrive-" + string(kind)
	tx, err := c.NewClient(
		kgo.TransactionalID(txnID),
		// Markers go to their letter's DLQ partition, copies where their
		// keys hash, as the ingest producer and the dispatcher put the
		// originals: a redriven event reaches the processor partition that
		// holds its dedup state.
		kgo.RecordPartitioner(topics.Partitioner(names.Ingest, names.DeliveryRetry)),
		kgo.ProducerLinger(0),
	)
	if err != nil {
		return 0, 0, fmt.Errorf("deadletter: client: %w", err)
	}
	defer tx.Close()
	// Fence every earlier redrive of this kind before reading the markers:
	// one still running can commit nothing more, and what one committed is
	// complete (markers written) once this returns.
	if _, _, err := tx.ProducerID(ctx); err != nil {
		return 0, 0, fmt.Errorf("deadletter: initialize transactional producer %s: %w", txnID, err)
	}
	// First pass: which letters to copy. It holds at most f.Limit letters
	// (every selected one without a limit), without their bodies, and
	// checks that each can be redriven: a letter that cannot fails the
	// whole redrive, before anything is written.
	sel := newSelection(f.Limit)
	err = scan(ctx, c, dlq, kind, f, func(l Letter) {
		sel.add(Letter{Partition: l.Partition, Offset: l.Offset, FailedAt: l.FailedAt, Key: l.Key, Subscription: l.Subscription})
	}, sel.mark)
	if err != nil {
		return 0, 0, err
	}
	todo := make(map[position]bool, sel.held.Len())
	ranges := make(map[int32]topics.Range)
	for _, l := range sel.held {
		if l.Redriven {
			skipped++
			continue
		}
		if kind == Delivery {
			if _, _, err := retryKey(dlq, l.Partition, l.Offset, l.Key, l.Subscription); err != nil {
				return 0, skipped, err
			}
		}
		todo[position{l.Partition, l.Offset}] = true
		r, ok := ranges[l.Partition]
		if !ok {
			r = topics.Range{From: l.Offset, To: l.Offset + 1}
		}
		ranges[l.Partition] = topics.Range{From: min(r.From, l.Offset), To: max(r.To, l.Offset+1)}
	}
	// Second pass: copy them as they are read again, in transactions of at
	// most txnMaxLetters letters or about txnMaxBytes, which are all that
	// is held of their bodies.
	now := time.Now()
	var batch []*kgo.Record // copy, marker, copy, marker...
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := commit(ctx, tx, batch); err != nil {
			return err
		}
		copied += len(batch) / 2
		batch, size = batch[:0], 0
		return nil
	}
	var copyErr error
	err = c.ReadRanges(ctx, dlq, ranges, func(r *kgo.Record) bool {
		if !todo[position{r.Partition, r.Offset}] {
			return true
		}
		dl := topics.ParseDeadLetter(owned(r))
		cp, err := redriveCopy(names, kind, r.Partition, r.Offset, dl, now)
		if err != nil {
			copyErr = err
			return false
		}
		marker := &kgo.Record{
			Topic:     string(dlq),
			Partition: r.Partition,
			Key:       dl.Key,
			Headers:   []kgo.RecordHeader{{Key: topics.HeaderRedrivenFrom, Value: []byte(ref(dlq, r.Partition, r.Offset))}},
		}
		batch = append(batch, cp, marker)
		size += len(cp.Key) + len(cp.Value)
		if len(batch)/2 >= txnMaxLetters || size >= txnMaxBytes {
			copyErr = flush()
		}
		return copyErr == nil
	}, nil)
	if err != nil {
		return copied, skipped, fmt.Errorf("deadletter: %w", err)
	}
	if copyErr != nil {
		return copied, skipped, copyErr
	}
	return copied, skipped, flush()
}

// ErrFenced is returned by a redrive that another redrive of the same DLQ
// took over: its remaining letters stay in the DLQ for a later redrive.
var ErrFenced = errors.New("another redrive of this DLQ started and took over")

// fenced reports an error of a transaction that another redrive's
// producer, under the same transactional id, fenced. With Kafka 4's
// transactions v2 the fenced commit can also be answered
// INVALID_TXN_STATE: the new producer's initialization aborted the
// transaction first. Either way nothing of it was written.
func fenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) || errors.Is(err, kerr.InvalidTxnState)
}

// commit writes recs in one transaction.
func commit(ctx context.Context, tx *kgo.Client, recs []*kgo.Record) error {
	if err := tx.BeginTransaction(); err != nil {
		return fmt.Errorf("deadletter: begin transaction: %w", err)
	}
	if err := tx.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		if fenced(err) {
			return fmt.Errorf("deadletter: %w", ErrFenced) // the broker aborted the transaction
		}
		if abortErr := tx.EndTransaction(ctx, kgo.TryAbort); abortErr != nil {
			return fmt.Errorf("deadletter: redrive: %w (and its abort: %v)", err, abortErr)
		}
		return fmt.Errorf("deadletter: redrive: %w", err)
	}
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		if fenced(err) {
			return fmt.Errorf("deadletter: %w", ErrFenced)
		}
		// An unconfirmed commit is settled by an abort, which is a no-op
		// for a transaction that did commit.
		if abortErr := tx.EndTransaction(ctx, kgo.TryAbort); abortErr != nil {
			err = fmt.Errorf("%w (and its abort: %v)", err, abortErr)
		}
		return fmt.Errorf("deadletter: commit the redrive of %d letters (they may or may not be redriven; redriving again skips those that were): %w", len(recs)/2, err)
	}
	return nil
}

// redriveCopy is the record that puts the letter dl, at partition and
// offset of the DLQ of kind, back into the pipeline.
func redriveCopy(names topics.Names, kind Kind, partition int32, offset int64, dl *topics.DeadLetter, now time.Time) (*kgo.Record, error) {
	dlq := kind.Topic(names)
	from := ref(dlq, partition, offset)
	if kind == Processor {
		c := dl.Unwrap(names.Ingest)
		c.Headers = append(c.Headers, kgo.RecordHeader{Key: topics.HeaderRedrivenFrom, Value: []byte(from)})
		return c, nil
	}
	sub, eventID, err := retryKey(dlq, partition, offset, string(dl.Key), dl.Subscription)
	if err != nil {
		return nil, err
	}
	retry := &topics.Retry{Subscription: sub, EventID: eventID, DueAt: now, RedrivenFrom: from, Body: dl.Value}
	return retry.Record(names.DeliveryRetry), nil
}

// retryKey splits the key of the delivery letter at partition and offset
// of dlq into its subscription and event id.
func retryKey(dlq topics.Topic, partition int32, offset int64, key, subscription string) (sub, eventID string, err error) {
	sub, eventID, ok := topics.SplitRetryKey(key, subscription)
	if !ok {
		return "", "", fmt.Errorf("deadletter: %s partition %d offset %d: key %q is not <subscription>:<event id>; nothing was redriven",
			dlq, partition, offset, key)
	}
	return sub, eventID, nil
}

// owned returns r with its key, value and header values copied out of the
// fetch buffer they share with the other records fetched with it, which a
// record kept past its poll would otherwise hold whole.
func owned(r *kgo.Record) *kgo.Record {
	c := *r
	c.Key, c.Value = bytes.Clone(r.Key), bytes.Clone(r.Value)
	c.Headers = make([]kgo.RecordHeader, len(r.Headers))
	for i, h := range r.Headers {
		c.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: bytes.Clone(h.Value)}
	}
	return &c
}
