package processor

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// A record whose writes fail with a permanent produce error would fail its
// transaction every time its batch came back. The processor remembers such
// records by (partition, offset) across aborts, with a strike per failure,
// and handles each more defensively when its batch returns; the first
// commit that includes a struck record forgets it. A struck record of a
// partition that moves to another instance stays remembered here, which is
// harmless: its offset is committed elsewhere, and if offsets are reset to
// it, the cause stands.
//
// The broker fails a partition's whole batch, so a first strike may be a
// neighbour's fault: only a failure of the record's writes produced alone
// counts against the record itself.
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
// nothing.
func (t *txn) handleStruck(ctx context.Context, ref recordRef, r *kgo.Record, s strike, now time.Time) {
	switch {
	case s.n >= strikeSkip:
		t.p.log.Error("record skipped: not even a bare dead letter of it can be written", logAttrs(r, s.cause)...)
	case s.n == strikeBareLetter:
		letter := dlqRecord(t.p.cfg.Names.DLQ, r, topics.StageProcess, fmt.Errorf("dead letter refused: %w", s.cause), now)
		topics.Fit(letter, bareLetterBytes)
		t.p.log.Warn("record failed and its dead letter was refused; sent a bare dead letter", logAttrs(r, s.cause)...)
		t.emit(ctx, ref, true, letter)
	default:
		t.emit(ctx, ref, true, t.letter(r, topics.StageProcess, s.cause, now))
	}
}

// logAttrs identifies r in a log line about its failure.
func logAttrs(r *kgo.Record, err error) []any {
	return []any{"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "event_id", string(r.Key), "err", err}
}
