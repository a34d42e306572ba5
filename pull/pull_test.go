package pull_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/internal/otlptest"
	"github.com/hookstream/hookstream/pull"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// harness is a broker, a registry, a pull server behind an HTTP
// listener, and a producer of events as the processor writes them.
type harness struct {
	env      *kafkatest.Env
	cl       *kgo.Client
	registry *subscriptions.Registry
	srv      *httptest.Server
	metrics  *prometheus.Registry
	mu       sync.Mutex
	seq      int
	// sendBuffer, when set, is the send buffer of the listener's
	// connections.
	sendBuffer int
}

func newHarness(t *testing.T, cfg pull.Config) *harness {
	t.Helper()
	return newHarnessOn(t, kafkatest.New(t, 3, 1<<20), cfg)
}

// newHarnessOn is newHarness on env, with opts applied before the server
// starts.
func newHarnessOn(t *testing.T, env *kafkatest.Env, cfg pull.Config, opts ...func(*harness)) *harness {
	t.Helper()
	cl := env.Client(t)
	h := &harness{env: env, cl: cl}
	for _, o := range opts {
		o(h)
	}
	h.registry = subscriptions.NewRegistry(env.ClusterOf(cl), kafkatest.Logger(t))
	h.start(t, cfg)
	return h
}

// start starts a pull server (another, or again after a stop).
func (h *harness) start(t *testing.T, cfg pull.Config) func() {
	t.Helper()
	cfg.Names = h.env.Names
	h.metrics = prometheus.NewRegistry()
	s := pull.New(cfg, h.env.Client(t), h.registry, kafkatest.Logger(t), h.metrics)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	e := echo.New()
	e.GET(pull.Path, s.Events)
	srv := httptest.NewUnstartedServer(e)
	if h.sendBuffer > 0 {
		srv.Listener = sendBuffers{srv.Listener, h.sendBuffer}
	}
	srv.Start()
	h.srv = srv
	var once sync.Once
	stop := func() {
		once.Do(func() {
			srv.Close()
			cancel()
			if err := <-done; err != nil {
				t.Errorf("pull Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// event writes one events record as the processor does, in a transaction
// of its own, and returns its key.
func (h *harness) event(t *testing.T, tx *kgo.Client, source, eventType string) string {
	t.Helper()
	h.mu.Lock()
	h.seq++
	id := strconv.Itoa(h.seq)
	h.mu.Unlock()
	rec := eventRecord(t, h.env.Names, source, id, eventType, fmt.Sprintf(`{"seq":%s}`, id))
	if tx == nil {
		if err := h.cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return string(rec.Key)
	}
	produceTx(t, tx, kgo.TryCommit, rec)
	return string(rec.Key)
}

func eventRecord(t *testing.T, names topics.Names, source, id, eventType, data string) *kgo.Record {
	t.Helper()
	e := &topics.Envelope{ID: source + ":" + id, Source: source, EventID: id, Type: eventType,
		ReceivedAt: time.Now().UTC(), ProcessedAt: time.Now().UTC(), Data: []byte(data)}
	v, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: string(names.Events), Key: []byte(e.ID), Value: v, Headers: []kgo.RecordHeader{
		{Key: topics.HeaderSource, Value: []byte(source)},
		{Key: topics.HeaderEventID, Value: []byte(id)},
		{Key: topics.HeaderEventType, Value: []byte(eventType)},
	}}
}

// transactional returns a transactional producer.
func (h *harness) transactional(t *testing.T) *kgo.Client {
	t.Helper()
	return h.env.Client(t, kgo.TransactionalID(h.env.Names.Prefix+"-test-tx"))
}

func produceTx(t *testing.T, tx *kgo.Client, end kgo.TransactionEndTry, recs ...*kgo.Record) {
	t.Helper()
	ctx := context.Background()
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tx.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := tx.EndTransaction(ctx, end); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) subscribe(t *testing.T, s subscriptions.Subscription) subscriptions.Subscription {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.registry.Create(ctx, &s, "earliest"); err != nil {
		t.Fatalf("create subscription: %v", err)
	}
	return s
}

// answer is a pull answer as a consumer reads it.
type answer struct {
	status        int
	Events        []json.RawMessage   `json:"events"`
	TraceContexts []map[string]string `json:"trace_contexts"`
	Cursor        string              `json:"cursor"`
	Errors        []answerError       `json:"errors"`
	Replayed      bool                `json:"replayed"`
	Error         string              `json:"error"`
	header        http.Header
}

type answerError struct {
	ID           string            `json:"id"`
	Partition    int32             `json:"partition"`
	Offset       int64             `json:"offset"`
	Error        string            `json:"error"`
	TraceContext map[string]string `json:"trace_context"`
}

// ids are the envelope ids of the answer's events.
func (a answer) ids(t *testing.T) []string {
	t.Helper()
	var ids []string
	for _, e := range a.Events {
		var env struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(e, &env); err != nil {
			t.Fatalf("event %s: %v", e, err)
		}
		ids = append(ids, env.ID)
	}
	return ids
}

// pull asks for sub's events with token; query holds cursor, limit, wait.
func (h *harness) pull(t *testing.T, sub, token string, query url.Values) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, h.srv.URL+"/subscriptions/"+sub+"/events?"+query.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{status: resp.StatusCode, header: resp.Header}
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("answer %d %s: %v", resp.StatusCode, body, err)
	}
	return a
}

func cursorQuery(cursor string, limit int) url.Values {
	q := url.Values{}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return q
}

// partitionOf is the events partition of an event key.
func (h *harness) partitionOf(key string) int32 { return topics.PartitionOf([]byte(key), 3) }

// checkOrder checks that got holds each of want exactly once, in want's
// order within each partition.
func (h *harness) checkOrder(t *testing.T, got, want []string) {
	t.Helper()
	byPart := func(ids []string) map[int32][]string {
		out := make(map[int32][]string)
		for _, id := range ids {
			p := h.partitionOf(id)
			out[p] = append(out[p], id)
		}
		return out
	}
	g, w := byPart(got), byPart(want)
	for p := range int32(3) {
		if !slices.Equal(g[p], w[p]) {
			t.Errorf("partition %d: got %v, want %v", p, g[p], w[p])
		}
	}
}

// TestLostAnswersLoseNothing: a consumer that loses every other answer
// and asks again with the same cursor receives every event once, in
// order per partition, with events written while it pulls and an aborted
// transaction among them (read_committed: never served).
func TestLostAnswersLoseNothing(t *testing.T) {
	h := newHarness(t, pull.Config{})
	sub := h.subscribe(t, subscriptions.Subscription{Pull: true})
	tx := h.transactional(t)
	var want []string
	for range 20 {
		want = append(want, h.event(t, tx, "shop", "order"))
	}
	produceTx(t, tx, kgo.TryAbort, eventRecord(t, h.env.Names, "shop", "aborted", "order", `{}`))
	var got []string
	cursor := ""
	writing := 20
	for n := 0; len(got) < len(want) || writing > 0; n++ {
		if n > 1000 {
			t.Fatalf("after %d requests: got %d of %d events", n, len(got), len(want))
		}
		if writing > 0 {
			want = append(want, h.event(t, tx, "shop", "order"))
			writing--
		}
		a := h.pull(t, sub.ID, sub.Secret, cursorQuery(cursor, 7))
		if a.status != http.StatusOK {
			t.Fatalf("pull: %d %s", a.status, a.Error)
		}
		if n%2 == 0 {
			continue // lost: asked again with the same cursor
		}
		got = append(got, a.ids(t)...)
		cursor = a.Cursor
	}
	h.checkOrder(t, got, want)
	if slices.Contains(got, "shop:aborted") {
		t.Errorf("an aborted event was served")
	}
}

// TestRestartResumesFromSavedCursor: a consumer that saved its cursor
// resumes exactly after a restart of both ends; one that lost it resumes
// from the subscription's committed cursor, the last it presented.
func TestRestartResumesFromSavedCursor(t *testing.T) {
	h := newHarness(t, pull.Config{})
	sub := h.subscribe(t, subscriptions.Subscription{Pull: true})
	var want []string
	for range 30 {
		want = append(want, h.event(t, nil, "shop", "order"))
	}
	first := h.pull(t, sub.ID, sub.Secret, cursorQuery("", 10))
	second := h.pull(t, sub.ID, sub.Secret, cursorQuery(first.Cursor, 10))
	got := append(first.ids(t), second.ids(t)...)
	saved := second.Cursor

	// Without a cursor: from the committed one, first's.
	again := h.pull(t, sub.ID, sub.Secret, cursorQuery("", 10))
	if !slices.Equal(again.ids(t), second.ids(t)) {
		t.Errorf("without a cursor: got %v, want the answer after the last cursor presented %v", again.ids(t), second.ids(t))
	}

	// Another server (a restart, or another ingest instance).
	h.start(t, pull.Config{})
	for cursor := saved; ; {
		a := h.pull(t, sub.ID, sub.Secret, cursorQuery(cursor, 10))
		if a.status != http.StatusOK {
			t.Fatalf("pull: %d %s", a.status, a.Error)
		}
		if len(a.Events) == 0 {
			break
		}
		got, cursor = append(got, a.ids(t)...), a.Cursor
	}
	h.checkOrder(t, got, want)
}

// TestRefusals: each refused request gets its status, and a rotated
// token works during its overlap only.
func TestRefusals(t *testing.T) {
	h := newHarness(t, pull.Config{})
	sub := h.subscribe(t, subscriptions.Subscription{Pull: true})
	other := h.subscribe(t, subscriptions.Subscription{Pull: true})
	webhook := h.subscribe(t, subscriptions.Subscription{URL: "https://example.com/hook"})
	h.event(t, nil, "shop", "order")
	mine := h.pull(t, sub.ID, sub.Secret, nil)
	theirs := h.pull(t, other.ID, other.Secret, nil)
	tampered := []byte(mine.Cursor)
	tampered[len(tampered)/2] ^= 1
	for _, tc := range []struct {
		name, sub, token string
		query            url.Values
		want             int
	}{
		{"no token", sub.ID, "", nil, http.StatusUnauthorized},
		{"wrong token", sub.ID, other.Secret, nil, http.StatusUnauthorized},
		{"webhook secret", webhook.ID, webhook.Secret, nil, http.StatusConflict},
		{"unknown subscription", "sub_nothere", sub.Secret, nil, http.StatusNotFound},
		{"another subscription's cursor", sub.ID, sub.Secret, cursorQuery(theirs.Cursor, 0), http.StatusBadRequest},
		{"tampered cursor", sub.ID, sub.Secret, cursorQuery(string(tampered), 0), http.StatusBadRequest},
		{"malformed cursor", sub.ID, sub.Secret, cursorQuery("not a cursor", 0), http.StatusBadRequest},
		{"empty cursor: none", sub.ID, sub.Secret, url.Values{"cursor": {""}}, http.StatusOK},
		{"limit 0", sub.ID, sub.Secret, url.Values{"limit": {"0"}}, http.StatusBadRequest},
		{"limit not a number", sub.ID, sub.Secret, url.Values{"limit": {"ten"}}, http.StatusBadRequest},
		{"negative wait", sub.ID, sub.Secret, url.Values{"wait": {"-1s"}}, http.StatusBadRequest},
		{"own cursor", sub.ID, sub.Secret, cursorQuery(mine.Cursor, 0), http.StatusOK},
		{"huge limit, clamped", sub.ID, sub.Secret, url.Values{"limit": {"1000000"}}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := h.pull(t, tc.sub, tc.token, tc.query)
			if a.status != tc.want {
				t.Errorf("got %d (%s), want %d", a.status, a.Error, tc.want)
			}
			if a.status == http.StatusUnauthorized && a.header.Get("WWW-Authenticate") == "" {
				t.Errorf("401 without WWW-Authenticate")
			}
		})
	}

	// Rotated: both tokens work, and the old one's cursors.
	ctx := context.Background()
	rotated, err := h.registry.Update(ctx, sub.ID, func(s *subscriptions.Subscription) error {
		s.Rotate("", time.Now())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	status := func(token, cursor string) func() error {
		return func() error {
			if a := h.pull(t, sub.ID, token, cursorQuery(cursor, 0)); a.status != http.StatusOK {
				return fmt.Errorf("got %d %s", a.status, a.Error)
			}
			return nil
		}
	}
	kafkatest.WaitFor(t, 10*time.Second, status(rotated.Secret, mine.Cursor))
	kafkatest.WaitFor(t, 10*time.Second, status(sub.Secret, mine.Cursor))

	// Past the overlap: the old token and its cursors are refused.
	if _, err := h.registry.Update(ctx, sub.ID, func(s *subscriptions.Subscription) error {
		s.PreviousSecretUntil = time.Now().Add(-time.Second)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		if a := h.pull(t, sub.ID, sub.Secret, nil); a.status != http.StatusUnauthorized {
			return fmt.Errorf("old token after the overlap: got %d, want 401", a.status)
		}
		return nil
	})
	if a := h.pull(t, sub.ID, rotated.Secret, cursorQuery(mine.Cursor, 0)); a.status != http.StatusBadRequest {
		t.Errorf("old token's cursor after the overlap: got %d, want 400", a.status)
	}

	// Disabled: 403.
	if _, err := h.registry.Update(ctx, sub.ID, func(s *subscriptions.Subscription) error {
		s.Enabled = false
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		if a := h.pull(t, sub.ID, rotated.Secret, nil); a.status != http.StatusForbidden {
			return fmt.Errorf("disabled: got %d, want 403", a.status)
		}
		return nil
	})
}

// waiting is the number of long polls waiting, as the metrics say.
func (h *harness) waitingPolls(t *testing.T, want int) {
	t.Helper()
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		if got := testutil.ToFloat64(h.gauge(t, "hookstream_pull_waiting")); int(got) != want {
			return fmt.Errorf("waiting long polls: got %v, want %d", got, want)
		}
		return nil
	})
}

func (h *harness) gauge(t *testing.T, name string) prometheus.Collector {
	t.Helper()
	return gathered{h.metrics, name}
}

// gathered is one gathered metric family of a registry, as a collector
// testutil reads.
type gathered struct {
	reg  *prometheus.Registry
	name string
}

func (g gathered) Describe(chan<- *prometheus.Desc) {}

func (g gathered) Collect(ch chan<- prometheus.Metric) {
	families, _ := g.reg.Gather()
	for _, f := range families {
		if f.GetName() == g.name {
			for _, m := range f.GetMetric() {
				ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(g.name, "", nil, nil), prometheus.GaugeValue, m.GetGauge().GetValue()+m.GetCounter().GetValue())
			}
		}
	}
}

// TestLongPollAnswersWhenAnEventArrives: a request waiting up to 30 s
// is answered with the event written while it waits, and the caps on
// waiting requests answer 429 past them.
func TestLongPollAnswersWhenAnEventArrives(t *testing.T) {
	h := newHarness(t, pull.Config{MaxRequestsPerSubscription: 1, MaxRequests: 2})
	sub := h.subscribe(t, subscriptions.Subscription{Pull: true})
	other := h.subscribe(t, subscriptions.Subscription{Pull: true})
	third := h.subscribe(t, subscriptions.Subscription{Pull: true})
	wait := url.Values{"wait": {"30s"}}
	answers := make(chan answer, 2)
	go func() { answers <- h.pull(t, sub.ID, sub.Secret, wait) }()
	h.waitingPolls(t, 1)

	// The subscription's one place is taken; the others' are not.
	if a := h.pull(t, sub.ID, sub.Secret, wait); a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") == "" {
		t.Errorf("second long poll of one subscription: got %d (Retry-After %q), want 429 with Retry-After", a.status, a.header.Get("Retry-After"))
	}
	go func() { answers <- h.pull(t, other.ID, other.Secret, wait) }()
	h.waitingPolls(t, 2)
	if a := h.pull(t, third.ID, third.Secret, wait); a.status != http.StatusTooManyRequests {
		t.Errorf("a third request past the global cap: got %d, want 429", a.status)
	}

	id := h.event(t, h.transactional(t), "shop", "order")
	for range 2 {
		a := <-answers
		if a.status != http.StatusOK || !slices.Equal(a.ids(t), []string{id}) {
			t.Errorf("long poll: got %d %v, want 200 with %s", a.status, a.ids(t), id)
		}
	}
	h.waitingPolls(t, 0)
	if a := h.pull(t, third.ID, third.Secret, nil); a.status != http.StatusOK || len(a.Events) != 1 {
		t.Errorf("once the places are free: got %d with %d events", a.status, len(a.Events))
	}
}

