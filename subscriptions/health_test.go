package subscriptions_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/attempts"
	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/webhook"
)

// publish writes n events of source github to the events topic, as the
// processor does.
func publish(t *testing.T, env *kafkatest.Env, cl *kgo.Client, n int) {
	t.Helper()
	for range n {
		id := strconv.FormatInt(time.Now().UnixNano(), 36)
		e := &topics.Envelope{ID: "github:" + id, Source: "github", EventID: id, Type: "push",
			ReceivedAt: time.Now().UTC(), ProcessedAt: time.Now().UTC(), Data: []byte(`{}`)}
		v, err := e.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		rec := &kgo.Record{Topic: string(env.Names.Events), Key: []byte(e.ID), Value: v, Headers: []kgo.RecordHeader{
			{Key: topics.HeaderSource, Value: []byte("github")},
			{Key: topics.HeaderEventID, Value: []byte(id)},
			{Key: topics.HeaderEventType, Value: []byte("push")},
		}}
		if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAPIShowsFailingSubscription: a subscription whose subscriber
// answers 401 to every attempt is "failing", reason "401 Unauthorized",
// in GET /api/subscriptions and /api/subscriptions/{id}, as the
// dispatcher of the instance asked tells it; once the subscriber takes a
// delivery it is "delivering" again.
func TestAPIShowsFailingSubscription(t *testing.T) {
	status := new(atomic.Int32)
	status.Store(http.StatusUnauthorized)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(int(status.Load())) }))
	t.Cleanup(receiver.Close)

	env := kafkatest.New(t, 1, 1<<20)
	cl := env.Client(t)
	c := env.ClusterOf(cl)
	r := subscriptions.NewRegistry(c, kafkatest.Logger(t))
	tally := attempts.NewTally(c, kafkatest.Logger(t))
	run(t, "attempts tally", tally.Run)
	d := dispatch.New(dispatch.Config{Client: webhook.Config{AllowPrivate: true, Timeout: 2 * time.Second},
		Schedule: []time.Duration{50 * time.Millisecond}, BreakerFailures: 1000, DisableAfter: time.Hour},
		topics.Cluster{Client: cl, Opts: []kgo.Opt{kgo.SeedBrokers(env.Seeds...)}, Names: env.Names}, r, kafkatest.Logger(t), prometheus.NewRegistry())
	run(t, "dispatcher", d.Run)
	s := admin.New(admin.Config{}, prometheus.NewRegistry(), kafkatest.Logger(t))
	s.AddCheck("dispatcher", d.Ready)
	subscriptions.New(r, tally, "").Mount(s)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)

	sub := &subscriptions.Subscription{URL: receiver.URL}
	if err := r.Create(context.Background(), sub, "earliest"); err != nil {
		t.Fatal(err)
	}
	publish(t, env, cl, subscriptions.FailingAfter)
	type view struct {
		ID     string               `json:"id"`
		Health subscriptions.Health `json:"health"`
	}
	healthIs := func(want subscriptions.Health) func() error {
		return func() error {
			var one view
			var list []view
			call(t, srv, "GET", "/api/subscriptions/"+sub.ID, nil, &one)
			call(t, srv, "GET", "/api/subscriptions", nil, &list)
			if len(list) != 1 || list[0].Health.State != want.State || list[0].Health.Reason != want.Reason {
				return fmt.Errorf("list: got %+v, want health %+v", list, want)
			}
			if one.Health.State != want.State || one.Health.Reason != want.Reason {
				return fmt.Errorf("get: got %+v, want %+v", one.Health, want)
			}
			return nil
		}
	}
	kafkatest.WaitFor(t, 30*time.Second, healthIs(subscriptions.Health{State: "failing", Reason: "401 Unauthorized"}))

	status.Store(http.StatusNoContent)
	publish(t, env, cl, 1)
	kafkatest.WaitFor(t, 30*time.Second, healthIs(subscriptions.Health{State: "delivering"}))
}
