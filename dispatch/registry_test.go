package dispatch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/internal/kafkatest"
)

// TestGetWhileWatching checks that Get, served from a running Watch's
// snapshot, sees every write committed before it.
func TestGetWhileWatching(t *testing.T) {
	env := kafkatest.New(t, 3, 1<<20)
	r := dispatch.NewRegistry(env.Client(t), []kgo.Opt{kgo.SeedBrokers(env.Seeds...)}, env.Names, kafkatest.Logger(t))
	ctx, cancel := context.WithCancel(context.Background())
	loaded := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- r.Watch(ctx, func(map[string]dispatch.Subscription) {
			select {
			case loaded <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	})
	select {
	case <-loaded:
	case <-time.After(30 * time.Second):
		t.Fatal("Watch did not load")
	}
	s := &dispatch.Subscription{URL: "https://example.com/hook"}
	if err := r.Create(ctx, s, ""); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		want := fmt.Sprint("version ", i)
		if _, err := r.Update(ctx, s.ID, func(s *dispatch.Subscription) error { s.Description = want; return nil }); err != nil {
			t.Fatal(err)
		}
		got, err := r.Get(ctx, s.ID)
		if err != nil || got.Description != want {
			t.Fatalf("Get after update %d: got %q, %v, want %q", i, got.Description, err, want)
		}
	}
	if err := r.Delete(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(ctx, s.ID); err == nil {
		t.Error("Get after delete: got the subscription, want ErrNotFound")
	}
}
