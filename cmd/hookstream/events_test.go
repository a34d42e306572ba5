package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstream/hookstream/events"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestEventStory follows one event through everything the ledger tells:
// posted twice (the second a duplicate the processor drops), delivered to
// one subscriber at once and to another after two failures, dead-lettered
// for a third, and replayed once by resetting the processor group's
// offsets. `hookstream events get` tells all of it in time order, the same
// after every process restarted and after the state directory is deleted
// (the ledger is restored from the changelog).
func TestEventStory(t *testing.T) {
	t.Parallel()
	d := newEmbedded(t)
	d.extra = map[string]string{
		"HOOKSTREAM_DELIVERY_SCHEDULE":      "100ms,100ms",
		"HOOKSTREAM_DELIVERY_DISABLE_AFTER": "1h",
		"HOOKSTREAM_TRACE_URL":              "http://localhost:16686/trace/{trace_id}",
	}
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		return lagReplayRun(t, map[string]string{"HOOKSTREAM_EMBEDDED_ADDR": d.brokerAddr, "HOOKSTREAM_ADMIN_ADDR": d.adminAddr}, args...)
	}
	var flakyCalls atomic.Int64
	sinks := map[string]http.HandlerFunc{
		"ok": func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) },
		"flaky": func(w http.ResponseWriter, r *http.Request) {
			if flakyCalls.Add(1) <= 2 {
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		},
		"broken": func(w http.ResponseWriter, r *http.Request) { http.Error(w, "broken", http.StatusInternalServerError) },
	}
	run := d.run(t, "hookstream run")
	subs := map[string]string{} // sink -> subscription id
	for name, h := range sinks {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		out, errOut, code := cli("subscriptions", "add", "--url", srv.URL, "--from", "earliest", "--output", "json")
		var sub struct{ ID string }
		if code != 0 || json.Unmarshal([]byte(out), &sub) != nil {
			t.Fatalf("subscriptions add: exit %d, %s %s", code, out, errOut)
		}
		subs[name] = sub.ID
	}
	const id = "github:story-1"
	story := func() (events.Story, string) {
		t.Helper()
		out, errOut, code := cli("events", "get", id, "--output", "json")
		var s events.Story
		if code != 0 || json.Unmarshal([]byte(out), &s) != nil {
			return s, fmt.Sprintf("events get: exit %d, %s %s", code, out, errOut)
		}
		return s, ""
	}
	deliveries := func(s events.Story) map[string]string {
		got := map[string]string{}
		for _, dl := range s.Deliveries {
			for name, sub := range subs {
				if sub == dl.Subscription {
					got[name] = fmt.Sprintf("%s after %d", dl.State, dl.Attempts)
				}
			}
		}
		return got
	}
	waitStory := func(p *process, dups, replays uint32, want map[string]string) events.Story {
		t.Helper()
		var s events.Story
		kafkatest.WaitFor(t, 60*time.Second, func() error {
			p.mustBeAlive(t)
			var problem string
			if s, problem = story(); problem != "" {
				return fmt.Errorf("%s", problem)
			}
			if got := deliveries(s); s.Duplicates.Count != dups || s.Replays.Count != replays || fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("got %d duplicates, %d replays, deliveries %v; want %d, %d, %v", s.Duplicates.Count, s.Replays.Count, got, dups, replays, want)
			}
			return nil
		})
		return s
	}

	if _, _, code := cli("events", "get", "github:never-sent"); code == 0 {
		t.Errorf("events get of an unknown event: exit 0, want an error")
	}
	d.mustAccept(t, "story-1", `{"type":"push"}`)
	first := waitStory(run, 0, 0, map[string]string{"ok": "delivered after 1", "flaky": "delivered after 3", "broken": "dead_lettered after 3"})
	if first.ReceivedAt == nil || first.Status != "done" || first.ProcessedAt.Before(*first.ReceivedAt) {
		t.Errorf("story: got %+v, want received, then processed", first)
	}
	if len(first.TraceID) != 32 || first.TraceURL != "http://localhost:16686/trace/"+first.TraceID {
		t.Errorf("story's trace: got %q, link %q; want a trace id and its link by HOOKSTREAM_TRACE_URL", first.TraceID, first.TraceURL)
	}

	// A restart forgets the receiver's fast path: the provider's retry is
	// accepted again and dropped by the processor.
	stop(t, run)
	run = d.run(t, "hookstream run, restarted")
	d.mustAccept(t, "story-1", `{"type":"push"}`)
	waitStory(run, 1, 0, map[string]string{"ok": "delivered after 1", "flaky": "delivered after 3", "broken": "dead_lettered after 3"})

	// Replay: the processor stopped, its group is reset to the start.
	stop(t, run)
	run = d.runRoles(t, "hookstream run without the processor", "ingest,dispatcher")
	if out, errOut, code := cli("replay", "--group", "processor", "--to-earliest", "--execute"); code != 0 {
		t.Fatalf("replay: exit %d, %s %s", code, out, errOut)
	}
	stop(t, run)
	run = d.run(t, "hookstream run after the replay")
	// The replay re-reads both records: the first is emitted again (and
	// delivered again), the second is dropped again.
	want := map[string]string{"ok": "delivered after 2", "flaky": "delivered after 4", "broken": "dead_lettered after 6"}
	replayed := waitStory(run, 2, 1, want)

	// The story names the event's latest events record: the replay's.
	if first.Events == nil || replayed.Events == nil || replayed.Events.Partition != replayed.Partition || replayed.Events.Offset <= first.Events.Offset {
		t.Errorf("events records: first %+v, after the replay %+v; want the replay's, later in partition %d", first.Events, replayed.Events, replayed.Partition)
	}
	table, errOut, code := cli("events", "get", id)
	if code != 0 {
		t.Fatalf("events get: exit %d, %s", code, errOut)
	}
	// The replay is in the event's trace: the story keeps it.
	if wantTrace := "TRACE " + first.TraceID + "  http://localhost:16686/trace/" + first.TraceID; replayed.TraceID != first.TraceID || !strings.Contains(table, wantTrace) {
		t.Errorf("events get after the replay: trace %q, want %q; table\n%s\nwant %q", replayed.TraceID, first.TraceID, table, wantTrace)
	}
	if replayed.Events != nil && !strings.Contains(table, fmt.Sprintf("this the last, offset %d)", replayed.Events.Offset)) {
		t.Errorf("events get table: no offset of the replay's events record in\n%s", table)
	}
	// In time order; the duplicate dropped last is the replay's re-read.
	last := -1
	for _, marker := range []string{"received by ingest", "processed: emitted", subs["flaky"] + ": attempt 1 failed", subs["flaky"] + ": attempt 3 delivered", "replayed", "duplicate dropped", subs["broken"] + ": dead-lettered after 6"} {
		i := strings.Index(table, marker)
		switch {
		case i < 0:
			t.Errorf("events get table: no %q in\n%s", marker, table)
		case i < last:
			t.Errorf("events get table: %q before the line above it in\n%s", marker, table)
		}
		last = max(last, i)
	}

	// The ledger lives in the changelog: a lost state directory is rebuilt.
	stop(t, run)
	if err := os.RemoveAll(filepath.Join(d.dataDir, "state")); err != nil {
		t.Fatal(err)
	}
	run = d.run(t, "hookstream run without its state directory")
	restored, problem := story()
	if problem != "" {
		t.Fatal(problem)
	}
	a, _ := json.Marshal(replayed)
	b, _ := json.Marshal(restored)
	if string(a) != string(b) {
		t.Errorf("story after the state directory was deleted:\n got %s\nwant %s", b, a)
	}
	stop(t, run)
}

