package backoff

import (
	"context"
	"testing"
	"time"
)

func TestWaitDoublesUpToTheCap(t *testing.T) {
	b := New(time.Millisecond, 3*time.Millisecond)
	var got []time.Duration
	for range 4 {
		got = append(got, b.Next())
		if !b.Wait(context.Background()) {
			t.Fatal("Wait: got false, want true with a live context")
		}
	}
	want := []time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond, 3 * time.Millisecond}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("wait %d: got %v, want %v", i, got[i], want[i])
		}
	}
}

func TestWaitEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := New(time.Hour, time.Hour)
	if b.Wait(ctx) {
		t.Error("Wait: got true, want false once the context ended")
	}
}

func TestResetStartsOver(t *testing.T) {
	b := New(time.Millisecond, time.Second)
	for range 3 {
		b.Wait(context.Background())
	}
	b.Reset()
	if got := b.Next(); got != time.Millisecond {
		t.Errorf("Next after Reset: got %v, want the initial 1ms", got)
	}
}
