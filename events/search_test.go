package events_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/events"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

const token = "t0ken"

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventRecord is the events record of source:id of type typ, received at
// at, as the processor writes it.
func eventRecord(t *testing.T, names topics.Names, source, id, typ string, at time.Time) *kgo.Record {
	t.Helper()
	env := &topics.Envelope{ID: source + ":" + id, Source: source, EventID: id, Type: typ, ReceivedAt: at.UTC(),
		ProcessedAt: at.UTC(), ContentType: "application/json", Data: []byte(`{"n":1}`)}
	value, err := env.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: string(names.Events), Key: []byte(env.ID), Value: value, Timestamp: at, Headers: []kgo.RecordHeader{
		{Key: topics.HeaderSource, Value: []byte(source)},
		{Key: topics.HeaderEventID, Value: []byte(id)},
		{Key: topics.HeaderEventType, Value: []byte(typ)},
	}}
}

// writeEvents writes records in transactions of three, as the processor
// writes the events topic: each transaction ends in a commit marker. It
// returns once a read_committed reader sees them all. opts are the
// writer's further options.
func writeEvents(t *testing.T, env *kafkatest.Env, recs []*kgo.Record, opts ...kgo.Opt) {
	t.Helper()
	cl := env.Client(t, append(opts, kgo.TransactionalID(env.Names.Prefix+"-events-writer"))...)
	ctx := testContext(t)
	for chunk := range slices.Chunk(recs, 3) {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, chunk...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	env.WaitStable(t, env.Names.Events)
}

// keys are the keys of results, sorted.
func keys(rs []events.Result) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Key)
	}
	slices.Sort(out)
	return out
}

// TestSearchPages: a search bounded to a few offsets a page reads the
// whole range in pages whose cursors continue exactly where the last
// stopped: every matching event once, none of the others, and each page
// within its bound; a limit stops a page early, and the next one takes up
// after its last match.
func TestSearchPages(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 3, 1<<20)
	names := env.Names
	cl := env.Client(t)
	// Ahead of the commit markers' timestamps, which are the commits'
	// times: offsets by time find the first batch stamped at or after a
	// time, markers included. (Kafka refuses timestamps over an hour
	// ahead.)
	base := time.Now().Add(10 * time.Minute).Truncate(time.Millisecond)
	var recs []*kgo.Record
	var want []string
	for i := range 30 {
		source, typ := "shop", "order.created"
		switch i % 3 {
		case 1:
			typ = "refund"
		case 2:
			source = "crm"
		}
		id := fmt.Sprintf("e%02d", i)
		recs = append(recs, eventRecord(t, names, source, id, typ, base.Add(time.Duration(i)*time.Second)))
		if source == "shop" && strings.HasPrefix(typ, "order.") {
			want = append(want, source+":"+id)
		}
	}
	writeEvents(t, env, recs)
	slices.Sort(want)

	for _, limit := range []int{0, 4} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			q := events.Query{Source: "shop", Type: "order.*", MaxRead: 7, Limit: limit}
			var got []events.Result
			pages := 0
			for {
				page, err := events.New(env.ClusterOf(cl), nil, nil).Search(testContext(t), q)
				if err != nil {
					t.Fatalf("Search: %v", err)
				}
				pages++
				if page.Read > 7 {
					t.Errorf("page %d: read %d offsets, want at most 7", pages, page.Read)
				}
				if limit > 0 && len(page.Events) > limit {
					t.Errorf("page %d: got %d events, want at most %d", pages, len(page.Events), limit)
				}
				got = append(got, page.Events...)
				if page.Cursor == "" {
					if page.Left != 0 {
						t.Errorf("last page: left %d, want 0", page.Left)
					}
					break
				}
				if pages > 100 {
					t.Fatalf("no end after %d pages", pages)
				}
				q.Cursor = page.Cursor
			}
			if got := keys(got); !slices.Equal(got, want) {
				t.Errorf("events over %d pages: got %v, want %v", pages, got, want)
			}
			if pages < 6 { // 30 records and 10 markers, 7 a page
				t.Errorf("pages: got %d, want at least 6", pages)
			}
		})
	}

	// A time range: [base+10s, base+20s) holds e10..e19.
	page, err := events.New(env.ClusterOf(cl), nil, nil).Search(testContext(t), events.Query{Since: base.Add(10 * time.Second), Until: base.Add(20 * time.Second)})
	if err != nil {
		t.Fatalf("Search: %v", err)
	}
	var inRange []string
	for i := 10; i < 20; i++ {
		source := "shop"
		if i%3 == 2 {
			source = "crm"
		}
		inRange = append(inRange, fmt.Sprintf("%s:e%02d", source, i))
	}
	slices.Sort(inRange)
	if got := keys(page.Events); !slices.Equal(got, inRange) || page.Cursor != "" {
		t.Errorf("range: got %v (cursor %q), want %v and no cursor", got, page.Cursor, inRange)
	}
	for _, r := range page.Events {
		if r.Key == "shop:e10" {
			if want := (events.Result{Key: "shop:e10", Source: "shop", Type: "refund", ReceivedAt: base.Add(10 * time.Second).UTC(), WrittenAt: base.Add(10 * time.Second).UTC(), Partition: r.Partition, Offset: r.Offset}); r != want {
				t.Errorf("result: got %+v, want %+v", r, want)
			}
		}
	}
}