// interrupt sends p SIGINT, as Ctrl-C does, and returns its exit code;
// it fails the test if p still runs after timeout.
func interrupt(t *testing.T, p *process, timeout time.Duration) int {
	t.Helper()
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatalf("SIGINT %s: %v", p.name, err)
	}
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("%s still running %v after SIGINT; its last lines:\n%s", p.name, timeout, p.output.tail(5))
		return -1
	}
}

func stop(t *testing.T, p *process) {
	t.Helper()
	if code := p.stop(t, 30*time.Second); code != 0 {
		t.Fatalf("exit code after SIGTERM: got %d, want 0", code)
	}
}

// TestEventsTailAndSearch: tail prints the events that commit while it
// runs and pass its filters; search finds those of a time range.
func TestEventsTailAndSearch(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 3, 1<<20)
	cliEnv := map[string]string{"HOOKSTREAM_BROKERS": strings.Join(env.Seeds, ","), "HOOKSTREAM_TOPIC_PREFIX": env.Names.Prefix}
	cl := env.Client(t)
	emit := func(source, id, typ string) {
		t.Helper()
		in := kafkatest.IngestRecord(env.Names, source, id, `{"n":1}`)
		for i, h := range in.Headers {
			if h.Key == topics.HeaderEventType {
				in.Headers[i].Value = []byte(typ)
			}
		}
		e, err := topics.NewEnvelope(in, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		rec, err := topics.EventRecord(env.Names.Events, in, e)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	emit("stripe", "old", "invoice.paid")

	tail := startProcess(t, "events tail", cliEnv, "events", "tail", "--source", "stripe", "--type", "invoice.*")
	// The tail starts at the end: wait until it is past the old event's
	// partition ends before emitting new ones.
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		tail.mustBeAlive(t)
		emit("stripe", "probe-"+fmt.Sprint(time.Now().UnixNano()), "invoice.paid")
		if !strings.Contains(tail.output.String(), "stripe:probe-") {
			return fmt.Errorf("tail printed nothing yet")
		}
		return nil
	})
	emit("github", "other", "invoice.paid")
	emit("stripe", "refund", "charge.refunded")
	emit("stripe", "new", "invoice.created")
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if !strings.Contains(tail.output.String(), "stripe:new") {
			return fmt.Errorf("tail output so far: %s", tail.output.String())
		}
		return nil
	})
	if out := tail.output.String(); strings.Contains(out, "github:other") || strings.Contains(out, "stripe:refund") || strings.Contains(out, "stripe:old") {
		t.Errorf("tail printed events its filters exclude, or from before it started:\n%s", out)
	}
	if code := interrupt(t, tail, 30*time.Second); code != 0 || strings.Contains(tail.output.String(), "hookstream:") {
		t.Errorf("tail after Ctrl-C: exit %d, output\n%s\nwant exit 0 and no error", code, tail.output.String())
	}

	out, errOut, code := lagReplayRun(t, cliEnv, "events", "search", "--since", "1h", "--source", "stripe", "--type", "invoice.*", "--output", "json")
	if code != 0 {
		t.Fatalf("search: exit %d, %s", code, errOut)
	}
	var ids []string
	var times []time.Time
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e struct {
			ID          string
			ProcessedAt time.Time `json:"processed_at"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("search: line %q is not an envelope: %v", line, err)
		}
		ids, times = append(ids, e.ID), append(times, e.ProcessedAt)
	}
	joined := strings.Join(ids, " ")
	if !strings.Contains(joined, "stripe:old") || !strings.Contains(joined, "stripe:new") || strings.Contains(joined, "github:other") || strings.Contains(joined, "stripe:refund") {
		t.Errorf("search --since 1h --source stripe --type invoice.*: got %v", ids)
	}
	// The events went to three partitions; the search prints them in the
	// order they were written.
	if !slices.IsSortedFunc(times, time.Time.Compare) || ids[0] != "stripe:old" || ids[len(ids)-1] != "stripe:new" {
		t.Errorf("search: got %v written at %v, want them in time order, stripe:old first and stripe:new last", ids, times)
	}
	out, errOut, code = lagReplayRun(t, cliEnv, "events", "search", "--since", "1h", "--limit", "1", "--output", "json")
	if code != 0 || strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.Contains(out, "stripe:old") {
		t.Errorf("search --limit 1: exit %d, got %q, want the first envelope, stripe:old", code, out)
	}
	if want := "stopped at --limit 1:"; !strings.Contains(errOut, want) {
		t.Errorf("search --limit 1 --output json: stderr %q, want %q", errOut, want)
	}
	if out, _, _ := lagReplayRun(t, cliEnv, "events", "search", "--since", "1h", "--limit", "1"); !strings.Contains(out, "1 events (stopped at --limit 1:") {
		t.Errorf("search --limit 1: got %q, want the count and where it stopped", out)
	}
	if out, _, code := lagReplayRun(t, cliEnv, "events", "search", "--since", time.Now().Add(time.Hour).Format(time.RFC3339), "--until", time.Now().Add(2*time.Hour).Format(time.RFC3339)); code != 0 || !strings.Contains(out, "0 events") {
		t.Errorf("search of a range with nothing: exit %d, got %q, want 0 events", code, out)
	}
	if _, errOut, code := lagReplayRun(t, cliEnv, "events", "search"); code == 0 || !strings.Contains(errOut, "--since: required") {
		t.Errorf("search without --since: exit %d, stderr %q, want the error", code, errOut)
	}
}

// TestEventsTailTopic: events tail --topic follows a topic subscription's
// topic from its end and prints each committed record, its key, headers
// and value, until Ctrl-C; a topic that does not exist is an error that
// says so.
func TestEventsTailTopic(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 3, 1<<20)
	cliEnv := map[string]string{"HOOKSTREAM_BROKERS": strings.Join(env.Seeds, ","), "HOOKSTREAM_TOPIC_PREFIX": env.Names.Prefix}
	topic := env.Names.Prefix + ".billing"
	if _, err := env.Admin(t).CreateTopic(context.Background(), 3, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	// Written as the dispatcher writes a topic subscription's records: in
	// transactions.
	cl := env.Client(t, kgo.TransactionalID(topic+"-writer"), kgo.DefaultProduceTopic(topic))
	write := func(id, value string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		r := &kgo.Record{Key: []byte("stripe:" + id), Value: []byte(value), Headers: []kgo.RecordHeader{
			{Key: topics.HeaderSource, Value: []byte("stripe")}, {Key: topics.HeaderEventID, Value: []byte(id)}, {Key: topics.HeaderEventType, Value: []byte("invoice.paid")},
		}}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	write("before", `{"text":"before the tail"}`)

	for _, output := range []string{"table", "json"} {
		tail := startProcess(t, "events tail --topic", cliEnv, "events", "tail", "--topic", topic, "--output", output)
		kafkatest.WaitFor(t, 30*time.Second, func() error {
			tail.mustBeAlive(t)
			write("probe", `{"text":"probe"}`)
			if !strings.Contains(tail.output.String(), "stripe:probe") {
				return fmt.Errorf("tail printed nothing yet")
			}
			return nil
		})
		write("in_1", `{"text":"Invoice in_1 paid"}`)
		kafkatest.WaitFor(t, 30*time.Second, func() error {
			if !strings.Contains(tail.output.String(), "in_1 paid") {
				return fmt.Errorf("tail output so far: %s", tail.output.String())
			}
			return nil
		})
		if code := interrupt(t, tail, 30*time.Second); code != 0 {
			t.Errorf("tail --topic after Ctrl-C: exit %d, want 0", code)
		}
		out := tail.output.String()
		want := []string{"stripe:in_1", "hs-event-type=invoice.paid", `{"text":"Invoice in_1 paid"}`}
		if output == "json" {
			want = []string{`"key":"stripe:in_1"`, `"hs-event-type":"invoice.paid"`, `"value":{"text":"Invoice in_1 paid"}`}
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("tail --topic --output %s: no %q in\n%s", output, w, out)
			}
		}
		if strings.Contains(out, "before") || strings.Contains(out, "hookstream:") {
			t.Errorf("tail --topic --output %s printed a record from before it started, or an error:\n%s", output, out)
		}
	}

	_, errOut, code := lagReplayRun(t, cliEnv, "events", "tail", "--topic", env.Names.Prefix+".nope")
	if want := "no topic " + env.Names.Prefix + ".nope"; code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("tail --topic of a missing topic: exit %d, stderr %q, want 1 and %q", code, errOut, want)
	}
}

// TestEventIDsKeepTheirEscapes: an event id that holds what looks like
// URL escapes, slashes or query characters is the same id everywhere:
// accepted by ingest, answered by the admin API and by `events get`, each
// decoding the path once.
func TestEventIDsKeepTheirEscapes(t *testing.T) {
	t.Parallel()
	d := newEmbedded(t)
	d.run(t, "hookstream run")
	for _, delivery := range []string{"a%41b", "x/y%2Fz", "sp ace?q=1#f", "100%"} {
		id := "github:" + delivery
		d.mustAccept(t, delivery, `{"type":"push"}`)
		kafkatest.WaitFor(t, 60*time.Second, func() error {
			status, body, err := httpGet("http://" + d.adminAddr + "/api/events/" + url.PathEscape(id))
			if err != nil {
				return err
			}
			var s events.Story
			if status != http.StatusOK || json.Unmarshal([]byte(body), &s) != nil || s.ID != id {
				return fmt.Errorf("GET /api/events/%s: got %d %s, want the story of %s", url.PathEscape(id), status, body, id)
			}
			return nil
		})
		cmd := newRootCommand()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(io.Discard)
		cmd.SetArgs([]string{"events", "get", id, "--admin-addr", d.adminAddr, "--output", "json"})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := cmd.ExecuteContext(ctx)
		cancel()
		var s events.Story
		if err != nil || json.Unmarshal(out.Bytes(), &s) != nil || s.ID != id {
			t.Errorf("events get %s: got %v %s, want its story", id, err, out.String())
		}
	}
}

// TestEventFilterAppliesTheSubscriptionsFilter: events tail --subscription
// shows what that subscription receives, its CEL filter included, not
// only what its globs let through.
func TestEventFilterAppliesTheSubscriptionsFilter(t *testing.T) {
	f := &eventFilter{sub: subscriptions.Compile(subscriptions.Subscription{
		ID: "sub_f", Sources: []string{"github"}, Filter: `has(data.action) && data.action == "opened"`,
	})}
	rec := func(source, body string) *kgo.Record {
		return &kgo.Record{
			Headers: []kgo.RecordHeader{{Key: topics.HeaderSource, Value: []byte(source)}, {Key: topics.HeaderEventType, Value: []byte("pull_request")}},
			Value:   []byte(`{"schema_version":"1","id":"` + source + `:1","source":"` + source + `","event_id":"1","type":"pull_request","data":` + body + `}`),
		}
	}
	for _, tc := range []struct {
		source, body string
		want         bool
	}{
		{"github", `{"action":"opened"}`, true},
		{"github", `{"action":"closed"}`, false},
		{"github", `{}`, false},
		{"stripe", `{"action":"opened"}`, false},
	} {
		if got := f.match(rec(tc.source, tc.body)); got != tc.want {
			t.Errorf("%s %s: match %v, want %v", tc.source, tc.body, got, tc.want)
		}
	}
}

// TestPrintedRecordsAreOneLineEach: an envelope whose payload keeps its
// provider's indentation prints as one line in tail's JSON output, and
// as its line plus one in the table of a topic's records.
func TestPrintedRecordsAreOneLineEach(t *testing.T) {
	value := []byte("{\"id\":\"github:1\",\"type\":\"push\",\"data\":{\n  \"ref\": \"main\",\n  \"commits\": [\n    1\n  ]\n}}")
	r := &kgo.Record{Key: []byte("github:1"), Value: value, Timestamp: time.Now()}
	for _, tc := range []struct {
		name  string
		print func(*bytes.Buffer) error
		lines int
	}{
		{"events tail --output json", func(b *bytes.Buffer) error { return printEvent(b, "json", r) }, 1},
		{"events tail --topic", func(b *bytes.Buffer) error { return printRecord(b, "table", r) }, 2},
	} {
		var b bytes.Buffer
		if err := tc.print(&b); err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(b.String(), "\n"); n != tc.lines {
			t.Errorf("%s: %d lines, want %d:\n%s", tc.name, n, tc.lines, b.String())
		}
	}
}
