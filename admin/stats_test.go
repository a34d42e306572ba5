package admin_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/ingest"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/processor"
	"github.com/hookstream/hookstream/topics"
)

// sourceCounts are one source's numbers in /api/stats.
type sourceCounts struct {
	Accepted   int64 `json:"accepted"`
	Duplicates int64 `json:"duplicates"`
	Processed  int64 `json:"processed"`
	Failed     int64 `json:"failed"`
}

// statsView is the part of /api/stats that the topics hold.
type statsView struct {
	sourceCounts
	Sources map[string]sourceCounts `json:"sources"`
}

// receiver serves a receiver replica: replicas share no memory of what
// they accepted, so a provider's retry through another one reaches Kafka.
func receiver(t *testing.T, env *kafkatest.Env, maxBody int64) string {
	t.Helper()
	cfg := ingest.Config{AcceptAll: true, MaxBody: maxBody, AckTimeout: 10 * time.Second, Topic: env.Names.Ingest}
	h, err := ingest.New(cfg, env.Client(t, ingest.ProducerOpts(cfg)...), kafkatest.Logger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestStatsAreDurable: events posted through two receiver replicas, some
// of them twice (a provider's retry through the other replica, which the
// processor drops), and one the processor dead-letters (its envelope
// exceeds the processor's record limit), are counted by /api/stats per
// source; a new process serving the API from the same topics, with
// nothing in memory, answers the same numbers.
func TestStatsAreDurable(t *testing.T) {
	const maxBody = 1 << 20
	env := kafkatest.New(t, 2, maxBody)
	h := serveAPI(t, env, nil)
	p := processor.New(processor.Config{
		Names:    env.Names,
		StateDir: t.TempDir(),
		// Smaller than what the receivers accept: a large body that is not
		// JSON (base64 in its envelope) cannot be emitted.
		MaxRecordBytes:  topics.MaxRecordBytes(0),
		TransactionalID: env.Names.Prefix + "-processor",
		SessionTimeout:  6 * time.Second,
	}, []kgo.Opt{kgo.SeedBrokers(env.Seeds...)}, kafkatest.Logger(t), prometheus.NewRegistry())
	h.run(t, "processor", p.Run)

	a, b := receiver(t, env, maxBody), receiver(t, env, maxBody)
	post := func(url, source, id, contentType string, body []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url+"/webhooks/"+source, bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("X-Event-Id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST %s:%s: got %d, want 202", source, id, resp.StatusCode)
		}
	}
	for _, id := range []string{"1", "2", "3"} {
		post(a, "shop", id, "application/json", []byte(`{"n":`+id+`}`))
	}
	for _, id := range []string{"1", "2"} {
		post(b, "shop", id, "application/json", []byte(`{"n":`+id+`}`))
	}
	post(a, "crm", "1", "application/json", []byte(`{}`))
	post(b, "crm", "1", "application/json", []byte(`{}`))
	post(a, "crm", "big", "application/octet-stream", bytes.Repeat([]byte{0xff}, 200<<10))

	want := statsView{
		sourceCounts: sourceCounts{Accepted: 8, Duplicates: 3, Processed: 4, Failed: 1},
		Sources: map[string]sourceCounts{
			"shop": {Accepted: 5, Duplicates: 2, Processed: 3},
			"crm":  {Accepted: 3, Duplicates: 1, Processed: 1, Failed: 1},
		},
	}
	read := func(h *apiHarness) statsView {
		var got statsView
		if status := h.call(t, "GET", "/api/stats", "Bearer "+token, nil, &got); status != http.StatusOK {
			t.Fatalf("stats: got %d, want 200", status)
		}
		return got
	}
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		if got := read(h); !reflect.DeepEqual(got, want) {
			return fmt.Errorf("stats: got %+v, want %+v", got, want)
		}
		return nil
	})

	// A new process: nothing in memory.
	if got := read(serveAPI(t, env, nil)); !reflect.DeepEqual(got, want) {
		t.Errorf("stats after a restart: got %+v, want %+v", got, want)
	}
}
