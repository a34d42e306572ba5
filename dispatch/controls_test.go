package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/deadletter"
	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/signature"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/webhook"
)

// eventData writes one events record with data as its payload, as the
// processor would, and returns its id.
func (h *harness) eventData(t *testing.T, source, eventType, data string) string {
	t.Helper()
	id, rec := h.eventRecord(t, source, eventType, data)
	if err := h.cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return id
}

// eventRecord is the events record eventData writes, and its id.
func (h *harness) eventRecord(t *testing.T, source, eventType, data string) (string, *kgo.Record) {
	t.Helper()
	h.seq++
	id := strconv.Itoa(h.seq)
	e := &topics.Envelope{ID: source + ":" + id, Source: source, EventID: id, Type: eventType,
		ReceivedAt: time.Now().UTC(), ProcessedAt: time.Now().UTC(), Data: json.RawMessage(data)}
	v, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return e.ID, &kgo.Record{Topic: string(h.env.Names.Events), Key: []byte(e.ID), Value: v, Headers: []kgo.RecordHeader{
		{Key: topics.HeaderSource, Value: []byte(source)},
		{Key: topics.HeaderEventID, Value: []byte(id)},
		{Key: topics.HeaderEventType, Value: []byte(eventType)},
	}}
}

// caughtUp waits until sub's group has committed every events record
// written so far: each was delivered, handed on or filtered out.
func (h *harness) caughtUp(t *testing.T, sub string) {
	t.Helper()
	h.env.WaitCommitted(t, h.env.Names.SubscriptionGroup(sub), h.env.Names.Events)
}

// counter reads the counter name of one subscription from the first
// dispatcher's registry; 0 without a series.
func (h *harness) counter(t *testing.T, name, sub string) float64 {
	t.Helper()
	mfs, err := h.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "subscription" && l.GetValue() == sub {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// letters returns the delivery dead letters of sub, by event id.
func (h *harness) letters(t *testing.T, sub string) map[string]*topics.DeadLetter {
	t.Helper()
	out := make(map[string]*topics.DeadLetter)
	for _, r := range h.env.Records(t, h.env.Names.DeliveryDLQ) {
		l := topics.ParseDeadLetter(r)
		if _, id, ok := topics.SplitRetryKey(string(l.Key), sub); ok && l.Subscription == sub {
			out[id] = l
		}
	}
	return out
}

// attemptsOf returns the attempts the attempts topic holds for sub, by
// event id, in the order written.
func (h *harness) attemptsOf(t *testing.T, sub string) map[string][]*topics.Attempt {
	t.Helper()
	out := make(map[string][]*topics.Attempt)
	for _, r := range h.env.Records(t, h.env.Names.DeliveryAttempts) {
		a, err := topics.ParseAttempt(r)
		if err != nil {
			t.Fatalf("attempt record %s: %v", r.Key, err)
		}
		if a.Subscription == sub {
			out[a.EventID] = append(out[a.EventID], a)
		}
	}
	return out
}

// sink is a subscriber endpoint that keeps every request whole and
// verifies each signature with package signature.
type sink struct {
	t      *testing.T
	srv    *httptest.Server
	secret string

	mu  sync.Mutex
	got []request
	// respond picks the status of a request, given how often its
	// webhook-id came.
	respond func(id string, n int) int
}

type request struct {
	header http.Header
	body   []byte
}

func newSink(t *testing.T, respond func(id string, n int) int) *sink {
	s := &sink{t: t, respond: respond}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id := r.Header.Get("webhook-id")
		s.mu.Lock()
		n := 1
		for _, g := range s.got {
			if g.header.Get("webhook-id") == id {
				n++
			}
		}
		s.got = append(s.got, request{r.Header.Clone(), body})
		secret := s.secret
		s.mu.Unlock()
		key, err := signature.DecodeSecret(secret)
		if err == nil {
			_, err = signature.VerifyRequest(r.Header, [][]byte{key}, body, time.Now(), 5*time.Minute)
		}
		if err != nil {
			t.Errorf("delivery %s: signature does not verify: %v", id, err)
		}
		status := http.StatusNoContent
		if s.respond != nil {
			status = s.respond(id, n)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// subscribe creates sub with the sink's URL and keeps its secret.
func (s *sink) subscribe(t *testing.T, h *harness, sub subscriptions.Subscription) subscriptions.Subscription {
	t.Helper()
	sub.URL = s.srv.URL
	sub = h.subscribe(t, sub)
	s.mu.Lock()
	s.secret = sub.Secret
	s.mu.Unlock()
	return sub
}

// requests returns the requests received, by webhook-id.
func (s *sink) requests() map[string][]request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]request)
	for _, g := range s.got {
		id := g.header.Get("webhook-id")
		out[id] = append(out[id], g)
	}
	return out
}

func (s *sink) waitFor(t *testing.T, ids ...string) {
	t.Helper()
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		got := s.requests()
		for _, id := range ids {
			if len(got[id]) == 0 {
				return fmt.Errorf("%s not delivered (got %d ids)", id, len(got))
			}
		}
		return nil
	})
}

