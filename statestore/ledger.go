package statestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// The ledger: besides the dedup decision, a key's State is its event's
// story, carried by the changelog like the rest of the state.
//
// Deliveries keep, per subscription, exact counts and the last RecentTries
// real attempts, errors cut to MaxLedgerError bytes, so an entry stays
// small: about 115 bytes (25 of them its trace), plus about 40 per subscription and 25 per kept
// attempt with its error. A story keeps the deliveries of MaxDeliveries
// subscriptions (at most about 40 KiB with subscription ids of 20 bytes)
// and counts the others in Omitted; MarshalWithin keeps the whole value
// within a record limit whatever its ids.

// RecentTries is how many real attempts a Delivery keeps.
const RecentTries = 4

// MaxDeliveries is how many subscriptions' deliveries a story keeps: the
// most recently attempted.
const MaxDeliveries = 64

// ErrTooLarge is a state that cannot be encoded within the room given,
// even without its deliveries.
var ErrTooLarge = errors.New("statestore: state too large")

// MaxLedgerError bounds an error kept in the ledger, in bytes.
const MaxLedgerError = 120

// Delivery is what the ledger knows of an event's delivery to one
// subscription.
type Delivery struct {
	Subscription string
	// Attempts counts real attempts; Recent holds the last RecentTries,
	// oldest first.
	Attempts uint32
	Recent   []Try
	// Outcome is the last word of the dispatcher: delivered, failed,
	// retrying or dead_lettered (topics.Outcome*).
	Outcome        string
	Status         int // the subscriber's last HTTP status, 0 without one
	DueAt          time.Time
	DeliveredAt    time.Time
	DeadLetteredAt time.Time
}

// Try is one real delivery attempt.
type Try struct {
	N       uint32
	Outcome string // delivered or failed
	Status  int
	At      time.Time
	Latency time.Duration
	Error   string
	// Resend: the attempt is of a delivery an operator asked for again.
	Resend bool
}

// outcomes are the outcome names in their encoded order (index = code).
var outcomes = []string{"", "delivered", "failed", "retrying", "dead_lettered"}

// resendFlag marks a Try's outcome code as a resend's (value version 6).
const resendFlag = 0x80

func outcomeCode(s string) byte {
	for i, o := range outcomes {
		if o == s {
			return byte(i)
		}
	}
	return 0
}

// Cut returns s cut to MaxLedgerError bytes of valid UTF-8.
func Cut(s string) string {
	if len(s) <= MaxLedgerError {
		return s
	}
	i := MaxLedgerError
	for i > 0 && s[i]&0xC0 == 0x80 { // not in the middle of a rune
		i--
	}
	return s[:i]
}

// appendLedger appends the ledger fields of s (value version 6).
func appendLedger(b []byte, s *State) []byte {
	b = appendVarTime(b, s.ReceivedAt)
	b = binary.AppendUvarint(b, uint64(s.Replays))
	b = appendVarTime(b, s.LastReplayAt)
	b = binary.AppendUvarint(b, uint64(s.Duplicates))
	b = appendVarTime(b, s.LastDuplicateAt)
	b = appendString(b, s.FailStage)
	b = appendString(b, s.FailError)
	b = binary.AppendUvarint(b, uint64(len(s.Deliveries)))
	for i := range s.Deliveries {
		b = appendDelivery(b, &s.Deliveries[i])
	}
	b = binary.AppendUvarint(b, uint64(s.Omitted))
	return appendTrace(b, s.Trace)
}

// appendTrace writes a trace as a string of 0 bytes (none) or traceLen.
func appendTrace(b []byte, t Trace) []byte {
	if t == (Trace{}) {
		return append(b, 0)
	}
	b = append(b, traceLen)
	b = append(b, t.TraceID[:]...)
	b = append(b, t.SpanID[:]...)
	return append(b, t.Flags)
}

func appendDelivery(b []byte, d *Delivery) []byte {
	b = appendString(b, d.Subscription)
	b = binary.AppendUvarint(b, uint64(d.Attempts))
	b = append(b, outcomeCode(d.Outcome))
	b = binary.AppendUvarint(b, uint64(d.Status))
	b = appendVarTime(b, d.DueAt)
	b = appendVarTime(b, d.DeliveredAt)
	b = appendVarTime(b, d.DeadLetteredAt)
	b = binary.AppendUvarint(b, uint64(len(d.Recent)))
	for _, t := range d.Recent {
		b = binary.AppendUvarint(b, uint64(t.N))
		code := outcomeCode(t.Outcome)
		if t.Resend {
			code |= resendFlag
		}
		b = append(b, code)
		b = binary.AppendUvarint(b, uint64(t.Status))
		b = appendVarTime(b, t.At)
		b = binary.AppendUvarint(b, uint64(t.Latency.Microseconds()))
		b = appendString(b, t.Error)
	}
	return b
}

