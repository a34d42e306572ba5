package statestore

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
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

func TestStateJSONRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		name string
		st   State
		json string // expected encoding; empty: not checked
	}{
		{
			name: "canonical",
			st:   State{Status: Done, Partition: 3, Offset: 42, FirstSeen: t0, Expires: t1},
			json: `{"status":"done","partition":3,"offset":42,"first_seen":"2026-11-21T10:00:00.123456789Z","expires":"2026-11-28T10:00:00.123456789Z"}`,
		},
		{
			name: "failed, whole seconds",
			st:   State{Status: Failed, Partition: 0, Offset: 0, FirstSeen: t0.Truncate(time.Second), Expires: t1.Truncate(time.Second)},
			json: `{"status":"failed","partition":0,"offset":0,"first_seen":"2026-11-21T10:00:00Z","expires":"2026-11-28T10:00:00Z"}`,
		},
		{
			name: "replayed",
			st:   State{Status: Done, Partition: 3, Offset: 42, FirstSeen: t0, Expires: t1, Replays: 2},
			json: `{"status":"done","partition":3,"offset":42,"first_seen":"2026-11-21T10:00:00.123456789Z","expires":"2026-11-28T10:00:00.123456789Z","replays":2}`,
		},
		{
			name: "zero times",
			st:   State{Status: Done, Partition: 1, Offset: 7},
			json: `{"status":"done","partition":1,"offset":7,"first_seen":"0001-01-01T00:00:00Z","expires":"0001-01-01T00:00:00Z"}`,
		},
		{
			name: "extremes",
			st: State{Status: Done, Partition: math.MaxInt32, Offset: math.MaxInt64, Replays: math.MaxUint32,
				FirstSeen: time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), Expires: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)},
		},
		{
			name: "negatives",
			st:   State{Status: Failed, Partition: math.MinInt32, Offset: math.MinInt64, FirstSeen: t0, Expires: t1},
		},
		{
			name: "local time and monotonic clock",
			st:   State{Status: Done, FirstSeen: time.Now().In(time.FixedZone("X", 3600)), Expires: time.Now()},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.st)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			if tt.json != "" && string(b) != tt.json {
				t.Errorf("Marshal: got %s, want %s", b, tt.json)
			}
			if _, ok := parseCanonical(b); !ok {
				t.Errorf("parseCanonical(%s): got false, want true", b)
			}
			var got State
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if !sameState(got, tt.st) {
				t.Errorf("Unmarshal: got %+v, want %+v", got, tt.st)
			}
			// The slow path agrees with the fast one.
			slow, err := parseAny(b)
			if err != nil {
				t.Fatalf("parseAny: %v", err)
			}
			if !sameState(slow, tt.st) {
				t.Errorf("parseAny: got %+v, want %+v", slow, tt.st)
			}
			// So does the stored binary form.
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