// TestFilteredSubscriptionReceivesExactlyMatching: the filter is tried
// after the globs, and the subscriber receives exactly the events that
// pass both; a subscription beside it without a filter receives all.
func TestFilteredSubscriptionReceivesExactlyMatching(t *testing.T) {
	h := newHarness(t, true)
	filtered, all := newSink(t, nil), newSink(t, nil)
	sub := filtered.subscribe(t, h, subscriptions.Subscription{EventTypes: []string{"pull_request"},
		Filter: `data.action == "opened" && data.number % 2 == 0`})
	other := all.subscribe(t, h, subscriptions.Subscription{})
	var want, every []string
	for i := range 12 {
		action := []string{"opened", "closed"}[i%3/2]
		id := h.eventData(t, "github", "pull_request", fmt.Sprintf(`{"action":%q,"number":%d}`, action, i))
		if action == "opened" && i%2 == 0 {
			want = append(want, id)
		}
		every = append(every, id, h.eventData(t, "github", "push", fmt.Sprintf(`{"action":"opened","number":%d}`, 2*i)))
	}
	h.caughtUp(t, sub.ID)
	h.caughtUp(t, other.ID)
	got := filtered.requests()
	if len(got) != len(want) {
		t.Errorf("filtered subscriber got %d events, want exactly %d: %v", len(got), len(want), want)
	}
	for _, id := range want {
		if len(got[id]) != 1 {
			t.Errorf("%s: delivered %d times, want once", id, len(got[id]))
		}
	}
	if n := len(all.requests()); n != len(every) {
		t.Errorf("subscriber without a filter got %d events, want %d", n, len(every))
	}
	if n := h.counter(t, "hookstream_delivery_filter_errors_total", sub.ID); n != 0 {
		t.Errorf("filter errors: got %v, want 0", n)
	}
}

// TestFilterErrorsAreCountedNoMatches: an event the filter fails on (a
// missing field, a type mismatch, a payload too costly to evaluate) is not
// delivered, counted in hookstream_delivery_filter_errors_total, and
// neither a failed attempt nor a dead letter; the worker goes on with
// the other events.
func TestFilterErrorsAreCountedNoMatches(t *testing.T) {
	h := newHarness(t, true)
	s := newSink(t, nil)
	sub := s.subscribe(t, h, subscriptions.Subscription{Filter: `data.items.exists(i, i == 2)`})
	bad := []string{
		h.eventData(t, "shop", "order", `{"n":1}`),                                        // no items
		h.eventData(t, "shop", "order", `{"items":"many"}`),                               // not a list
		h.eventData(t, "shop", "order", `{"items":[`+strings.Repeat(`1,`, 450_000)+`1]}`), // over the cost limit
	}
	var good []string
	for range 5 {
		good = append(good, h.eventData(t, "shop", "order", `{"items":[1,2,3]}`))
	}
	s.waitFor(t, good...)
	h.caughtUp(t, sub.ID)
	got := s.requests()
	for _, id := range bad {
		if len(got[id]) != 0 {
			t.Errorf("%s: delivered, want filtered out", id)
		}
	}
	if n := h.counter(t, "hookstream_delivery_filter_errors_total", sub.ID); n != float64(len(bad)) {
		t.Errorf("filter errors: got %v, want %d", n, len(bad))
	}
	if letters := h.letters(t, sub.ID); len(letters) != 0 {
		t.Errorf("dead letters: got %d, want none", len(letters))
	}
	for id, as := range h.attemptsOf(t, sub.ID) {
		if as[0].Outcome != topics.OutcomeDelivered {
			t.Errorf("%s: attempt %+v, want only deliveries", id, as[0])
		}
	}
}

