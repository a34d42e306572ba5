package subscriptions_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
)

// run runs f until the test ends, then cancels its context and checks
// that it returned nil.
func run(t *testing.T, name string, f func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
}

// TestGetWhileWatching checks that Get, served from a running Watch's
// snapshot, sees every write committed before it.
func TestGetWhileWatching(t *testing.T) {
	env := kafkatest.New(t, 3, 1<<20)
	r := subscriptions.NewRegistry(env.ClusterOf(env.Client(t)), kafkatest.Logger(t))
	ctx := context.Background()
	loaded := make(chan struct{}, 1)
	run(t, "Watch", func(ctx context.Context) error {
		return r.Watch(ctx, func(map[string]subscriptions.Subscription) {
			select {
			case loaded <- struct{}{}:
			default:
			}
		})
	})
	select {
	case <-loaded:
	case <-time.After(30 * time.Second):
		t.Fatal("Watch did not load")
	}
	s := &subscriptions.Subscription{URL: "https://example.com/hook"}
	if err := r.Create(ctx, s, ""); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		want := fmt.Sprint("version ", i)
		if _, err := r.Update(ctx, s.ID, func(s *subscriptions.Subscription) error { s.Description = want; return nil }); err != nil {
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

// TestCreateRightAfterTopicsCreate: on a fresh cluster, brokers learn of
// new topics a moment after they are created, and until then answer
// UNKNOWN_TOPIC_OR_PARTITION. A subscription created in that moment (as
// `hookstream topics create && hookstream subscriptions add` does) waits
// for the topics rather than failing.
func TestCreateRightAfterTopicsCreate(t *testing.T) {
	env := kafkatest.New(t, 3, 1<<20)
	if env.Cluster == nil {
		t.Skip("needs the in-process broker to answer as a broker that does not know the topics yet")
	}
	for _, topic := range []string{string(env.Names.Subscriptions), string(env.Names.Events)} {
		env.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets, kmsg.Metadata}, Topic: topic, Err: kerr.UnknownTopicOrPartition, Count: 3})
	}
	r := subscriptions.NewRegistry(env.ClusterOf(env.Client(t)), kafkatest.Logger(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := &subscriptions.Subscription{URL: "https://example.com/hook"}
	if err := r.Create(ctx, s, "earliest"); err != nil {
		t.Fatalf("create: %v", err)
	}
	if got, err := r.Get(ctx, s.ID); err != nil || got.URL != s.URL {
		t.Fatalf("get: got %+v, %v, want the subscription", got, err)
	}
}

// TestRegistryUpdatesNeverLost: concurrent read-modify-writes of one
// subscription all land, none overwriting another.
func TestRegistryUpdatesNeverLost(t *testing.T) {
	env := kafkatest.New(t, 1, 1<<20)
	registry := subscriptions.NewRegistry(env.ClusterOf(env.Client(t)), kafkatest.Logger(t))
	ctx := context.Background()
	sub := subscriptions.Subscription{URL: "https://example.com/hook"}
	if err := registry.Create(ctx, &sub, ""); err != nil {
		t.Fatal(err)
	}
	const writers = 6
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			_, err := registry.Update(ctx, sub.ID, func(s *subscriptions.Subscription) error {
				s.Sources = append(s.Sources, "s"+strconv.Itoa(i))
				return nil
			})
			if err != nil {
				t.Errorf("writer %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	got, err := registry.Get(ctx, sub.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Sources) != writers {
		t.Errorf("sources after %d concurrent updates: got %v, want all %d", writers, got.Sources, writers)
	}
	if err := registry.Delete(ctx, sub.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := registry.Update(ctx, sub.ID, func(*subscriptions.Subscription) error { return nil }); !errors.Is(err, subscriptions.ErrNotFound) {
		t.Errorf("update of a deleted subscription: got %v, want ErrNotFound", err)
	}
}

// TestStoredExpressionRecompiledOnlyWhenChanged: a stored filter that no
// longer compiles (written by another version, or straight to the topic)
// does not block changes that leave it alone, such as a dispatcher
// disabling the subscription; a change to another filter that does not
// compile is refused.
func TestStoredExpressionRecompiledOnlyWhenChanged(t *testing.T) {
	env := kafkatest.New(t, 1, 1<<20)
	r := subscriptions.NewRegistry(env.ClusterOf(env.Client(t)), kafkatest.Logger(t))
	ctx := context.Background()
	s := &subscriptions.Subscription{URL: "https://example.com/hook", Filter: `source == "github"`}
	if err := r.Create(ctx, s, ""); err != nil {
		t.Fatal(err)
	}
	old := *s
	old.Filter = `source =~ "github"`
	v, _ := json.Marshal(old)
	if err := env.Client(t).ProduceSync(ctx, &kgo.Record{Topic: string(env.Names.Subscriptions), Key: []byte(s.ID), Value: v}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	got, err := r.Update(ctx, s.ID, func(s *subscriptions.Subscription) error { s.Enabled = false; return nil })
	if err != nil || got.Enabled || got.Filter != old.Filter {
		t.Errorf("disable with a stored filter that does not compile: got %+v, %v; want it disabled, the filter kept", got, err)
	}
	_, err = r.Update(ctx, s.ID, func(s *subscriptions.Subscription) error { s.Filter = `data.x ==`; return nil })
	if !errors.Is(err, subscriptions.ErrInvalid) || !strings.Contains(err.Error(), "invalid filter: line 1, column") {
		t.Errorf("change to a filter that does not compile: got %v, want invalid filter", err)
	}
}

// TestTopicSubscriptionTopics: a topic subscription's topic is created as
// the events topic is, and a topic of hookstream's own, Kafka's internal
// ones, or another subscription's is refused at create and update.
func TestTopicSubscriptionTopics(t *testing.T) {
	env := kafkatest.New(t, 3, 1<<20)
	cl := env.Client(t)
	r := subscriptions.NewRegistry(env.ClusterOf(cl), kafkatest.Logger(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	target := env.Names.Prefix + "-orders"
	s := &subscriptions.Subscription{Topic: target, Filter: `type == "order"`}
	if err := r.Create(ctx, s, ""); err != nil {
		t.Fatalf("create: %v", err)
	}
	if s.Secret != "" || s.Kind() != subscriptions.KindTopic {
		t.Errorf("created %+v: got kind %s, secret %q; want a topic subscription without a secret", s, s.Kind(), s.Secret)
	}
	adm := env.Admin(t)
	listed, err := adm.ListTopics(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(listed[target].Partitions); got != 3 {
		t.Errorf("topic %s: got %d partitions, want the events topic's 3", target, got)
	}
	configs, err := adm.DescribeTopicConfigs(ctx, target, string(env.Names.Events))
	if err != nil {
		t.Fatal(err)
	}
	value := func(topic, key string) string {
		rc, err := configs.On(topic, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range rc.Configs {
			if c.Key == key && c.Value != nil {
				return *c.Value
			}
		}
		return ""
	}
	for _, key := range []string{"retention.ms", "max.message.bytes"} {
		if got, want := value(target, key), value(string(env.Names.Events), key); got != want {
			t.Errorf("topic %s: got %s %s, want the events topic's %s", target, key, got, want)
		}
	}

	for _, name := range []string{string(env.Names.Events), env.Names.Prefix + ".mine", strings.ReplaceAll(env.Names.Prefix, ".", "_") + "_mine",
		"__consumer_offsets", "__transaction_state", "__x", target} {
		err := r.Create(ctx, &subscriptions.Subscription{Topic: name}, "")
		if !errors.Is(err, subscriptions.ErrInvalid) {
			t.Errorf("create with topic %s: got %v, want ErrInvalid", name, err)
		}
	}
	other := &subscriptions.Subscription{Topic: env.Names.Prefix + "-other"}
	if err := r.Create(ctx, other, ""); err != nil {
		t.Fatalf("create: %v", err)
	}
	for _, name := range []string{target, "__consumer_offsets", string(env.Names.DLQ)} {
		_, err := r.Update(ctx, other.ID, func(s *subscriptions.Subscription) error { s.Topic = name; return nil })
		if !errors.Is(err, subscriptions.ErrInvalid) {
			t.Errorf("update to topic %s: got %v, want ErrInvalid", name, err)
		}
	}
	subs, err := r.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(subs) != 2 || subs[other.ID].Topic != env.Names.Prefix+"-other" {
		t.Errorf("got subscriptions %v, want the two created, unchanged", subs)
	}
}