// MarshalWithin encodes s as MarshalBinary does, in at most n bytes: a
// longer s loses its least recently attempted deliveries, counted in
// Omitted, until it fits. When even s without deliveries takes more than
// n bytes, it returns ErrTooLarge and leaves s as it was.
func (s *State) MarshalWithin(n int) ([]byte, error) {
	b, err := s.MarshalBinary()
	if err != nil || len(b) <= n {
		return b, err
	}
	// Drop deliveries by their encoded sizes, then check: the counts'
	// varints may still take a byte or two more.
	over, drop := len(b)-n, 0
	for over > 0 && drop < len(s.Deliveries) {
		over -= len(appendDelivery(nil, &s.Deliveries[drop]))
		drop++
	}
	for ; drop <= len(s.Deliveries); drop++ {
		st := *s
		st.Deliveries = s.Deliveries[drop:]
		if len(st.Deliveries) == 0 {
			st.Deliveries = nil // as decoded
		}
		st.Omitted = s.Omitted + uint32(drop)
		if b = appendValue(b[:0], &st); len(b) <= n {
			*s = st
			return b, nil
		}
	}
	return nil, fmt.Errorf("%w: %d bytes without deliveries, room for %d", ErrTooLarge, len(b), n)
}

// decodeLedger reads what appendLedger wrote into s, in value version
// version (4: without the trace; before 6, no resend mark).
func decodeLedger(b []byte, version byte, s *State) error {
	r := reader{b: b}
	s.ReceivedAt = r.time()
	s.Replays = r.u32()
	s.LastReplayAt = r.time()
	s.Duplicates = r.u32()
	s.LastDuplicateAt = r.time()
	s.FailStage = r.string()
	s.FailError = r.string()
	n := r.count()
	if n > 0 {
		s.Deliveries = make([]Delivery, n)
	}
	for i := range n {
		d := &s.Deliveries[i]
		d.Subscription = r.string()
		d.Attempts = r.u32()
		d.Outcome = r.outcome()
		d.Status = int(r.u32())
		d.DueAt = r.time()
		d.DeliveredAt = r.time()
		d.DeadLetteredAt = r.time()
		if m := r.count(); m > 0 {
			d.Recent = make([]Try, m)
			for j := range d.Recent {
				t := &d.Recent[j]
				t.N = r.u32()
				t.Outcome, t.Resend = r.flaggedOutcome(version >= 6)
				t.Status = int(r.u32())
				t.At = r.time()
				t.Latency = time.Duration(r.u32()) * time.Microsecond
				t.Error = r.string()
			}
		}
	}
	s.Omitted = r.u32()
	if version >= 5 {
		s.Trace = r.trace()
	}
	if r.err == nil && len(r.b) > 0 {
		r.err = fmt.Errorf("%d bytes left over", len(r.b))
	}
	if r.err != nil {
		return fmt.Errorf("%w: stored value: ledger: %v", ErrCorrupt, r.err)
	}
	return nil
}

// appendVarTime writes the zero time as one byte 0, any other as
// 1+nanoseconds (uvarint) and Unix seconds (varint).
func appendVarTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(t.Nanosecond())+1)
	return binary.AppendVarint(b, t.Unix())
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// reader decodes the ledger; its first error sticks and zeroes the rest.
type reader struct {
	b   []byte
	err error
}

var errShort = errors.New("truncated")

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) u32() uint32 {
	v := r.uvarint()
	if v > 1<<32-1 {
		r.err = errors.New("number out of range")
		return 0
	}
	return uint32(v)
}

// count reads a length that must fit in what is left.
func (r *reader) count() int {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.err = errShort
		return 0
	}
	return int(n)
}

func (r *reader) string() string {
	n := r.count()
	if r.err != nil {
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *reader) trace() Trace {
	var t Trace
	switch b := r.string(); len(b) {
	case 0:
	case traceLen:
		copy(t.TraceID[:], b[:16])
		copy(t.SpanID[:], b[16:24])
		t.Flags = b[24]
	default:
		r.err = fmt.Errorf("trace of %d bytes", len(b))
	}
	return t
}

func (r *reader) outcome() string {
	o, _ := r.flaggedOutcome(false)
	return o
}

// flaggedOutcome reads an outcome code and, when flags, its resend mark.
func (r *reader) flaggedOutcome(flags bool) (string, bool) {
	if r.err != nil || len(r.b) == 0 {
		r.err = errShort
		return "", false
	}
	c := r.b[0]
	r.b = r.b[1:]
	resend := flags && c&resendFlag != 0
	if resend {
		c &^= resendFlag
	}
	if int(c) >= len(outcomes) {
		r.err = fmt.Errorf("unknown outcome %d", c)
		return "", false
	}
	return outcomes[c], resend
}

func (r *reader) time() time.Time {
	ns := r.uvarint()
	if r.err != nil || ns == 0 {
		return time.Time{}
	}
	if ns > 1e9 {
		r.err = errors.New("nanoseconds out of range")
		return time.Time{}
	}
	if r.err != nil {
		return time.Time{}
	}
	sec, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errShort
		return time.Time{}
	}
	r.b = r.b[n:]
	return time.Unix(sec, int64(ns-1)).UTC()
}