// TestTransformedBodyIsSignedAndSent: a Slack-shaped transform's JSON is
// the body, verbatim, signed (the sink verifies every request with package
// signature); a subscription that batches sends {"events":[...]} of the
// transform's results; a retry renders the body again from the envelope
// its record carries.
func TestTransformedBodyIsSignedAndSent(t *testing.T) {
	h := newHarness(t, true)
	const slack = `{"text": "push to " + data.repository.full_name + " by " + data.pusher.name, "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "*" + type + "*"}}]}`
	single := newSink(t, func(_ string, n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable // the second try comes from the retry topic
		}
		return http.StatusOK
	})
	batched := newSink(t, nil)
	one := single.subscribe(t, h, subscriptions.Subscription{Transform: slack})
	batch := batched.subscribe(t, h, subscriptions.Subscription{Transform: slack, BatchMax: 10})
	id := h.eventData(t, "github", "push", `{"repository":{"full_name":"acme/api"},"pusher":{"name":"ada"}}`)
	const want = `{"blocks":[{"text":{"text":"*push*","type":"mrkdwn"},"type":"section"}],"text":"push to acme/api by ada"}`

	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if n := len(single.requests()[id]); n < 2 {
			return fmt.Errorf("%d tries", n)
		}
		return nil
	})
	for i, r := range single.requests()[id] {
		if string(r.body) != want {
			t.Errorf("try %d: body %s, want %s", i+1, r.body, want)
		}
	}
	for _, r := range h.env.Records(t, h.env.Names.DeliveryRetry) {
		if _, err := topics.ParseEnvelope(r.Value); err != nil {
			t.Errorf("retry record %s: holds %s, want the envelope", r.Key, r.Value)
		}
	}
	h.caughtUp(t, batch.ID)
	var bodies []string
	for _, rs := range batched.requests() {
		for _, r := range rs {
			bodies = append(bodies, string(r.body))
		}
	}
	if len(bodies) != 1 || bodies[0] != `{"events":[`+want+`]}` {
		t.Errorf("batch bodies: got %v, want one batch of the transform's result", bodies)
	}
	if n := h.counter(t, "hookstream_delivery_dlq_total", one.ID); n != 0 {
		t.Errorf("dead letters: %v", n)
	}
}

// TestFailingTransformDeadLettersAndRedrives: an event whose transform
// fails is dead-lettered for that subscription at stage transform with
// the CEL error, without an attempt and without touching its circuit;
// the events around it are delivered; once the transform is fixed, a
// redrive delivers it.
func TestFailingTransformDeadLettersAndRedrives(t *testing.T) {
	h := newHarnessWith(t, dispatch.Config{Client: webhook.Config{AllowPrivate: true}, BreakerFailures: 1})
	s := newSink(t, nil)
	sub := s.subscribe(t, h, subscriptions.Subscription{Transform: `{"text": "by " + data.sender.login}`})
	before := h.eventData(t, "github", "push", `{"sender":{"login":"ada"}}`)
	failing := h.eventData(t, "github", "push", `{"pusher":{"name":"bob"}}`)
	after := h.eventData(t, "github", "push", `{"sender":{"login":"cy"}}`)
	s.waitFor(t, before, after)
	var l *topics.DeadLetter
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if l = h.letters(t, sub.ID)[failing]; l == nil {
			return fmt.Errorf("no dead letter of %s", failing)
		}
		return nil
	})
	if l.Stage != topics.StageTransform || !strings.HasPrefix(l.Error, "transform: ") || !strings.Contains(l.Error, "sender") ||
		l.Attempts != 0 || l.LastStatus != 0 {
		t.Errorf("dead letter: stage %q error %q attempts %d last status %d; want stage transform, the CEL error, no attempt",
			l.Stage, l.Error, l.Attempts, l.LastStatus)
	}
	if env, err := topics.ParseEnvelope(l.Value); err != nil || env.ID != failing {
		t.Errorf("dead letter holds %s, want the envelope of %s", l.Value, failing)
	}
	if len(s.requests()[failing]) != 0 {
		t.Errorf("%s was sent", failing)
	}
	for _, a := range h.attemptsOf(t, sub.ID)[failing] {
		if a.Outcome != topics.OutcomeDeadLettered {
			t.Errorf("%s: attempt %+v, want none, only its dead letter", failing, a)
		}
	}
	if v := h.subGauge(t, "hookstream_delivery_circuit_open", sub.ID); v != 0 {
		t.Errorf("circuit open: %v, want closed", v)
	}

	if _, err := h.registry.Update(context.Background(), sub.ID, func(s *subscriptions.Subscription) error {
		s.Transform = `{"text": "by " + (has(data.sender) ? data.sender.login : data.pusher.name)}`
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	copied, _, err := deadletter.New(h.env.ClusterOf(h.cl)).Redrive(context.Background(),
		deadletter.Delivery, deadletter.Filter{Key: sub.ID + ":*"})
	if err != nil || copied != 1 {
		t.Fatalf("redrive: %d copied, %v", copied, err)
	}
	s.waitFor(t, failing)
	if got := string(s.requests()[failing][0].body); got != `{"text":"by bob"}` {
		t.Errorf("redriven body: got %s, want the fixed transform's", got)
	}
}

// TestStaticHeadersOnEveryAttempt: a subscription's headers go with
// every attempt, its retries' too, beside hookstream's own.
func TestStaticHeadersOnEveryAttempt(t *testing.T) {
	h := newHarness(t, true)
	s := newSink(t, func(_ string, n int) int {
		if n < 3 {
			return http.StatusBadGateway
		}
		return http.StatusOK
	})
	s.subscribe(t, h, subscriptions.Subscription{Headers: map[string]string{"Authorization": "Bearer abc", "X-Team": "payments"}})
	id := h.eventData(t, "shop", "order", `{}`)
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if n := len(s.requests()[id]); n < 3 {
			return fmt.Errorf("%d tries", n)
		}
		return nil
	})
	for i, r := range s.requests()[id] {
		if r.header.Get("Authorization") != "Bearer abc" || r.header.Get("X-Team") != "payments" ||
			r.header.Get("Content-Type") != "application/json" || r.header.Get("User-Agent") != "hookstream/test" {
			t.Errorf("try %d: headers %v", i+1, r.header)
		}
	}
}