// TestAnswerBounds: a huge limit is clamped to 1000, an answer stays
// within the size bound, its events' trace contexts counted, and an
// event larger than the bound is served alone rather than never.
func TestAnswerBounds(t *testing.T) {
	h := newHarness(t, pull.Config{MaxAnswerBytes: 2000})
	sub := h.subscribe(t, subscriptions.Subscription{Pull: true})
	var recs []*kgo.Record
	for i := range 1010 {
		rec := eventRecord(t, h.env.Names, "shop", "small-"+strconv.Itoa(i), "order", `{}`)
		if i%2 == 0 {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "tracestate", Value: []byte("vendor=" + strings.Repeat("t", 200))})
		}
		recs = append(recs, rec)
	}
	big := eventRecord(t, h.env.Names, "shop", "big", "order", `{"pad":"`+strings.Repeat("x", 5000)+`"}`)
	recs = append(recs, big)
	if err := h.cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	seen, cursor := 0, ""
	sawBig := false
	for seen < len(recs) {
		q := cursorQuery(cursor, 0)
		q.Set("limit", "1000000")
		a := h.pull(t, sub.ID, sub.Secret, q)
		if a.status != http.StatusOK || len(a.Events) == 0 {
			t.Fatalf("pull after %d events: %d %s with %d events", seen, a.status, a.Error, len(a.Events))
		}
		size := 0
		for i, e := range a.Events {
			tc, _ := json.Marshal(a.TraceContexts[i])
			size += len(e) + len(tc)
		}
		if len(a.Events) > 1 && size > 2000 {
			t.Errorf("answer of %d events, %d bytes with their trace contexts: over the 2000-byte bound", len(a.Events), size)
		}
		if slices.Contains(a.ids(t), "shop:big") {
			sawBig = true
		}
		seen += len(a.Events)
		cursor = a.Cursor
	}
	if !sawBig {
		t.Errorf("the event larger than the bound was never served")
	}

	h2 := newHarness(t, pull.Config{})
	sub2 := h2.subscribe(t, subscriptions.Subscription{Pull: true})
	for _, r := range recs {
		r.Topic = string(h2.env.Names.Events)
	}
	if err := h2.cl.ProduceSync(context.Background(), recs[:1010]...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if a := h2.pull(t, sub2.ID, sub2.Secret, url.Values{"limit": {"1000000"}}); len(a.Events) != pull.MaxLimit {
		t.Errorf("limit 1000000: got %d events, want %d", len(a.Events), pull.MaxLimit)
	}
}