// TestSearchInTimeOrder: events of several partitions, whose offset
// order is not their time order, come in the order they were written
// (their records' timestamps): all at once, in pages cut by a limit, and
// in pages cut by the offsets a page may read, each page's read and left
// adding up to the range.
func TestSearchInTimeOrder(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 3, 1<<20)
	base := time.Now().Add(10 * time.Minute).Truncate(time.Millisecond)
	// By partition, in offset order: the seconds after base each was
	// written at.
	layout := map[int32][]int{0: {1, 5, 6}, 1: {0, 2}, 2: {3, 4, 7}}
	var recs []*kgo.Record
	for p, secs := range layout {
		for _, s := range secs {
			r := eventRecord(t, env.Names, "shop", fmt.Sprintf("t%d", s), "order.created", base.Add(time.Duration(s)*time.Second))
			r.Partition = p
			recs = append(recs, r)
		}
	}
	writeEvents(t, env, recs, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	want := []string{"shop:t0", "shop:t1", "shop:t2", "shop:t3", "shop:t4", "shop:t5", "shop:t6", "shop:t7"}
	svc := events.New(env.ClusterOf(env.Client(t)), nil, nil)

	for _, tc := range []struct {
		name           string
		limit          int
		maxRead        int64
		firstPageEvent int // events of the first page
	}{
		{"one page", 0, 0, 8},
		{"limit 3", 3, 0, 3},
		{"at most 4 offsets read a page", 0, 4, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := events.Query{Limit: tc.limit, MaxRead: tc.maxRead}
			var got []string
			var read, total int64
			for pages := 1; ; pages++ {
				page, err := svc.Search(testContext(t), q)
				if err != nil {
					t.Fatalf("Search: %v", err)
				}
				if pages == 1 {
					total = page.Read + page.Left
					if tc.firstPageEvent >= 0 && len(page.Events) != tc.firstPageEvent {
						t.Errorf("first page: got %d events, want %d", len(page.Events), tc.firstPageEvent)
					}
				}
				if tc.maxRead > 0 && page.Read > tc.maxRead {
					t.Errorf("page %d: read %d offsets, want at most %d", pages, page.Read, tc.maxRead)
				}
				read += page.Read
				for _, e := range page.Events {
					got = append(got, e.Key)
				}
				if page.Cursor == "" {
					break
				}
				if pages > 50 {
					t.Fatalf("no end after %d pages", pages)
				}
				q.Cursor = page.Cursor
			}
			if !slices.Equal(got, want) {
				t.Errorf("events: got %v, want %v", got, want)
			}
			if read != total {
				t.Errorf("offsets read over the pages: got %d, want the range's %d", read, total)
			}
		})
	}
}

// TestNewest: the newest events of several partitions, newest first,
// whatever their offsets.
func TestNewest(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 3, 1<<20)
	base := time.Now().Truncate(time.Millisecond)
	layout := map[int32][]int{0: {1, 5, 6}, 1: {0, 2}, 2: {3, 4, 7}}
	var recs []*kgo.Record
	for p, secs := range layout {
		for _, s := range secs {
			r := eventRecord(t, env.Names, "shop", fmt.Sprintf("t%d", s), "order.created", base.Add(time.Duration(s)*time.Second))
			r.Partition = p
			recs = append(recs, r)
		}
	}
	writeEvents(t, env, recs, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	svc := events.New(env.ClusterOf(env.Client(t)), nil, nil)
	for _, tc := range []struct {
		limit int
		want  []string
	}{
		{3, []string{"shop:t7", "shop:t6", "shop:t5"}},
		{20, []string{"shop:t7", "shop:t6", "shop:t5", "shop:t4", "shop:t3", "shop:t2", "shop:t1", "shop:t0"}},
	} {
		got, err := svc.Newest(testContext(t), tc.limit)
		if err != nil {
			t.Fatalf("Newest: %v", err)
		}
		var ids []string
		for _, e := range got {
			ids = append(ids, e.Key)
		}
		if !slices.Equal(ids, tc.want) {
			t.Errorf("newest %d: got %v, want %v", tc.limit, ids, tc.want)
		}
	}
}

