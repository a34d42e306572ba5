package console_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// overviewEvents is the deployment's size in BenchmarkOverview. The figure
// in BENCHMARKS.md is taken with 1,000,000; the default keeps the
// benchmarks' single run in CI short.
var overviewEvents = flag.Int("overview.events", 10_000, "events in the deployment BenchmarkOverview reads (BENCHMARKS.md: 1000000)")

// BenchmarkOverview measures GET /ui/, signed in, through the console's
// handler on an admin listener, on a broker holding a deployment of
// -overview.events events (1,000,000 for BENCHMARKS.md):
//
//	go test ./console/ -run '^$' -bench Overview -overview.events 1000000
//
// The deployment: each event an ingest record and an events record (the
// receiver's and the processor's codecs) over 12 partitions and 5
// sources, the last 15 minutes' share in the charts; one in 1,000 a
// processor dead letter instead of an event; three subscriptions, each
// event delivered to one of them (one attempts record), one in 100 after a
// failed attempt and a retry, and one in 1,000 dead-lettered to the
// delivery DLQ after 3 failed attempts; the processor group's offsets
// committed at the ingest topic's end.
//
// first-request is the first GET after the console starts, which asks
// the tallies to read the ingest, events, DLQ and attempts topics from
// their start and waits for them at most a second (defaultTallyWait),
// then shows the counts read so far with a note; steady is every GET once
// the tallies have caught up.
func BenchmarkOverview(b *testing.B) {
	n := *overviewEvents
	env := kafkatest.New(b, 12, 1<<20)
	written := fillDeployment(b, env, n)
	b.Logf("deployment: %d events, %d records in all", n, written)
	check := func(b *testing.B, body string) {
		for _, want := range []string{
			fmt.Sprintf(`<span class="big">%d</span> in the processor DLQ`, n/1000),
			fmt.Sprintf(`<span class="big">%d</span> in the delivery DLQ`, (n+499)/1000),
			`<span class="big">0</span> events behind`,
		} {
			if !strings.Contains(body, want) {
				b.Fatalf("overview: want %q in:\n%s", want, body)
			}
		}
	}

	b.Run("first-request", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			h := serve(b, options{token: token, env: env})
			c := signedIn(b, h)
			b.StartTimer()
			body := c.overview(b)
			b.StopTimer()
			if note := regexp.MustCompile(`Still counting: [^<]*`).FindString(body); note != "" {
				b.Logf("first request: %s", note)
			} else {
				check(b, body)
			}
		}
	})
	b.Run("steady", func(b *testing.B) {
		h := serve(b, options{token: token, env: env})
		c := signedIn(b, h)
		body := c.overview(b)
		for strings.Contains(body, "Still counting") {
			time.Sleep(time.Second) // a reader reloading in a moment, not a synchronisation: each GET asks again
			body = c.overview(b)
		}
		check(b, body)
		b.ResetTimer()
		for range b.N {
			c.overview(b)
		}
	})
}

// client is a signed-in browser of the console.
type client struct {
	http    *http.Client
	base    string
	session *http.Cookie
}

func signedIn(b *testing.B, h *harness) *client {
	b.Helper()
	c := &client{http: h.srv.Client(), base: h.srv.URL}
	c.http.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	req, _ := http.NewRequest(http.MethodPost, c.base+"/ui/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", c.base)
	resp, err := c.http.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	for _, ck := range resp.Cookies() {
		if ck.Name == "hookstream_session" {
			c.session = ck
		}
	}
	if resp.StatusCode != http.StatusSeeOther || c.session == nil {
		b.Fatalf("sign in: got %d without a session", resp.StatusCode)
	}
	return c
}

// overview is GET /ui/, which must answer 200.
func (c *client) overview(b *testing.B) string {
	req, _ := http.NewRequest(http.MethodGet, c.base+"/ui/", nil)
	req.AddCookie(c.session)
	resp, err := c.http.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("GET /ui/: got %d, %v: %s", resp.StatusCode, err, body)
	}
	return string(body)
}

