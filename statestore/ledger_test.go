package statestore

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func ledgerState() State {
	return State{
		Status: Done, Partition: 3, Offset: 42, FirstSeen: t0, Expires: t1,
		ReceivedAt: t0.Add(-time.Millisecond), Replays: 1, LastReplayAt: t0.Add(time.Hour),
		Duplicates: 2, LastDuplicateAt: t0.Add(time.Minute),
		Deliveries: []Delivery{
			{Subscription: "sub_icrju6kffukktylf", Attempts: 3, Outcome: "delivered", Status: 204, DeliveredAt: t0.Add(2 * time.Second),
				Recent: []Try{
					{N: 1, Outcome: "failed", Status: 503, At: t0, Latency: 1500 * time.Microsecond, Error: "status 503"},
					{N: 2, Outcome: "failed", Status: 503, At: t0.Add(time.Second), Error: "status 503"},
					{N: 3, Outcome: "delivered", Status: 204, At: t0.Add(2 * time.Second)},
				}},
			{Subscription: "sub_b", Attempts: 8, Outcome: "dead_lettered", Status: 500, DeadLetteredAt: t0.Add(time.Hour)},
		},
		Trace: testTrace,
	}
}

var testTrace = Trace{
	TraceID: [16]byte{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
	SpanID:  [8]byte{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
	Flags:   1,
}

// TestLedgerRoundTrip: the whole story survives the changelog's binary
// form, and an entry stays small.
func TestLedgerRoundTrip(t *testing.T) {
	for _, st := range []State{
		{Status: Done, Partition: 1, Offset: 2, FirstSeen: t0, Expires: t1},
		{Status: Failed, FirstSeen: t0, Expires: t1, FailStage: "process", FailError: "bad"},
		ledgerState(),
	} {
		b, err := st.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeChangelog(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, st) {
			t.Errorf("round trip: got %+v, want %+v", got, st)
		}
	}
	b, _ := (&State{Status: Done, FirstSeen: t0, Expires: t1, ReceivedAt: t0, Trace: testTrace}).MarshalBinary()
	if len(b) > 86 {
		t.Errorf("an undelivered event takes %d bytes, want at most 86", len(b))
	}
	st := ledgerState()
	st.Deliveries = st.Deliveries[1:]
	one, _ := st.MarshalBinary()
	st.Deliveries = append(st.Deliveries, Delivery{Subscription: "sub_abcdefghijklmnop", Attempts: 1, Outcome: "delivered", Status: 200, DeliveredAt: t0,
		Recent: []Try{{N: 1, Outcome: "delivered", Status: 200, At: t0, Latency: time.Millisecond}}})
	two, _ := st.MarshalBinary()
	if per := len(two) - len(one); per > 60 {
		t.Errorf("a subscription delivered at once adds %d bytes, want at most 60", per)
	}
}

// TestLedgerTrace: a value of version 4, written before the ledger kept
// the trace, reads with none; a trace of any length but 0 and 25 bytes is
// corrupt.
func TestLedgerTrace(t *testing.T) {
	st := ledgerState()
	b, _ := st.MarshalBinary()
	v4 := append([]byte{4}, b[1:len(b)-1-traceLen]...)
	want := st
	want.Trace = Trace{}
	if got, err := DecodeChangelog(v4); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("version 4: got %+v, %v, want the story without a trace", got, err)
	}
	if _, err := DecodeChangelog(b[:len(b)-1-traceLen]); !errors.Is(err, ErrCorrupt) {
		t.Errorf("version %d without its trace: got %v, want ErrCorrupt", valueVersion, err)
	}
	bad := append(append(b[:len(b)-1-traceLen:len(b)-1-traceLen], 24), b[len(b)-traceLen:len(b)-1]...)
	if _, err := DecodeChangelog(bad); !errors.Is(err, ErrCorrupt) {
		t.Errorf("trace of 24 bytes: got %v, want ErrCorrupt", err)
	}
}

// TestLedgerResend: an attempt of a resend keeps its mark through the
// changelog (value version 6, the outcome code's high bit); a value of
// version 5, written before the mark, reads as it did, and one whose
// outcome code has the bit set is corrupt.
func TestLedgerResend(t *testing.T) {
	st := ledgerState()
	st.Deliveries[0].Recent = append(st.Deliveries[0].Recent, Try{N: 1, Outcome: "delivered", Status: 200, At: t0.Add(time.Hour), Resend: true})
	b, err := st.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeChangelog(b); err != nil || !reflect.DeepEqual(got, st) {
		t.Errorf("round trip: got %+v, %v, want %+v", got, err, st)
	}
	plain := ledgerState()
	pb, _ := plain.MarshalBinary()
	v5 := append([]byte{5}, pb[1:]...)
	if got, err := DecodeChangelog(v5); err != nil || !reflect.DeepEqual(got, plain) {
		t.Errorf("version 5: got %+v, %v, want %+v", got, err, plain)
	}
	if _, err := DecodeChangelog(append([]byte{5}, b[1:]...)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("version 5 with a resend mark: got %v, want ErrCorrupt", err)
	}
}

// TestOldFormatsRefused: the value forms written before the current one
// (JSON, versions 1 to 3) never shipped and do not decode: a changelog
// record of one is an error wrapping ErrCorrupt, which restore skips and
// counts like any record that is not a state.
func TestOldFormatsRefused(t *testing.T) {
	st := State{Status: Done, Partition: 3, Offset: 42, FirstSeen: t0, Expires: t1}
	cur := appendValue(nil, &st)
	story := ledgerState()
	curStory := appendValue(nil, &story)
	for _, tt := range []struct {
		name  string
		value []byte
	}{
		{"JSON", []byte(`{"status":"done","partition":3,"offset":42,"first_seen":"2026-11-21T10:00:00.123456789Z","expires":"2026-11-28T10:00:00.123456789Z"}`)},
		{"version 1", append([]byte{1}, cur[1:valueLen]...)},
		{"version 2", append(append([]byte{2}, cur[1:valueLen]...), 0, 0, 0, 1)},
		{"version 3", append([]byte{3}, curStory[1:len(curStory)-2-traceLen]...)}, // without Omitted
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeChangelog(tt.value)
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("DecodeChangelog: got %+v, %v; want an error wrapping ErrCorrupt", got, err)
			}
		})
	}
}

