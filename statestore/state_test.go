package statestore

import (
	"errors"
	"math"
	"testing"
	"time"
)

var (
	t0 = time.Date(2026, 11, 21, 10, 0, 0, 123456789, time.UTC)
	t1 = t0.Add(7 * 24 * time.Hour)
)

// sameState reports whether a and b are equal, comparing times with Equal
// and requiring UTC.
func sameState(a, b State) bool {
	return a.Status == b.Status && a.Partition == b.Partition && a.Offset == b.Offset && a.Replays == b.Replays &&
		a.FirstSeen.Equal(b.FirstSeen) && a.Expires.Equal(b.Expires) &&
		a.FirstSeen.Location() == time.UTC && a.Expires.Location() == time.UTC
}

func TestStateBinaryRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		name string
		st   State
	}{
		{"done", State{Status: Done, Partition: 3, Offset: 42, FirstSeen: t0, Expires: t1}},
		{"failed, whole seconds", State{Status: Failed, Partition: 0, Offset: 0, FirstSeen: t0.Truncate(time.Second), Expires: t1.Truncate(time.Second)}},
		{"replayed", State{Status: Done, Partition: 3, Offset: 42, FirstSeen: t0, Expires: t1, Replays: 2}},
		{"zero times", State{Status: Done, Partition: 1, Offset: 7}},
		{"extremes", State{Status: Done, Partition: math.MaxInt32, Offset: math.MaxInt64, Replays: math.MaxUint32,
			FirstSeen: time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), Expires: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)}},
		{"negatives", State{Status: Failed, Partition: math.MinInt32, Offset: math.MinInt64, FirstSeen: t0, Expires: t1}},
		{"local time and monotonic clock", State{Status: Done, FirstSeen: time.Now().In(time.FixedZone("X", 3600)), Expires: time.Now()}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stored, err := decodeValue(appendValue(nil, &tt.st))
			if err != nil {
				t.Fatalf("decodeValue: %v", err)
			}
			if !sameState(stored, tt.st) {
				t.Errorf("decodeValue: got %+v, want %+v", stored, tt.st)
			}
		})
	}
}

func TestStateMarshalErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		st   State
	}{
		{"no status", State{FirstSeen: t0, Expires: t1}},
		{"unknown status", State{Status: 3, FirstSeen: t0, Expires: t1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if b, err := tt.st.MarshalBinary(); err == nil {
				t.Errorf("MarshalBinary: got %x, want an error", b)
			}
		})
	}
}

func TestStatusString(t *testing.T) {
	for _, tt := range []struct {
		s    Status
		want string
	}{
		{Done, "done"},
		{Failed, "failed"},
		{Status(9), "Status(9)"},
	} {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("String: got %q, want %q", got, tt.want)
		}
	}
}

func TestDecodeValueErrors(t *testing.T) {
	good := appendValue(nil, &State{Status: Done, FirstSeen: t0, Expires: t1})
	for _, tt := range []struct {
		name  string
		value []byte
	}{
		{"empty", nil},
		{"short", good[:len(good)-1]},
		{"long", append(append([]byte{}, good...), 0)},
		{"version", append([]byte{valueVersion + 1}, good[1:]...)},
		{"status", append([]byte{valueVersion, 0}, good[2:]...)},
		{"nanoseconds", append(append([]byte{}, good[:22]...), 0xff, 0xff, 0xff, 0xff, good[26], good[27], good[28], good[29], good[30], good[31], good[32], good[33], good[34], good[35], good[36], good[37])},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeValue(tt.value)
			if got, want := errors.Is(err, ErrCorrupt), true; got != want {
				t.Errorf("decodeValue: errors.Is(%v, ErrCorrupt): got %v, want %v", err, got, want)
			}
		})
	}
}

func TestExpiryNanosOrder(t *testing.T) {
	times := []time.Time{
		{},
		time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC), // before the int64 range: saturates
		time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Unix(-1, 999999999),
		time.Unix(0, 0),
		t0,
		t0.Add(1),
		t1,
		time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), // after the int64 range: saturates
	}
	for i := 1; i < len(times); i++ {
		a := string(appendExpiryKey(nil, times[i-1], nil))
		b := string(appendExpiryKey(nil, times[i], nil))
		if got, want := a <= b, true; got != want {
			t.Errorf("expiry key of %v <= that of %v: got %v, want %v", times[i-1], times[i], got, want)
		}
	}
	if got, want := expiryNanos(t0), uint64(t0.UnixNano()); got != want {
		t.Errorf("expiryNanos(%v): got %d, want %d", t0, got, want)
	}
}

func BenchmarkDecode(b *testing.B) {
	st := State{Status: Done, Partition: 3, Offset: 42, FirstSeen: t0, Expires: t1, ReceivedAt: t0}
	in := appendValue(nil, &st)
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, err := DecodeChangelog(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	st := State{Status: Done, Partition: 3, Offset: 42, FirstSeen: t0, Expires: t1, ReceivedAt: t0}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := st.MarshalBinary(); err != nil {
			b.Fatal(err)
		}
	}
}