// TestFiltersTransformsAndAcknowledgments: the globs and the filter skip
// events (the cursor passes them), the transform's result is served, an
// event whose transform fails is served as an error entry, and each
// event a cursor acknowledges is recorded in the attempts topic for the
// ledger: delivered, or failed with the transform's error.
func TestFiltersTransformsAndAcknowledgments(t *testing.T) {
	h := newHarness(t, pull.Config{})
	sub := h.subscribe(t, subscriptions.Subscription{Pull: true, EventTypes: []string{"order*"},
		Filter: `type != "order.ignored"`, Transform: `{"n": data.n}`})
	put := func(id, typ, data string) string {
		rec := eventRecord(t, h.env.Names, "shop", id, typ, data)
		if err := h.cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return string(rec.Key)
	}
	put("a", "order", `{"n":1}`)
	put("b", "refund", `{"n":2}`)
	put("c", "order.ignored", `{"n":3}`)
	bad := put("d", "order", `{}`)
	put("e", "order", `{"n":5}`)

	var bodies []string
	var errs []answerError
	cursor := ""
	for {
		a := h.pull(t, sub.ID, sub.Secret, cursorQuery(cursor, 0))
		if a.status != http.StatusOK {
			t.Fatalf("pull: %d %s", a.status, a.Error)
		}
		if len(a.Events) == 0 && len(a.Errors) == 0 {
			break
		}
		for _, e := range a.Events {
			bodies = append(bodies, string(e))
		}
		errs, cursor = append(errs, a.Errors...), a.Cursor
	}
	slices.Sort(bodies)
	if want := []string{`{"n":1}`, `{"n":5}`}; !slices.Equal(bodies, want) {
		t.Errorf("bodies: got %v, want %v", bodies, want)
	}
	if len(errs) != 1 || errs[0].ID != bad || !strings.Contains(errs[0].Error, "transform") {
		t.Errorf("errors: got %+v, want one transform error for %s", errs, bad)
	}

	// The last cursor was presented with the empty answer: every event
	// served is acknowledged.
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		got := make(map[string]string)
		for _, r := range h.env.Records(t, h.env.Names.DeliveryAttempts) {
			a, err := topics.ParseAttempt(r)
			if err != nil {
				return err
			}
			if a.Subscription == sub.ID {
				got[a.EventID] = a.Outcome
			}
		}
		want := map[string]string{"shop:a": topics.OutcomeDelivered, "shop:e": topics.OutcomeDelivered, bad: topics.OutcomeFailed}
		if !maps.Equal(got, want) {
			return fmt.Errorf("acknowledgments: got %v, want %v", got, want)
		}
		return nil
	})
}

