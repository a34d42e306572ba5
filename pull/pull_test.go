package pull_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
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
}

func newHarness(t *testing.T, cfg pull.Config) *harness {
	t.Helper()
	env := kafkatest.New(t, 3, 1<<20)
	cl := env.Client(t)
	h := &harness{env: env, cl: cl}
	h.registry = subscriptions.NewRegistry(cl, []kgo.Opt{kgo.SeedBrokers(env.Seeds...)}, env.Names, kafkatest.Logger(t))
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
	srv := httptest.NewServer(e)
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
	status   int
	Events   []json.RawMessage `json:"events"`
	Cursor   string            `json:"cursor"`
	Errors   []answerError     `json:"errors"`
	Replayed bool              `json:"replayed"`
	Error    string            `json:"error"`
	header   http.Header
}

type answerError struct {
	ID        string `json:"id"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Error     string `json:"error"`
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