func TestStateUnmarshalFallback(t *testing.T) {
	want := State{Status: Done, Partition: 3, Offset: 42, FirstSeen: t0, Expires: t1}
	for _, tt := range []struct {
		name string
		json string
		want State
	}{
		{"field order", `{"offset":42,"expires":"2026-11-28T10:00:00.123456789Z","partition":3,"first_seen":"2026-11-21T10:00:00.123456789Z","status":"done"}`, want},
		{"white space", "{ \"status\" : \"done\",\n\t\"partition\": 3, \"offset\": 42, \"first_seen\": \"2026-11-21T10:00:00.123456789Z\", \"expires\": \"2026-11-28T10:00:00.123456789Z\" }", want},
		{"escapes", `{"status":"d\u006fne","partition":3,"offset":42,"first_seen":"2026-11-21T10:00:00.123456789Z","expires":"2026-11-28T10:00:00.123456789Z"}`, want},
		{"unknown field", `{"status":"done","partition":3,"offset":42,"first_seen":"2026-11-21T10:00:00.123456789Z","expires":"2026-11-28T10:00:00.123456789Z","v":2}`, want},
		{"time zone offset", `{"status":"done","partition":3,"offset":42,"first_seen":"2026-11-21T12:00:00.123456789+02:00","expires":"2026-11-28T10:00:00.123456789Z"}`, want},
		{"minus zero", `{"status":"done","partition":-0,"offset":42,"first_seen":"2026-11-21T10:00:00.123456789Z","expires":"2026-11-28T10:00:00.123456789Z"}`,
			State{Status: Done, Offset: 42, FirstSeen: t0, Expires: t1}},
		{"replays first", `{"replays":4,"status":"done","partition":3,"offset":42,"first_seen":"2026-11-21T10:00:00.123456789Z","expires":"2026-11-28T10:00:00.123456789Z"}`,
			State{Status: Done, Partition: 3, Offset: 42, FirstSeen: t0, Expires: t1, Replays: 4}},
		{"missing fields", `{"status":"failed"}`, State{Status: Failed, FirstSeen: time.Time{}, Expires: time.Time{}}},
		{"short fraction", `{"status":"done","partition":3,"offset":42,"first_seen":"2026-11-21T10:00:00.5Z","expires":"2026-11-28T10:00:00.123456789Z"}`,
			State{Status: Done, Partition: 3, Offset: 42, FirstSeen: t0.Truncate(time.Second).Add(500 * time.Millisecond), Expires: t1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got State
			if err := got.UnmarshalJSON([]byte(tt.json)); err != nil {
				t.Fatalf("UnmarshalJSON: %v", err)
			}
			if !sameState(got, tt.want) {
				t.Errorf("UnmarshalJSON: got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestStateUnmarshalErrors(t *testing.T) {
	const (
		times = `"first_seen":"2026-11-21T10:00:00Z","expires":"2026-11-28T10:00:00Z"`
	)
	for _, tt := range []struct {
		name, json string
	}{
		{"empty", ``},
		{"null", `null`},
		{"not an object", `[1]`},
		{"truncated", `{"status":"done","partition":3,"offset":42,"first_seen":"2026-11-21T10:00:00Z","expires":"2026-11-28T10:00:00Z"`},
		{"trailing data", `{"status":"done","partition":3,"offset":42,` + times + `}x`},
		{"missing status", `{"partition":3,"offset":42,` + times + `}`},
		{"unknown status", `{"status":"pending","partition":3,"offset":42,` + times + `}`},
		{"numeric status", `{"status":1,"partition":3,"offset":42,` + times + `}`},
		{"partition overflow", `{"status":"done","partition":2147483648,"offset":42,` + times + `}`},
		{"offset overflow", `{"status":"done","partition":3,"offset":9223372036854775808,` + times + `}`},
		{"fractional offset", `{"status":"done","partition":3,"offset":4.2,` + times + `}`},
		{"leading zero", `{"status":"done","partition":03,"offset":42,` + times + `}`},
		{"bad month", `{"status":"done","partition":3,"offset":42,"first_seen":"2026-13-21T10:00:00Z","expires":"2026-11-28T10:00:00Z"}`},
		{"bad day", `{"status":"done","partition":3,"offset":42,"first_seen":"2026-02-29T10:00:00Z","expires":"2026-11-28T10:00:00Z"}`},
		{"bad hour", `{"status":"done","partition":3,"offset":42,"first_seen":"2026-11-21T24:00:00Z","expires":"2026-11-28T10:00:00Z"}`},
		{"no zone", `{"status":"done","partition":3,"offset":42,"first_seen":"2026-11-21T10:00:00","expires":"2026-11-28T10:00:00Z"}`},
		{"time as number", `{"status":"done","partition":3,"offset":42,"first_seen":0,"expires":"2026-11-28T10:00:00Z"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var st State
			err := st.UnmarshalJSON([]byte(tt.json))
			if err == nil {
				t.Fatalf("UnmarshalJSON(%s): got %+v, want an error", tt.json, st)
			}
			if got, want := err.Error(), "statestore: decode state: "; !strings.HasPrefix(got, want) {
				t.Errorf("error: got %q, want prefix %q", got, want)
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
		{"year 10000", State{Status: Done, FirstSeen: t0, Expires: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}},
		{"negative year", State{Status: Done, FirstSeen: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), Expires: t1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if b, err := tt.st.MarshalJSON(); err == nil {
				t.Errorf("MarshalJSON: got %s, want an error", b)
			}
		})
	}
}

func TestStatusText(t *testing.T) {
	for _, tt := range []struct {
		s    Status
		text string
	}{
		{Done, "done"},
		{Failed, "failed"},
	} {
		t.Run(tt.text, func(t *testing.T) {
			b, err := tt.s.MarshalText()
			if err != nil {
				t.Fatalf("MarshalText: %v", err)
			}
			if got := string(b); got != tt.text {
				t.Errorf("MarshalText: got %q, want %q", got, tt.text)
			}
			var got Status
			if err := got.UnmarshalText(b); err != nil {
				t.Fatalf("UnmarshalText: %v", err)
			}
			if got != tt.s {
				t.Errorf("UnmarshalText: got %v, want %v", got, tt.s)
			}
		})
	}
	if got, want := Status(9).String(), "Status(9)"; got != want {
		t.Errorf("String: got %q, want %q", got, want)
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
		{"version 1 of version 2's length", append([]byte{1}, good[1:]...)},
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

// TestDecodeValueVersion1: a store written before states counted replays
// reads as is, with no replays.
func TestDecodeValueVersion1(t *testing.T) {
	want := State{Status: Done, Partition: 3, Offset: 42, FirstSeen: t0, Expires: t1}
	v2 := appendValue(nil, &want)
	v1 := append([]byte{1}, v2[1:38]...)
	got, err := decodeValue(v1)
	if err != nil {
		t.Fatalf("decodeValue: %v", err)
	}
	if !sameState(got, want) {
		t.Errorf("decodeValue: got %+v, want %+v", got, want)
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

// FuzzState decodes arbitrary bytes as a changelog value. Invariants: decoding
// never panics; a decoded state has a known status and UTC times; the fast
// path, when it accepts the input, agrees with encoding/json; a decoded state
// that can be encoded (years 0 to 9999) encodes to the canonical form, which
// the fast path accepts and decodes to the same state (decode of encode is
// identity); and the stored binary form round-trips it too.
func FuzzState(f *testing.F) {
	for _, s := range []string{
		`{"status":"done","partition":3,"offset":42,"first_seen":"2026-11-21T10:00:00.123456789Z","expires":"2026-11-28T10:00:00.123456789Z"}`,
		`{"status":"failed","partition":0,"offset":0,"first_seen":"0001-01-01T00:00:00Z","expires":"0001-01-01T00:00:00Z"}`,
		`{"expires":"2026-11-28T10:00:00+01:00","status":"done","partition":-1,"offset":-0}`,
		`{"status":"done","partition":2147483647,"offset":-9223372036854775808,"first_seen":"2000-02-29T23:59:59.5Z","expires":"9999-12-31T23:59:59.999999999Z"}`,
		`{"status":"done","partition":3,"offset":42,"first_seen":"2026-11-21T10:00:00Z","expires":"2026-11-28T10:00:00Z","replays":7}`,
		`{"status":"done","replays":-1}`,
		`{"status":"d\u006fne"}`,
		`null`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var st State
		if err := st.UnmarshalJSON(b); err != nil {
			return
		}
		if !st.Status.valid() || st.FirstSeen.Location() != time.UTC || st.Expires.Location() != time.UTC {
			t.Fatalf("UnmarshalJSON(%q): invalid state %+v", b, st)
		}
		if fast, ok := parseCanonical(b); ok {
			slow, err := parseAny(b)
			if err != nil {
				t.Fatalf("parseCanonical accepted %q, encoding/json did not: %v", b, err)
			}
			if !sameState(fast, slow) {
				t.Fatalf("decoding %q: fast %+v, encoding/json %+v", b, fast, slow)
			}
		}
		stored, err := decodeValue(appendValue(nil, &st))
		if err != nil || !sameState(stored, st) {
			t.Fatalf("binary round trip of %+v: got %+v, %v", st, stored, err)
		}
		enc, err := st.MarshalJSON()
		if err != nil {
			if y1, y2 := st.FirstSeen.Year(), st.Expires.Year(); y1 >= 0 && y1 <= 9999 && y2 >= 0 && y2 <= 9999 {
				t.Fatalf("MarshalJSON(%+v): %v", st, err)
			}
			return
		}
		again, ok := parseCanonical(enc)
		if !ok {
			t.Fatalf("parseCanonical(%s): not canonical", enc)
		}
		if !sameState(again, st) {
			t.Fatalf("decode of encode: got %+v, want %+v", again, st)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	for _, bb := range []struct {
		name string
		json string
	}{
		{"canonical", `{"status":"done","partition":3,"offset":42,"first_seen":"2026-11-21T10:00:00.123456789Z","expires":"2026-11-28T10:00:00.123456789Z"}`},
		{"fallback", `{"offset":42,"status":"done","partition":3,"first_seen":"2026-11-21T10:00:00.123456789Z","expires":"2026-11-28T10:00:00.123456789Z"}`},
	} {
		b.Run(bb.name, func(b *testing.B) {
			in := []byte(bb.json)
			b.ReportAllocs()
			b.SetBytes(int64(len(in)))
			var st State
			for b.Loop() {
				if err := st.UnmarshalJSON(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEncode(b *testing.B) {
	st := State{Status: Done, Partition: 3, Offset: 42, FirstSeen: t0, Expires: t1}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := st.MarshalJSON(); err != nil {
			b.Fatal(err)
		}
	}
}