// TestReplayIsServedAgain: a replay of a pull subscription serves the
// replayed events again; a cursor minted before the replay acknowledges
// nothing (it would undo the replay) and its answer, marked replayed,
// starts where the replay put the subscription.
func TestReplayIsServedAgain(t *testing.T) {
	h := newHarness(t, pull.Config{})
	sub := h.subscribe(t, subscriptions.Subscription{Pull: true})
	var want []string
	for range 9 {
		want = append(want, h.event(t, nil, "shop", "order"))
	}
	first := h.pull(t, sub.ID, sub.Secret, nil)
	done := h.pull(t, sub.ID, sub.Secret, cursorQuery(first.Cursor, 0)) // acknowledges all
	if len(first.Events) != len(want) || len(done.Events) != 0 {
		t.Fatalf("before the replay: %d then %d events, want %d then 0", len(first.Events), len(done.Events), len(want))
	}
	ctx := context.Background()
	api := groups.New(h.env.ClusterOf(h.cl), h.registry)
	r, err := api.Replay(ctx, "sub:"+sub.ID, "", nil, groups.Target{Earliest: true}, true)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if !r.Executed || !strings.Contains(r.Plan.Effect, "served again to the pull subscription's consumer") {
		t.Errorf("replay: executed %v, effect %q; want executed and the effect of a pull subscription's replay", r.Executed, r.Plan.Effect)
	}
	var a answer
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		a = h.pull(t, sub.ID, sub.Secret, cursorQuery(done.Cursor, 0))
		if !a.Replayed {
			return fmt.Errorf("a cursor from before the replay: got %d events, not marked replayed", len(a.Events))
		}
		return nil
	})
	h.checkOrder(t, a.ids(t), want)
	// The stale cursor was not committed: without a cursor, the answer
	// starts at the replay's targets too.
	if again := h.pull(t, sub.ID, sub.Secret, nil); len(again.Events) != len(want) || again.Replayed {
		t.Errorf("without a cursor after the replay: got %d events (replayed %v), want %d", len(again.Events), again.Replayed, len(want))
	}
	if next := h.pull(t, sub.ID, sub.Secret, cursorQuery(a.Cursor, 0)); next.status != http.StatusOK || len(next.Events) != 0 || next.Replayed {
		t.Errorf("the replayed answer's cursor: got %d with %d events (replayed %v), want 200 and none", next.status, len(next.Events), next.Replayed)
	}
	lags, err := groups.New(h.env.ClusterOf(h.cl), h.registry).Lags(ctx, "sub:"+sub.ID)
	if err != nil || len(lags) != 1 || lags[0].Total != 0 {
		t.Errorf("lag once the replayed events are acknowledged: %+v %v, want 0", lags, err)
	}
}

