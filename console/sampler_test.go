package console

import (
	"reflect"
	"testing"
	"time"

	"github.com/hookstream/hookstream/stats"
)

// TestSamplerPerMinute: the receiver's counts since it started become
// counts per minute, each minute's the difference from the minute
// before; minutes past the chart's are dropped, and samples kept bounded.
func TestSamplerPerMinute(t *testing.T) {
	var rejected, dups int64
	s := newSampler(func() map[string]stats.Answers {
		return map[string]stats.Answers{"shop": {Rejected: rejected, Duplicates: dups}}
	})
	start := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	s.take(start)
	rejected, dups = 3, 1
	s.take(start.Add(30 * time.Second)) // the same minute: replaces its sample
	s.take(start.Add(time.Minute))
	rejected = 5
	s.take(start.Add(3 * time.Minute))

	got, ok := s.series(start.Add(3 * time.Minute))
	if !ok {
		t.Fatal("series: not ok with a receiver")
	}
	want := make([]stats.Answers, chartMinutes)
	want[chartMinutes-4] = stats.Answers{Rejected: 3, Duplicates: 1} // minute 0, from the receiver's start
	want[chartMinutes-1] = stats.Answers{Rejected: 2}                // minute 3, since minute 1's last sample
	if !reflect.DeepEqual(got["shop"], want) {
		t.Errorf("series: got %+v, want %+v", got["shop"], want)
	}
	if got, _ := s.series(start.Add(time.Hour)); len(got) != 0 {
		t.Errorf("an hour later: got %+v, want nothing", got)
	}
	for i := range 100 {
		s.take(start.Add(time.Duration(10+i) * time.Minute))
	}
	if n := len(s.samples); n != chartMinutes+1 {
		t.Errorf("samples kept: got %d, want %d", n, chartMinutes+1)
	}
	if _, ok := newSampler(nil).series(start); ok {
		t.Error("series without a receiver: ok, want not")
	}
}
