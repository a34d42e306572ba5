package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/attempts"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/topics"
)

// subscriptionView is a subscription with its durable delivery totals.
type subscriptionView struct {
	ID string `json:"id"`
	attempts.Totals
}

// TestAttemptsAreDurable: a delivery that fails twice and then succeeds,
// and one that is dead-lettered, are told by the attempts API with every
// attempt and what followed it, and by the subscriptions' totals, the same
// after the dispatcher and the API are gone and a new process serves them.
func TestAttemptsAreDurable(t *testing.T) {
	env := kafkatest.New(t, 2, 1<<20)
	h := serveAPI(t, env, nil)
	bearer := "Bearer " + token
	var calls atomic.Int64
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer flaky.Close()
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "broken", http.StatusInternalServerError)
	}))
	defer dead.Close()
	var good, bad subscriptionView
	for _, s := range []struct {
		url string
		out *subscriptionView
	}{{flaky.URL, &good}, {dead.URL, &bad}} {
		if status := h.call(t, "POST", "/api/subscriptions", bearer, map[string]any{"url": s.url, "from": "earliest"}, s.out); status != 201 {
			t.Fatalf("create: got %d, want 201", status)
		}
	}
	stop := h.runDispatcher(t, []time.Duration{10 * time.Millisecond, 10 * time.Millisecond})
	e := &topics.Envelope{ID: "shop:42", Source: "shop", EventID: "42", Type: "order", ReceivedAt: time.Now(), ProcessedAt: time.Now(), Data: []byte(`{}`)}
	v, _ := e.Marshal()
	if err := h.cl.ProduceSync(context.Background(), &kgo.Record{Topic: string(env.Names.Events), Key: []byte(e.ID), Value: v}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	outcomes := func(h *apiHarness, sub string) []string {
		var got []attempts.Attempt
		if status := h.call(t, "GET", "/api/subscriptions/"+sub+"/attempts?event=shop:42", bearer, nil, &got); status != 200 {
			t.Fatalf("attempts: got %d", status)
		}
		var out []string
		for i := len(got) - 1; i >= 0; i-- { // oldest first
			out = append(out, fmt.Sprintf("%d %s %d", got[i].Attempt, got[i].Outcome, got[i].Status))
		}
		return out
	}
	wantGood := "[1 failed 503 1 retrying 503 2 failed 503 2 retrying 503 3 delivered 204]"
	wantBad := "[1 failed 500 1 retrying 500 2 failed 500 2 retrying 500 3 failed 500 3 dead_lettered 500]"
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if got := fmt.Sprint(outcomes(h, good.ID)); got != wantGood {
			return fmt.Errorf("attempts of the flaky subscription: got %s, want %s", got, wantGood)
		}
		if got := fmt.Sprint(outcomes(h, bad.ID)); got != wantBad {
			return fmt.Errorf("attempts of the broken subscription: got %s, want %s", got, wantBad)
		}
		return nil
	})
	stop()

	// A new process: nothing in memory.
	h2 := serveAPI(t, env, nil)
	if got := fmt.Sprint(outcomes(h2, good.ID)); got != wantGood {
		t.Errorf("after a restart, attempts of the flaky subscription: got %s, want %s", got, wantGood)
	}
	var failedOnly []attempts.Attempt
	if status := h2.call(t, "GET", "/api/subscriptions/"+bad.ID+"/attempts?status=dead_lettered", bearer, nil, &failedOnly); status != 200 || len(failedOnly) != 1 || failedOnly[0].Attempt != 3 {
		t.Errorf("status=dead_lettered: got %d %+v, want the one dead letter after attempt 3", status, failedOnly)
	}
	var none []attempts.Attempt
	if status := h2.call(t, "GET", "/api/subscriptions/"+good.ID+"/attempts?since="+time.Now().Add(time.Hour).Format(time.RFC3339), bearer, nil, &none); status != 200 || len(none) != 0 {
		t.Errorf("since an hour ahead: got %d %+v, want none", status, none)
	}
	var g, b subscriptionView
	h2.call(t, "GET", "/api/subscriptions/"+good.ID, bearer, nil, &g)
	h2.call(t, "GET", "/api/subscriptions/"+bad.ID, bearer, nil, &b)
	if g.Delivered != 1 || g.Failed != 2 || g.LastSuccessAt == nil || g.LastFailure == nil || g.LastFailure.Status != 503 {
		t.Errorf("flaky subscription after a restart: got %+v, want 1 delivered, 2 failed, a last success and the 503", g)
	}
	if b.Delivered != 0 || b.Failed != 3 || b.DeadLettered != 1 || b.LastSuccessAt != nil || b.LastFailure == nil || b.LastFailure.Error == "" {
		t.Errorf("broken subscription after a restart: got %+v, want 3 failed, 1 dead-lettered, the last error", b)
	}
	var st map[string]any
	if status := h2.call(t, "GET", "/api/stats", bearer, nil, &st); status != 200 || st["delivered"] != float64(1) || st["delivery_failed"] != float64(1) {
		t.Errorf("stats after a restart: got %d %v, want delivered 1 and delivery_failed 1", status, st)
	}
}