// TestScanBound: an answer reads at most MaxScan records: over a backlog
// its filter skips, it answers at once, with no event and a cursor past
// what it read, even asked to wait; the consumer reads on to the event
// after the backlog.
func TestScanBound(t *testing.T) {
	h := newHarness(t, pull.Config{MaxScan: 5})
	sub := h.subscribe(t, subscriptions.Subscription{Pull: true, EventTypes: []string{"wanted"}})
	var recs []*kgo.Record
	for i := range 30 {
		recs = append(recs, eventRecord(t, h.env.Names, "shop", "skipped-"+strconv.Itoa(i), "other", `{}`))
	}
	recs = append(recs, eventRecord(t, h.env.Names, "shop", "wanted", "wanted", `{}`))
	for _, r := range recs {
		r.Partition = 1 // one partition: 5 records an answer
	}
	producer := h.env.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cursor, answers := "", 0
	for {
		q := cursorQuery(cursor, 0)
		q.Set("wait", "30s")
		a := h.pull(t, sub.ID, sub.Secret, q)
		if a.status != http.StatusOK {
			t.Fatalf("pull: %d %s", a.status, a.Error)
		}
		answers++
		if len(a.Events) > 0 {
			if ids := a.ids(t); !slices.Equal(ids, []string{"shop:wanted"}) {
				t.Fatalf("got %v, want the one wanted event", ids)
			}
			break
		}
		if answers > len(recs) {
			t.Fatalf("%d answers without the wanted event", answers)
		}
		cursor = a.Cursor
	}
	if answers != 30/5+1 {
		t.Errorf("the wanted event came in answer %d, want %d: 5 records read by each answer", answers, 30/5+1)
	}
}