// TestMarshalWithin: a state is encoded whole in a room of its size; one
// byte less, it loses its least recently attempted delivery, counted as
// omitted; a room smaller than the state without deliveries is refused,
// the state left as it was.
func TestMarshalWithin(t *testing.T) {
	st := ledgerState()
	st.Omitted = 3
	whole, _ := st.MarshalBinary()
	bare := st
	bare.Deliveries, bare.Omitted = nil, st.Omitted+uint32(len(st.Deliveries))
	bareLen := len(appendValue(nil, &bare))
	tests := []struct {
		name        string
		room        int
		wantKept    int // deliveries kept, -1: refused
		wantOmitted uint32
	}{
		{"at its size", len(whole), 2, 3},
		{"a byte less", len(whole) - 1, 1, 4},
		{"room for no delivery", bareLen, 0, 5},
		{"a byte less than without deliveries", bareLen - 1, -1, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := st
			b, err := got.MarshalWithin(tt.room)
			if tt.wantKept < 0 {
				if !errors.Is(err, ErrTooLarge) || !reflect.DeepEqual(got, st) {
					t.Errorf("got %d bytes, %v, state changed: %v; want ErrTooLarge and the state as it was", len(b), err, !reflect.DeepEqual(got, st))
				}
				return
			}
			if err != nil || len(b) > tt.room {
				t.Fatalf("got %d bytes, %v; want at most %d", len(b), err, tt.room)
			}
			want := st.Deliveries[len(st.Deliveries)-tt.wantKept:]
			if tt.wantKept == 0 {
				want = nil // as decoded
			}
			if !reflect.DeepEqual(got.Deliveries, want) || got.Omitted != tt.wantOmitted {
				t.Errorf("got %d deliveries and %d omitted, want the last %d and %d", len(got.Deliveries), got.Omitted, tt.wantKept, tt.wantOmitted)
			}
			if dec, err := DecodeChangelog(b); err != nil || !reflect.DeepEqual(dec, got) {
				t.Errorf("decode: got %+v %v, want %+v", dec, err, got)
			}
		})
	}
}

func TestLedgerDecodeErrors(t *testing.T) {
	st := ledgerState()
	good, _ := st.MarshalBinary()
	for n := valueLen; n < len(good); n++ {
		if _, err := DecodeChangelog(good[:n]); err == nil || !strings.Contains(err.Error(), "corrupt") {
			t.Fatalf("cut to %d of %d bytes: got %v, want a corrupt store error", n, len(good), err)
		}
	}
	if _, err := DecodeChangelog(append(good, 0)); err == nil {
		t.Errorf("a trailing byte: got no error")
	}
}

// FuzzLedger decodes arbitrary changelog values. Invariants: never panics;
// what decodes encodes back to a value that decodes to the same state.
func FuzzLedger(f *testing.F) {
	st := ledgerState()
	good, _ := st.MarshalBinary()
	f.Add(good)
	f.Add(good[:valueLen])
	f.Add([]byte(`{"status":"done","partition":3,"offset":42}`)) // an old form: refused
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := DecodeChangelog(b)
		if err != nil {
			return
		}
		enc, err := got.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeChangelog(enc)
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("decode of encode: got %+v %v, want %+v", again, err, got)
		}
	})
}
