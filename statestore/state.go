package statestore

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Status of an event key.
type Status uint8

const (
	// Done means the record that claimed the key was processed; JSON "done".
	Done Status = 1
	// Failed means processing failed and the record went to the DLQ; JSON
	// "failed".
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

// MarshalText implements encoding.TextMarshaler; an unknown status is an
// error.
func (s Status) MarshalText() ([]byte, error) {
	if !s.valid() {
		return nil, fmt.Errorf("unknown status %d", uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler; it accepts "done" and
// "failed".
func (s *Status) UnmarshalText(b []byte) error {
	switch string(b) {
	case "done":
		*s = Done
	case "failed":
		*s = Failed
	default:
		return fmt.Errorf("unknown status %q", b)
	}
	return nil
}

func (s Status) valid() bool { return s == Done || s == Failed }

// State is what the store remembers of one event key: the dedup state and
// the event's ledger (ledger.go). Its binary form (MarshalBinary) is the
// value of a changelog record; the JSON form, without the ledger, is the
// value older versions wrote, still read at restore (DecodeChangelog).
type State struct {
	Status    Status    `json:"status"`
	Partition int32     `json:"partition"`  // ingest partition of the record that claimed the key
	Offset    int64     `json:"offset"`     // its ingest offset
	FirstSeen time.Time `json:"first_seen"` // UTC; when it was first processed
	Expires   time.Time `json:"expires"`    // UTC; after this the key is forgotten
	// Replays counts the times the event was emitted again after its first
	// emission (its ingest record re-read after an offset reset); written
	// only when not 0.
	Replays uint32 `json:"replays,omitempty"`

	// ReceivedAt is when ingest accepted the record that claimed the key.
	ReceivedAt time.Time `json:"-"`
	// LastReplayAt is when it was last emitted again.
	LastReplayAt time.Time `json:"-"`
	// Duplicates counts records of the key dropped as duplicates.
	Duplicates      uint32    `json:"-"`
	LastDuplicateAt time.Time `json:"-"`
	// FailStage and FailError say why the last processing failed
	// (Status Failed), the error cut to MaxLedgerError bytes.
	FailStage string `json:"-"`
	FailError string `json:"-"`
	// Deliveries are the event's deliveries, one per subscription, at
	// most MaxDeliveries, in the order of their last attempt record, the
	// least recent first.
	Deliveries []Delivery `json:"-"`
	// Omitted counts the delivery entries left out of Deliveries, the
	// least recently attempted, to keep the story bounded.
	Omitted uint32 `json:"-"`
}

// MarshalBinary encodes s as a changelog value: the stored binary form.
func (s *State) MarshalBinary() ([]byte, error) {
	if !s.Status.valid() {
		return nil, fmt.Errorf("statestore: encode state: unknown status %d", uint8(s.Status))
	}
	// Room for the fixed part and a ledger without deliveries.
	return appendValue(make([]byte, 0, valueLen+64), s), nil
}

// DecodeChangelog decodes a changelog value: the binary form, or the JSON
// form of older versions (which starts with '{'), whose ledger is empty.
func DecodeChangelog(b []byte) (State, error) {
	if len(b) > 0 && b[0] == '{' {
		var st State
		err := st.UnmarshalJSON(b)
		return st, err
	}
	st, err := decodeValue(b)
	if err != nil {
		return State{}, fmt.Errorf("statestore: decode state: %w", err)
	}
	return st, nil
}

// MarshalJSON encodes s in the canonical changelog form, field order fixed
// and times in UTC with nanoseconds (RFC 3339), e.g.
//
//	{"status":"done","partition":3,"offset":42,"first_seen":"2026-11-21T10:00:00.123456789Z","expires":"2026-11-28T10:00:00.123456789Z"}
//
// with ,"replays":N before the closing brace when Replays is not 0.
// It fails on an unknown status or a time outside the years 0 to 9999, which
// RFC 3339 cannot express.
func (s State) MarshalJSON() ([]byte, error) {
	if !s.Status.valid() {
		return nil, fmt.Errorf("statestore: encode state: unknown status %d", uint8(s.Status))
	}
	b := make([]byte, 0, 160)
	b = append(b, `{"status":"`...)
	b = append(b, s.Status.String()...)
	b = append(b, `","partition":`...)
	b = strconv.AppendInt(b, int64(s.Partition), 10)
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, s.Offset, 10)
	var err error
	b = append(b, `,"first_seen":`...)
	if b, err = appendTime(b, s.FirstSeen); err != nil {
		return nil, fmt.Errorf("statestore: encode state: first_seen: %w", err)
	}
	b = append(b, `,"expires":`...)
	if b, err = appendTime(b, s.Expires); err != nil {
		return nil, fmt.Errorf("statestore: encode state: expires: %w", err)
	}
	if s.Replays != 0 {
		b = append(b, `,"replays":`...)
		b = strconv.AppendUint(b, uint64(s.Replays), 10)
	}
	return append(b, '}'), nil
}

func appendTime(b []byte, t time.Time) ([]byte, error) {
	t = t.UTC()
	if y := t.Year(); y < 0 || y > 9999 {
		return nil, fmt.Errorf("year %d outside [0,9999]", y)
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), nil
}

// UnmarshalJSON decodes a changelog value. The canonical form written by
// MarshalJSON is parsed by hand, without allocating; any other valid JSON
// (other field order, white space, escapes, time zone offsets, unknown fields)
// goes through encoding/json with the same result. A missing or unknown
// status and malformed JSON are errors. Times are returned in UTC.
func (s *State) UnmarshalJSON(b []byte) error {
	if st, ok := parseCanonical(b); ok {
		*s = st
		return nil
	}
	st, err := parseAny(b)
	if err != nil {
		return err
	}
	*s = st
	return nil
}

// parseAny is the slow path of UnmarshalJSON.
func parseAny(b []byte) (State, error) {
	var v struct {
		Status    Status    `json:"status"`
		Partition int32     `json:"partition"`
		Offset    int64     `json:"offset"`
		FirstSeen time.Time `json:"first_seen"`
		Expires   time.Time `json:"expires"`
		Replays   uint32    `json:"replays"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return State{}, fmt.Errorf("statestore: decode state: %w", err)
	}
	if !v.Status.valid() {
		return State{}, errors.New("statestore: decode state: missing status")
	}
	return State{
		Status:    v.Status,
		Partition: v.Partition,
		Offset:    v.Offset,
		FirstSeen: v.FirstSeen.UTC(),
		Expires:   v.Expires.UTC(),
		Replays:   v.Replays,
	}, nil
}

// parseCanonical parses exactly the form MarshalJSON writes. ok=false means
// "not canonical", not "invalid": the caller falls back to encoding/json,
// which has the last word on validity.
func parseCanonical(b []byte) (st State, ok bool) {
	p := scanner{b: b}
	if !p.lit(`{"status":"`) {
		return st, false
	}
	switch {
	case p.lit(`done"`):
		st.Status = Done
	case p.lit(`failed"`):
		st.Status = Failed
	default:
		return st, false
	}
	if !p.lit(`,"partition":`) {
		return st, false
	}
	n, ok := p.int(math.MinInt32, math.MaxInt32)
	if !ok {
		return st, false
	}
	st.Partition = int32(n)
	if !p.lit(`,"offset":`) {
		return st, false
	}
	if st.Offset, ok = p.int(math.MinInt64, math.MaxInt64); !ok {
		return st, false
	}
	if !p.lit(`,"first_seen":"`) {
		return st, false
	}
	if st.FirstSeen, ok = p.time(); !ok {
		return st, false
	}
	if !p.lit(`","expires":"`) {
		return st, false
	}
	if st.Expires, ok = p.time(); !ok {
		return st, false
	}
	if !p.lit(`"`) {
		return st, false
	}
	if p.lit(`,"replays":`) {
		n, ok := p.int(0, math.MaxUint32)
		if !ok || n == 0 { // 0 is written by omission
			return st, false
		}
		st.Replays = uint32(n)
	}
	if !p.lit(`}`) || p.i != len(p.b) {
		return st, false
	}
	return st, true
}

type scanner struct {
	b []byte
	i int
}

func (p *scanner) lit(s string) bool {
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return false
	}
	p.i += len(s)
	return true
}

// int parses a JSON integer in [lo, hi]: no leading zeros, no fraction or
// exponent, and not "-0" (all valid JSON, left to the slow path).
func (p *scanner) int(lo, hi int64) (int64, bool) {
	neg := p.i < len(p.b) && p.b[p.i] == '-'
	if neg {
		p.i++
	}
	start := p.i
	var u uint64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		if p.i-start >= 19 { // 19 digits fit in a uint64 without overflow
			return 0, false
		}
		u = u*10 + uint64(p.b[p.i]-'0')
		p.i++
	}
	switch n := p.i - start; {
	case n == 0:
		return 0, false
	case p.b[start] == '0' && (n > 1 || neg):
		return 0, false
	}
	if neg {
		if u > uint64(-(lo+1))+1 {
			return 0, false
		}
		return int64(-u), true // two's complement: correct for -2^63 too
	}
	if u > uint64(hi) {
		return 0, false
	}
	return int64(u), true
}

// time parses YYYY-MM-DDTHH:MM:SS[.F{1,9}]Z, rejecting out-of-range fields
// as time.Parse does.
func (p *scanner) time() (time.Time, bool) {
	b := p.b[p.i:]
	if len(b) < 20 || b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' || b[16] != ':' {
		return time.Time{}, false
	}
	year, ok1 := digits(b[0:4])
	month, ok2 := digits(b[5:7])
	day, ok3 := digits(b[8:10])
	hour, ok4 := digits(b[11:13])
	minute, ok5 := digits(b[14:16])
	sec, ok6 := digits(b[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) ||
		month < 1 || month > 12 || day < 1 || day > daysIn(month, year) ||
		hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	i, nsec := 19, 0
	if b[i] == '.' {
		i++
		start := i
		for i < len(b) && i-start < 9 && b[i] >= '0' && b[i] <= '9' {
			nsec = nsec*10 + int(b[i]-'0')
			i++
		}
		n := i - start
		if n == 0 || (i < len(b) && b[i] >= '0' && b[i] <= '9') {
			return time.Time{}, false
		}
		for ; n < 9; n++ {
			nsec *= 10
		}
	}
	if i >= len(b) || b[i] != 'Z' {
		return time.Time{}, false
	}
	p.i += i + 1
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC), true
}

func digits(b []byte) (int, bool) {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// The stored value of a key, also the changelog value, is a binary form:
// Get and Apply decode it on every call. Version 4, the fixed part of 38
// bytes and then the ledger (appendLedger):
//
//	[0] version  [1] status  [2:6] partition  [6:14] offset
//	[14:22] first_seen Unix seconds  [22:26] nanoseconds
//	[26:34] expires Unix seconds     [34:38] nanoseconds
//
// all big-endian. Seconds and nanoseconds keep every time.Time exactly,
// including the zero time. Version 1 (the fixed part alone, 38 bytes) and
// version 2 (42 bytes: then the replays, big-endian uint32) still read,
// with what they have, and so does version 3 (version 4 without Omitted).
const (
	valueVersion = 4
	versionV3    = 3  // a ledger without Omitted
	valueLen     = 38 // the fixed part
	valueLenV2   = 42
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
	if !(len(b) == valueLen && b[0] == 1 || len(b) == valueLenV2 && b[0] == 2 || len(b) >= valueLen && (b[0] == versionV3 || b[0] == valueVersion)) {
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
	if b[0] == 2 {
		st.Replays = binary.BigEndian.Uint32(b[38:42])
	}
	if !st.Status.valid() || !ok1 || !ok2 {
		return State{}, fmt.Errorf("%w: stored value: invalid status or time", ErrCorrupt)
	}
	if b[0] >= versionV3 {
		if err := decodeLedger(b[valueLen:], &st, b[0] == valueVersion); err != nil {
			return State{}, err
		}
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