// TestSubscriptionScheduleAndTimeout: a subscription's own schedule sets
// how many attempts its deliveries get, retried through the retry topic
// or in place (ordered), in place of the dispatcher's; its own timeout
// bounds each attempt, longer or shorter than the dispatcher's (2s here).
func TestSubscriptionScheduleAndTimeout(t *testing.T) {
	h := newHarness(t, true)
	failing := func(string, int) int { return http.StatusInternalServerError }
	unordered, ordered := newSink(t, failing), newSink(t, failing)
	short := newSink(t, nil)
	slow := newSink(t, nil)
	var hang sync.WaitGroup // the slow answers: ended by the test's cleanup at the latest
	release := make(chan struct{})
	t.Cleanup(func() { close(release); hang.Wait() })
	delayed := func(d time.Duration) func(string, int) int {
		return func(string, int) int {
			hang.Add(1)
			defer hang.Done()
			select {
			case <-time.After(d): // the behaviour under test: a slow subscriber
			case <-release:
			}
			return http.StatusOK
		}
	}
	short.respond, slow.respond = delayed(time.Second), delayed(3*time.Second)
	schedule := []subscriptions.Duration{subscriptions.Duration(10 * time.Millisecond), subscriptions.Duration(20 * time.Millisecond)}
	u := unordered.subscribe(t, h, subscriptions.Subscription{Schedule: schedule})
	o := ordered.subscribe(t, h, subscriptions.Subscription{Schedule: schedule[:1], Ordered: true})
	sh := short.subscribe(t, h, subscriptions.Subscription{Timeout: subscriptions.Duration(100 * time.Millisecond), Schedule: schedule[:1]})
	sl := slow.subscribe(t, h, subscriptions.Subscription{Timeout: subscriptions.Duration(10 * time.Second)})
	id := h.eventData(t, "shop", "order", `{}`)

	for _, tc := range []struct {
		sub      subscriptions.Subscription
		attempts int
		err      string
	}{
		{u, 1 + len(schedule), "status 500"},
		{o, 2, "status 500"},
		{sh, 2, "timeout after 100ms"},
	} {
		kafkatest.WaitFor(t, 30*time.Second, func() error {
			l := h.letters(t, tc.sub.ID)[id]
			if l == nil {
				return fmt.Errorf("subscription %s: no dead letter", tc.sub.ID)
			}
			if l.Attempts != tc.attempts || !strings.Contains(l.Error, tc.err) {
				t.Errorf("subscription %s: dead letter after %d attempts (%s), want %d (%s)", tc.sub.ID, l.Attempts, l.Error, tc.attempts, tc.err)
			}
			return nil
		})
	}
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		as := h.attemptsOf(t, sl.ID)[id]
		if len(as) == 0 {
			return fmt.Errorf("no attempt yet")
		}
		if as[0].N != 1 || as[0].Outcome != topics.OutcomeDelivered {
			t.Errorf("slow subscriber: first attempt %+v, want delivered at once within its 10s timeout", as[0])
		}
		return nil
	})
}