// TestTraceContext: each event served carries its record's trace context
// in trace_contexts, at its index in events, the envelope itself served
// byte for byte; an error entry carries its own, and an event whose record
// has none gets {}. Presenting the cursor exports, over OTLP to a real
// receiver, one span per acknowledged event, a child of the context its
// record carries, following the messaging conventions with hookstream's
// subscription, event id and outcome.
func TestTraceContext(t *testing.T) {
	recv := otlptest.New(t)
	h := newHarness(t, pull.Config{Tracing: otlptest.Tracing(t, recv.URL)})
	plain := h.subscribe(t, subscriptions.Subscription{Pull: true})
	shaped := h.subscribe(t, subscriptions.Subscription{Pull: true, Transform: `{"n": data.n}`})
	traced := map[string]map[string]string{
		"shop:a": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "vendor=a"},
		"shop:b": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		"shop:c": {},
	}
	values := map[string]string{}
	for _, ev := range []struct{ id, data string }{{"a", `{"n":1}`}, {"b", `{}`}, {"c", `{"n":3}`}} {
		rec := eventRecord(t, h.env.Names, "shop", ev.id, "order", ev.data)
		for k, v := range traced[string(rec.Key)] {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		if err := h.cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		values[string(rec.Key)] = string(rec.Value)
	}

	a := h.pull(t, plain.ID, plain.Secret, nil)
	if a.status != http.StatusOK || len(a.Events) != 3 || len(a.TraceContexts) != 3 {
		t.Fatalf("plain: got %d with %d events and %d trace contexts, want 200 with 3 and 3", a.status, len(a.Events), len(a.TraceContexts))
	}
	for i, id := range a.ids(t) {
		if string(a.Events[i]) != values[id] {
			t.Errorf("event %s: got %s, want its envelope as written %s", id, a.Events[i], values[id])
		}
		if !maps.Equal(a.TraceContexts[i], traced[id]) || a.TraceContexts[i] == nil {
			t.Errorf("trace context of %s: got %v, want %v", id, a.TraceContexts[i], traced[id])
		}
	}
	b := h.pull(t, shaped.ID, shaped.Secret, nil)
	if b.status != http.StatusOK || len(b.Events) != 2 || len(b.TraceContexts) != 2 || len(b.Errors) != 1 {
		t.Fatalf("transformed: got %d with %d events, %d trace contexts, %d errors; want 200 with 2, 2, 1", b.status, len(b.Events), len(b.TraceContexts), len(b.Errors))
	}
	for i, body := range b.Events {
		id := map[string]string{`{"n":1}`: "shop:a", `{"n":3}`: "shop:c"}[string(body)]
		if !maps.Equal(b.TraceContexts[i], traced[id]) {
			t.Errorf("trace context of %s (%s): got %v, want %v", id, body, b.TraceContexts[i], traced[id])
		}
	}
	if e := b.Errors[0]; e.ID != "shop:b" || !maps.Equal(e.TraceContext, traced["shop:b"]) {
		t.Errorf("error entry: got %+v, want shop:b with trace context %v", e, traced["shop:b"])
	}

	// The acknowledgments.
	for _, ack := range []struct {
		sub    subscriptions.Subscription
		cursor string
	}{{plain, a.Cursor}, {shaped, b.Cursor}} {
		if got := h.pull(t, ack.sub.ID, ack.sub.Secret, cursorQuery(ack.cursor, 0)); got.status != http.StatusOK {
			t.Fatalf("acknowledge: %d %s", got.status, got.Error)
		}
	}
	type key struct{ sub, event string }
	want := map[key]string{
		{plain.ID, "shop:a"}: topics.OutcomeDelivered, {plain.ID, "shop:b"}: topics.OutcomeDelivered, {plain.ID, "shop:c"}: topics.OutcomeDelivered,
		{shaped.ID, "shop:a"}: topics.OutcomeDelivered, {shaped.ID, "shop:b"}: topics.OutcomeFailed, {shaped.ID, "shop:c"}: topics.OutcomeDelivered,
	}
	var acks map[key]otlptest.Span
	spans := 0
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		acks, spans = map[key]otlptest.Span{}, 0
		for _, s := range recv.Spans() {
			if s.Name == "ack "+string(h.env.Names.Events) {
				acks[key{s.Attrs["hookstream.subscription"], s.Attrs["hookstream.event.id"]}] = s
				spans++
			}
		}
		if len(acks) < len(want) {
			return fmt.Errorf("got %d acknowledgment spans, want %d", len(acks), len(want))
		}
		return nil
	})
	for k, outcome := range want {
		s, ok := acks[k]
		if !ok {
			t.Errorf("no acknowledgment span of %s for %s", k.event, k.sub)
			continue
		}
		group := string(h.env.Names.SubscriptionGroup(k.sub))
		for attr, v := range map[string]string{"messaging.system": "kafka", "messaging.operation.type": "settle", "messaging.operation.name": "ack",
			"messaging.destination.name": string(h.env.Names.Events), "messaging.consumer.group.name": group,
			"messaging.destination.partition.id": strconv.Itoa(int(h.partitionOf(k.event))), "hookstream.outcome": outcome} {
			if s.Attrs[attr] != v {
				t.Errorf("span of %s for %s: %s = %q, want %q", k.event, k.sub, attr, s.Attrs[attr], v)
			}
		}
		if _, ok := s.Attrs["messaging.kafka.offset"]; !ok || s.Kind != 3 {
			t.Errorf("span of %s for %s: kind %d, attributes %v; want a client span with the record's offset", k.event, k.sub, s.Kind, s.Attrs)
		}
		if failed := s.StatusCode == 2; failed != (outcome == topics.OutcomeFailed) {
			t.Errorf("span of %s for %s: status %d with outcome %s", k.event, k.sub, s.StatusCode, outcome)
		}
		if tp := traced[k.event]["traceparent"]; tp != "" {
			if parts := strings.Split(tp, "-"); s.TraceID != parts[1] || s.ParentID != parts[2] {
				t.Errorf("span of %s for %s: trace %s parent %s, want a child of %s", k.event, k.sub, s.TraceID, s.ParentID, tp)
			}
		} else if s.ParentID != "" {
			t.Errorf("span of %s for %s, whose record carries no context: parent %s, want a root", k.event, k.sub, s.ParentID)
		}
	}
	if spans != len(want) {
		t.Errorf("got %d acknowledgment spans, want one per event acknowledged: %d", spans, len(want))
	}
}

