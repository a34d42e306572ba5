package statestore

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Status of an event key.
type Status uint8

const (
	// Done means the record that claimed the key was processed.
	Done Status = 1
	// Failed means processing failed and the record went to the DLQ.
	Failed Status = 2
)

// String returns "done", "failed", or "Status(n)" for an unknown status.
func (s Status) String() string {
	switch s {
	case Done:
		return "done"
	case Failed:
		return "failed"
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

func (s Status) valid() bool { return s == Done || s == Failed }

// State is what the store remembers of one event key: the dedup state and
// the event's ledger (ledger.go). Its binary form (MarshalBinary) is the
// value of a changelog record and of the store.
type State struct {
	Status    Status
	Partition int32     // ingest partition of the record that claimed the key
	Offset    int64     // its ingest offset
	FirstSeen time.Time // UTC; when it was first processed
	Expires   time.Time // UTC; after this the key is forgotten
	// Replays counts the times the event was emitted again after its first
	// emission (its ingest record re-read after an offset reset).
	Replays uint32

	// ReceivedAt is when ingest accepted the record that claimed the key.
	ReceivedAt time.Time
	// LastReplayAt is when it was last emitted again.
	LastReplayAt time.Time
	// Duplicates counts records of the key dropped as duplicates.
	Duplicates      uint32
	LastDuplicateAt time.Time
	// FailStage and FailError say why the last processing failed
	// (Status Failed), the error cut to MaxLedgerError bytes.
	FailStage string
	FailError string
	// Deliveries are the event's deliveries, one per subscription, at
	// most MaxDeliveries, in the order of their last attempt record, the
	// least recent first.
	Deliveries []Delivery
	// Omitted counts the delivery entries left out of Deliveries, the
	// least recently attempted, to keep the story bounded.
	Omitted uint32
	// Trace is the trace context of the processing that claimed the key:
	// the event's trace, which its replays link to.
	Trace Trace
}

// Trace is a W3C trace context: trace id, span id and trace flags. The
// zero Trace is none.
type Trace struct {
	TraceID [16]byte
	SpanID  [8]byte
	Flags   byte
}

// traceLen is the encoded length of a Trace other than the zero one.
const traceLen = 16 + 8 + 1

// MarshalBinary encodes s as a changelog value: the stored binary form.
func (s *State) MarshalBinary() ([]byte, error) {
	if !s.Status.valid() {
		return nil, fmt.Errorf("statestore: encode state: unknown status %d", uint8(s.Status))
	}
	// Room for the fixed part and a ledger without deliveries.
	return appendValue(make([]byte, 0, valueLen+64), s), nil
}

// DecodeChangelog decodes a changelog value, the binary form. A value of
// any other form or version is an error wrapping ErrCorrupt.
func DecodeChangelog(b []byte) (State, error) {
	st, err := decodeValue(b)
	if err != nil {
		return State{}, fmt.Errorf("statestore: decode state: %w", err)
	}
	return st, nil
}

// The stored value of a key, also the changelog value, is a binary form:
// Get and Apply decode it on every call. Version 6, the fixed part of 38
// bytes and then the ledger (appendLedger), which ends with the trace:
//
//	[0] version  [1] status  [2:6] partition  [6:14] offset
//	[14:22] first_seen Unix seconds  [22:26] nanoseconds
//	[26:34] expires Unix seconds     [34:38] nanoseconds
//
// all big-endian. Seconds and nanoseconds keep every time.Time exactly,
// including the zero time. Version 5, the same without a resend mark on
// an attempt (its outcome code's high bit), and version 4, without the
// trace either, still read; the forms written before them (JSON,
// versions 1 to 3) never left development and do not.
const (
	valueVersion = 6
	valueLen     = 38 // the fixed part
)

func appendValue(b []byte, s *State) []byte {
	b = append(b, valueVersion, byte(s.Status))
	b = binary.BigEndian.AppendUint32(b, uint32(s.Partition))
	b = binary.BigEndian.AppendUint64(b, uint64(s.Offset))
	b = binary.BigEndian.AppendUint64(b, uint64(s.FirstSeen.Unix()))
	b = binary.BigEndian.AppendUint32(b, uint32(s.FirstSeen.Nanosecond()))
	b = binary.BigEndian.AppendUint64(b, uint64(s.Expires.Unix()))
	b = binary.BigEndian.AppendUint32(b, uint32(s.Expires.Nanosecond()))
	return appendLedger(b, s)
}

func decodeValue(b []byte) (State, error) {
	if len(b) < valueLen || b[0] < 4 || b[0] > valueVersion {
		return State{}, fmt.Errorf("%w: stored value: %d bytes, version %d", ErrCorrupt, len(b), firstByte(b))
	}
	st := State{
		Status:    Status(b[1]),
		Partition: int32(binary.BigEndian.Uint32(b[2:6])),
		Offset:    int64(binary.BigEndian.Uint64(b[6:14])),
	}
	var ok1, ok2 bool
	st.FirstSeen, ok1 = decodeTime(b[14:26])
	st.Expires, ok2 = decodeTime(b[26:38])
	if !st.Status.valid() || !ok1 || !ok2 {
		return State{}, fmt.Errorf("%w: stored value: invalid status or time", ErrCorrupt)
	}
	if err := decodeLedger(b[valueLen:], b[0], &st); err != nil {
		return State{}, err
	}
	return st, nil
}

func decodeTime(b []byte) (time.Time, bool) {
	sec := int64(binary.BigEndian.Uint64(b[:8]))
	nsec := binary.BigEndian.Uint32(b[8:12])
	if nsec >= 1e9 {
		return time.Time{}, false
	}
	return time.Unix(sec, int64(nsec)).UTC(), true
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}

// expiryKey appends the expiry index key of (expires, key): the prefix, the
// expiry as Unix nanoseconds (saturated to the int64 range, sign bit flipped
// so that byte order is time order), then the key.
func appendExpiryKey(b []byte, expires time.Time, key []byte) []byte {
	b = append(b, prefixExpiry)
	b = binary.BigEndian.AppendUint64(b, expiryNanos(expires)^(1<<63))
	return append(b, key...)
}

func expiryNanos(t time.Time) uint64 {
	const maxSec = math.MaxInt64 / int64(time.Second)
	switch sec := t.Unix(); {
	case sec < -maxSec:
		return 1 << 63 // math.MinInt64
	case sec >= maxSec:
		return math.MaxInt64
	default:
		return uint64(sec*1e9 + int64(t.Nanosecond()))
	}
}
