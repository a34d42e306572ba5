package deadletter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// Transactions of a redrive stay small: a few megabytes or a few hundred
// letters each, far inside the transaction timeout.
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
// cl answers metadata queries; the reading and the transactional client
// are built from opts, which carry the producer limits
// (kgo.ProducerBatchMaxBytes for bodies over 1 MB). A delivery letter of
// a disabled subscription goes straight back to the DLQ: enable it first.
func Redrive(ctx context.Context, cl *kgo.Client, opts []kgo.Opt, names topics.Names, kind Kind, f Filter) (copied, skipped int, err error) {
	if _, err := ParseKind(string(kind)); err != nil {
		return 0, 0, fmt.Errorf("deadletter: %w", err)
	}
	dlq := kind.Topic(names)
	txnID := names.Prefix + "-redrive-" + string(kind)
	tx, err := kgo.NewClient(append(slices.Clone(opts),
		kgo.TransactionalID(txnID),
		// Markers go to their letter's DLQ partition, copies where their
		// keys hash, as the ingest producer and the dispatcher put the
		// originals: a redriven event reaches the processor partition that
		// holds its dedup state.
		kgo.RecordPartitioner(topics.Partitioner(names.Ingest, names.DeliveryRetry)),
		kgo.ProducerLinger(0),
	)...)
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
	letters, err := List(ctx, cl, opts, names, kind, f)
	if err != nil {
		return 0, 0, err
	}
	// Every copy is built before any is written: a letter that cannot be
	// redriven fails the whole redrive, not half of it.
	now := time.Now()
	var recs []*kgo.Record // copy, marker, copy, marker...
	for _, l := range letters {
		if l.Redriven {
			skipped++
			continue
		}
		c, err := redriveCopy(names, &l, now)
		if err != nil {
			return 0, skipped, err
		}
		marker := &kgo.Record{
			Topic:     string(dlq),
			Partition: l.Partition,
			Key:       l.letter.Key,
			Headers:   []kgo.RecordHeader{{Key: topics.HeaderRedrivenFrom, Value: []byte(ref(dlq, l.Partition, l.Offset))}},
		}
		recs = append(recs, c, marker)
	}
	for len(recs) > 0 {
		n, size := 0, 0
		for n < len(recs) && n/2 < txnMaxLetters && size < txnMaxBytes {
			size += len(recs[n].Key) + len(recs[n].Value)
			n += 2
		}
		if err := commit(ctx, tx, recs[:n]); err != nil {
			return copied, skipped, err
		}
		copied += n / 2
		recs = recs[n:]
	}
	return copied, skipped, nil
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

// redriveCopy is the record that puts l back into the pipeline.
func redriveCopy(names topics.Names, l *Letter, now time.Time) (*kgo.Record, error) {
	from := ref(l.Kind.Topic(names), l.Partition, l.Offset)
	if l.Kind == Processor {
		c := l.letter.Unwrap(names.Ingest)
		c.Headers = append(c.Headers, kgo.RecordHeader{Key: topics.HeaderRedrivenFrom, Value: []byte(from)})
		return c, nil
	}
	sub, eventID, ok := topics.SplitRetryKey(l.Key, l.Subscription)
	if !ok {
		return nil, fmt.Errorf("deadletter: %s partition %d offset %d: key %q is not <subscription>:<event id>; nothing was redriven",
			l.Kind.Topic(names), l.Partition, l.Offset, l.Key)
	}
	retry := &topics.Retry{Subscription: sub, EventID: eventID, DueAt: now, RedrivenFrom: from, Body: l.Value}
	return retry.Record(names.DeliveryRetry), nil
}