// fillDeployment writes the records of a deployment of n events (see
// BenchmarkOverview) and returns how many it wrote.
func fillDeployment(b *testing.B, env *kafkatest.Env, n int) int {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cl := env.Client(b)
	registry := subscriptions.NewRegistry(env.ClusterOf(cl), kafkatest.Logger(b))
	subs := []string{"sub_orders", "sub_repos", "sub_everything"}
	for _, id := range subs {
		s := subscriptions.Subscription{ID: id, URL: "https://example.com/" + id}
		if err := registry.Create(ctx, &s, ""); err != nil {
			b.Fatal(err)
		}
	}

	producer := env.Client(b,
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.MaxBufferedRecords(100_000),
		kgo.ProducerLinger(5*time.Millisecond),
	)
	var (
		mu       sync.Mutex
		firstErr error
		written  int
	)
	done := func(_ *kgo.Record, err error) {
		mu.Lock()
		defer mu.Unlock()
		written++
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	sources := []string{"github", "stripe", "shopify", "shop", "crm"}
	names := env.Names
	now := time.Now()
	const span = 24 * time.Hour // the events' times, up to now
	for i := range n {
		at := now.Add(-time.Duration(int64(span) / int64(n) * int64(n-1-i)))
		source := sources[i%len(sources)]
		id := fmt.Sprintf("evt_%08d", i)
		in := (&topics.IngestRecord{
			Source: source, EventID: id, EventType: "order.created", ReceivedAt: at, ContentType: "application/json",
			Body: fmt.Appendf(nil, `{"id":%q,"type":"order.created","amount":%d,"customer":{"email":"c%d@example.com"}}`, id, i%1000, i%5000),
		}).Record(names.Ingest)
		in.Partition, in.Timestamp = int32(i%12), at
		if i%1000 == 999 {
			letter := topics.NewDeadLetter(in, topics.StageProcess, "payload does not match the source's schema", at)
			letter.OrigTopic, letter.OrigPartition, letter.OrigOffset = string(names.Ingest), in.Partition, int64(i/12)
			r := letter.Record(names.DLQ)
			r.Partition, r.Timestamp = in.Partition, at
			producer.Produce(ctx, in, done)
			producer.Produce(ctx, r, done)
			continue
		}
		envelope, err := topics.NewEnvelope(in, at)
		if err != nil {
			b.Fatal(err)
		}
		ev, err := topics.EventRecord(names.Events, in, envelope)
		if err != nil {
			b.Fatal(err)
		}
		ev.Timestamp = at
		key, partition := string(in.Key), in.Partition
		envelopeValue, eventHeaders := ev.Value, ev.Headers
		producer.Produce(ctx, in, done)
		producer.Produce(ctx, ev, done)

		sub := subs[i%len(subs)]
		attempt := func(n int, outcome string, status int) {
			r := (&topics.Attempt{Subscription: sub, EventID: key, N: n, Outcome: outcome, Status: status,
				Latency: 40 * time.Millisecond, At: at}).Record(names.DeliveryAttempts)
			r.Partition, r.Timestamp = partition, at
			producer.Produce(ctx, r, done)
		}
		switch {
		case i%1000 == 500:
			for a := 1; a <= 3; a++ {
				attempt(a, topics.OutcomeFailed, 503)
			}
			attempt(3, topics.OutcomeDeadLettered, 503)
			letter := &topics.DeadLetter{Key: topics.RetryKey(sub, key), Value: envelopeValue, Headers: eventHeaders,
				Stage: topics.StageDeliver, Error: "503 Service Unavailable", OrigTopic: string(names.Events),
				OrigPartition: partition, OrigOffset: int64(i / 12), FailedAt: at, Subscription: sub, Attempts: 3, LastStatus: 503}
			r := letter.Record(names.DeliveryDLQ)
			r.Partition, r.Timestamp = partition, at
			producer.Produce(ctx, r, done)
		case i%100 == 0:
			attempt(1, topics.OutcomeFailed, 500)
			attempt(1, topics.OutcomeRetrying, 500)
			attempt(2, topics.OutcomeDelivered, 200)
		default:
			attempt(1, topics.OutcomeDelivered, 200)
		}
	}
	if err := producer.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if firstErr != nil {
		b.Fatalf("producing the deployment: %v", firstErr)
	}
	// The processor has read every ingest record.
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, string(names.Ingest))
	if err == nil {
		err = ends.Error()
	}
	if err == nil {
		err = adm.CommitAllOffsets(ctx, string(names.ProcessorGroup()), ends.Offsets())
	}
	if err != nil {
		b.Fatalf("committing the processor's offsets: %v", err)
	}
	return written
}
