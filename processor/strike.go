package processor

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/tracing"
)

// A record whose writes fail with a permanent produce error would fail its
// transaction every time its batch came back. The processor remembers such
// records by (partition, offset) across aborts, with a strike per failure,
// and handles each more defensively when its batch returns; the first
// commit that includes a struck record forgets it, and so does the
// revocation of its partition: strikes are at most one per record of the
// partitions held whose writes failed permanently and were not committed
// yet.
//
// The broker fails a partition's whole batch, so a first strike may be a
// neighbour's fault: only a failure of the record's writes produced alone
// counts against the record itself.
//
// A dead letter is sent only if the DLQ topic's max.message.bytes can take
// it; otherwise the record steps down (bare letter, then skip) within the
// same transaction. A write the DLQ refuses costs far more than an abort:
// a partition joins the transaction before the broker validates the batch
// (on the produce itself with Kafka's transaction.version 2), so a refused
// batch still leaves its partition in the transaction, and the abort must
// write a control marker there. A topic whose max.message.bytes is smaller than a
// marker batch (about 80 bytes) fails that marker with RECORD_TOO_LARGE:
// the coordinator keeps the transaction in PREPARE_ABORT, every produce of
// the next transaction gets CONCURRENT_TRANSACTIONS (kgo retries it), and
// processing stalls until the coordinator times the transaction out (the
// session's TransactionTimeout), once per refused letter. kgo's producer
// state is sound meanwhile: a failed batch rewinds its partition's sequence
// and EndTxn bumps the epoch; the wait is the broker's.
const (
	// strikeIsolate: the record's writes are produced alone, flushed
	// before and after, so whatever fails is theirs.
	strikeIsolate = 1
	// strikeDeadLetter: the writes failed alone; the record is
	// dead-lettered with the cause, and no state is written.
	strikeDeadLetter = 2
	// strikeBareLetter: its dead letter failed too; a bare letter, cut to
	// bareLetterBytes (the body first, then headers), is written instead.
	strikeBareLetter = 3
	// strikeSkip: even the bare letter failed; the record is skipped and
	// logged, rather than blocking its partition forever.
	strikeSkip = 4
)

// bareLetterBytes is the size of a bare dead letter: as small as Fit can
// always make one.
const bareLetterBytes = 8 << 10

// recordRef names one ingest record.
type recordRef struct {
	partition int32
	offset    int64
}

func refOf(r *kgo.Record) recordRef { return recordRef{partition: r.Partition, offset: r.Offset} }

// strike is what the processor remembers of a struck record.
type strike struct {
	n     int
	cause error
}

// struck records, under t.mu, the permanent failure of a write for ref.
func (t *txn) struck(ref recordRef, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.failedRefs[ref]; !ok {
		t.failedRefs[ref] = err
	}
}

// remember adds this transaction's failed records to the processor's
// strikes once every write is acknowledged (the transaction then aborts).
func (t *txn) remember() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.failedRefs) > 0 && t.p.strikes == nil {
		t.p.strikes = make(map[recordRef]strike)
	}
	for ref, err := range t.failedRefs {
		t.p.strikes[ref] = strike{n: t.p.strikes[ref].n + 1, cause: err}
	}
}

// forget drops the strikes of the records this committed transaction
// handled.
func (t *txn) forget() {
	for _, ref := range t.strikesSeen {
		delete(t.p.strikes, ref)
	}
}

// handleStruck writes what a record struck at least strikeDeadLetter times
// gets instead of its events record: a dead letter, a bare one, or
// nothing; it steps down at once past a letter the DLQ topic cannot take.
func (t *txn) handleStruck(ctx context.Context, ref recordRef, r *kgo.Record, s strike, now time.Time) {
	cause := s.cause
	for step := s.n; step < strikeSkip; step++ {
		room := t.dlqRoom(ctx)
		var letter *kgo.Record
		logCause, what, msg := cause, "its dead letter", "record failed; sent to the DLQ"
		switch step {
		case strikeDeadLetter:
			letter, logCause = t.cutLetter(r, topics.StageProcess, cause, now)
		case strikeBareLetter:
			letter = dlqRecord(t.p.cfg.Names.DLQ, r, topics.StageProcess, fmt.Errorf("dead letter refused: %w", cause), now)
			topics.Fit(letter, min(bareLetterBytes, room))
			what, msg = "even a bare dead letter", "record failed and its dead letter was refused; sent a bare dead letter"
		}
		n := topics.RecordBytes(letter)
		if n <= room {
			t.p.log.Warn(msg, logAttrs(ctx, r, logCause)...)
			t.emit(ctx, ref, true, append([]*kgo.Record{letter}, t.deadLettered(r, topics.StageProcess, cause, now)...)...)
			return
		}
		cause = fmt.Errorf("%w; %s of %d bytes exceeds the %d bytes the DLQ takes", cause, what, n, room)
	}
	t.p.log.Error("record skipped: not even a bare dead letter of it can be written", logAttrs(ctx, r, cause)...)
}

// dlqRoom is the largest record the DLQ topic takes: its max.message.bytes,
// at most the processor's record limit. It is read once per transaction,
// for struck records only; when it cannot be read, the processor's limit
// stands and the broker decides.
func (t *txn) dlqRoom(ctx context.Context) int64 {
	if t.dlqBytes > 0 {
		return t.dlqBytes
	}
	t.dlqBytes = t.p.cfg.MaxRecordBytes
	topic := string(t.p.cfg.Names.DLQ)
	n, err := maxMessageBytes(ctx, t.sess.Client(), topic)
	if err != nil {
		t.p.log.Warn("cannot read the DLQ topic's max.message.bytes; dead letters are sent unchecked", "topic", topic, "err", err)
		return t.dlqBytes
	}
	t.dlqBytes = min(t.dlqBytes, n)
	return t.dlqBytes
}

// maxMessageBytes reads a topic's max.message.bytes.
func maxMessageBytes(ctx context.Context, cl *kgo.Client, topic string) (int64, error) {
	rcs, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("describe configs of %s: %w", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return 0, fmt.Errorf("describe configs of %s: %w", topic, err)
	}
	for _, c := range rc.Configs {
		if c.Key == "max.message.bytes" {
			return strconv.ParseInt(c.MaybeValue(), 10, 64)
		}
	}
	return 0, fmt.Errorf("describe configs of %s: no max.message.bytes", topic)
}

// logAttrs identifies r in a log line about its failure, and the trace of
// ctx, r's span.
func logAttrs(ctx context.Context, r *kgo.Record, err error) []any {
	return []any{"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "event_id", string(r.Key), tracing.TraceID(ctx), "err", err}
}