// TestLookupBound: requests for subscriptions the server has not watched
// (just created, or unknown: anyone reaching the listener can name any
// id) read the registry, 8 at most at once; past them a request is
// answered 429 at once, without reading, while a subscription the server
// knows is served. Once the reads end, each unknown id is a 404.
func TestLookupBound(t *testing.T) {
	h := newHarness(t, pull.Config{})
	if h.env.Cluster == nil {
		t.Skip("holds the registry's reads in the in-process broker")
	}
	known := h.subscribe(t, subscriptions.Subscription{Pull: true})
	served := func() error {
		if a := h.pull(t, known.ID, known.Secret, nil); a.status != http.StatusOK {
			return fmt.Errorf("a known subscription: got %d %s, want 200", a.status, a.Error)
		}
		return nil
	}
	kafkatest.WaitFor(t, 10*time.Second, served)

	// The registry's reads list the subscriptions topic's ends first:
	// they wait until released.
	release := make(chan struct{})
	var released sync.Once
	t.Cleanup(func() { released.Do(func() { close(release) }) })
	h.env.Cluster.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.env.Cluster.KeepControl()
		for _, rt := range req.(*kmsg.ListOffsetsRequest).Topics {
			if rt.Topic == string(h.env.Names.Subscriptions) {
				h.env.Cluster.SleepControl(func() { <-release })
			}
		}
		return nil, nil, false
	})

	const lookups = 8
	answers := make(chan answer, lookups+1)
	for i := range lookups + 1 {
		go func() { answers <- h.pull(t, "sub_unknown"+strconv.Itoa(i), known.Secret, nil) }()
	}
	// None of the reads can end: one request of the nine finds no place.
	select {
	case a := <-answers:
		if a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") == "" {
			t.Errorf("while %d reads wait: got %d %s (Retry-After %q), want 429 with Retry-After", lookups, a.status, a.Error, a.header.Get("Retry-After"))
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no request answered past %d registry reads waiting", lookups)
	}
	kafkatest.WaitFor(t, 10*time.Second, served)

	released.Do(func() { close(release) })
	for range lookups {
		if a := <-answers; a.status != http.StatusNotFound {
			t.Errorf("an unknown subscription once read: got %d %s, want 404", a.status, a.Error)
		}
	}
}