// TestSearchFindsOperationalEvents: hookstream's own operational events
// are events like any other to a search: no source, or a glob that
// matches their source, finds them.
func TestSearchFindsOperationalEvents(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 1, 1<<20)
	now := time.Now().Truncate(time.Millisecond)
	writeEvents(t, env, []*kgo.Record{
		eventRecord(t, env.Names, "shop", "1", "order.created", now),
		eventRecord(t, env.Names, topics.OperationalSource, "op1", topics.OpSubscriptionDisabled, now),
	})
	svc := events.New(env.ClusterOf(env.Client(t)), nil, nil)
	for _, tc := range []struct {
		source string
		want   []string
	}{
		{"", []string{"hookstream:op1", "shop:1"}},
		{"hook*", []string{"hookstream:op1"}},
		{"*", []string{"hookstream:op1", "shop:1"}},
		{"shop", []string{"shop:1"}},
	} {
		page, err := svc.Search(testContext(t), events.Query{Source: tc.source})
		if err != nil {
			t.Fatalf("Search: %v", err)
		}
		if got := keys(page.Events); !slices.Equal(got, tc.want) {
			t.Errorf("source %q: got %v, want %v", tc.source, got, tc.want)
		}
	}
}

// serveEvents serves the events API and the story query on env, as run
// mounts them.
func serveEvents(t *testing.T, env *kafkatest.Env) func(path string) (int, []byte) {
	t.Helper()
	cl := env.Client(t)
	log := kafkatest.Logger(t)
	srv := admin.New(admin.Config{Token: token}, prometheus.NewRegistry(), log)
	c := env.ClusterOf(cl)
	registry := subscriptions.NewRegistry(c, log)
	events.New(c, registry, events.NewStoryQuery(nil, registry, c, "", log)).Mount(srv)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return func(path string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequestWithContext(testContext(t), http.MethodGet, hs.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
}

// TestSearchAPI pages through a search over HTTP with limit and cursor,
// and checks that bad parameters are 400 with a message naming them and
// that the story query still answers under /api/events/.
func TestSearchAPI(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 2, 1<<20)
	names := env.Names
	now := time.Now().Truncate(time.Millisecond)
	var recs []*kgo.Record
	for i := range 5 {
		recs = append(recs, eventRecord(t, names, "stripe", fmt.Sprintf("evt%d", i), "invoice.paid", now.Add(-time.Duration(5-i)*time.Minute)))
	}
	recs = append(recs, eventRecord(t, names, "github", "g1", "push", now.Add(-time.Minute)))
	writeEvents(t, env, recs)
	get := serveEvents(t, env)

	var got []events.Result
	cursor := ""
	for pages := 1; ; pages++ {
		q := url.Values{"source": {"stripe"}, "type": {"invoice.*"}, "since": {"1h"}, "limit": {"2"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		status, body := get("/api/events?" + q.Encode())
		if status != http.StatusOK {
			t.Fatalf("search: got %d %s, want 200", status, body)
		}
		var page events.Page
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatalf("search: %v\n%s", err, body)
		}
		if len(page.Events) > 2 {
			t.Errorf("page %d: got %d events, want at most 2", pages, len(page.Events))
		}
		got = append(got, page.Events...)
		if cursor = page.Cursor; cursor == "" {
			break
		}
		if pages > 10 {
			t.Fatal("no end after 10 pages")
		}
	}
	want := []string{"stripe:evt0", "stripe:evt1", "stripe:evt2", "stripe:evt3", "stripe:evt4"}
	if got := keys(got); !slices.Equal(got, want) {
		t.Errorf("search over pages: got %v, want %v", got, want)
	}

	for _, tt := range []struct{ query, err string }{
		{"type=[", `type: invalid glob "["`},
		{"since=yesterday", `since: "yesterday" is neither an RFC 3339 time nor a positive duration (2h, 30m)`},
		{"since=1h&until=2h", "since must be before until"},
		{"limit=0", "limit: want a number from 1 to 100"},
		{"limit=101", "limit: want a number from 1 to 100"},
		{"cursor=bm9wZQ", "cursor: not a cursor of this search"},
		{"cursor=" + strings.Repeat("A", 70<<10), "cursor: longer than 65536 bytes: not a cursor of this search"},
	} {
		status, body := get("/api/events?" + tt.query)
		var e struct{ Error string }
		_ = json.Unmarshal(body, &e)
		if status != http.StatusBadRequest || e.Error != tt.err {
			t.Errorf("GET /api/events?%.40s: got %d %q, want 400 %q", tt.query, status, e.Error, tt.err)
		}
	}

	// The story of one event is still its own route.
	status, body := get("/api/events/" + url.PathEscape("stripe:evt0"))
	if status == http.StatusOK || strings.Contains(string(body), `"events"`) {
		t.Errorf("GET /api/events/stripe:evt0 without a processor: got %d %s, want the story query's refusal", status, body)
	}
}