// TestPreviewIsWhatIsServed: the test of a pull subscription (subscriptions
// test, POST /api/subscriptions/{id}/test) shows what its answers carry
// for an event: the item of events byte for byte and its trace context,
// no webhook header; an event the filter skips is no match with nothing
// served; a failing transform, the error its errors entry carries.
func TestPreviewIsWhatIsServed(t *testing.T) {
	h := newHarness(t, pull.Config{})
	sub := h.subscribe(t, subscriptions.Subscription{Pull: true, Filter: `type != "refund"`, Transform: `{"n": data.n}`})
	const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	var recs []*kgo.Record
	for _, ev := range []struct{ id, typ, data string }{{"a", "order", `{"n":1}`}, {"b", "refund", `{"n":2}`}, {"c", "order", `{}`}} {
		rec := eventRecord(t, h.env.Names, "shop", ev.id, ev.typ, ev.data)
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "traceparent", Value: []byte(traceparent)})
		if err := h.cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	a := h.pull(t, sub.ID, sub.Secret, nil)
	if a.status != http.StatusOK || len(a.Events) != 1 || len(a.Errors) != 1 {
		t.Fatalf("pull: got %d with %d events and %d errors, want 200 with 1 and 1", a.status, len(a.Events), len(a.Errors))
	}
	c := subscriptions.Compile(sub)
	preview := func(rec *kgo.Record) subscriptions.Preview {
		return c.Redact(c.Preview(subscriptions.NewEvent(rec), time.Now(), "hookstream/test"))
	}
	if p := preview(recs[0]); !p.Match || string(p.Body) != string(a.Events[0]) || !maps.Equal(p.TraceContext, a.TraceContexts[0]) || p.Headers != nil || p.Error != "" {
		t.Errorf("served: preview %+v, want a match with the body %s and trace context %v served, no headers", p, a.Events[0], a.TraceContexts[0])
	}
	if p := preview(recs[1]); p.Match || p.Body != nil || p.TraceContext != nil || !strings.Contains(p.Reason, "the filter is false") {
		t.Errorf("skipped: preview %+v, want no match by the filter and nothing served", p)
	}
	if p := preview(recs[2]); !p.Match || p.Body != nil || p.Error != a.Errors[0].Error || !maps.Equal(p.TraceContext, a.Errors[0].TraceContext) ||
		!strings.Contains(p.Reason, "errors") || strings.Contains(p.Reason, "dead-letter") {
		t.Errorf("failing transform: preview %+v, want the error entry %+v", p, a.Errors[0])
	}
}
