package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/processor"
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
	story := func() (processor.Story, string) {
		t.Helper()
		out, errOut, code := cli("events", "get", id, "--output", "json")
		var s processor.Story
		if code != 0 || json.Unmarshal([]byte(out), &s) != nil {
			return s, fmt.Sprintf("events get: exit %d, %s %s", code, out, errOut)
		}
		return s, ""
	}
	deliveries := func(s processor.Story) map[string]string {
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
	waitStory := func(p *process, dups, replays uint32, want map[string]string) processor.Story {
		t.Helper()
		var s processor.Story
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

	table, errOut, code := cli("events", "get", id)
	if code != 0 {
		t.Fatalf("events get: exit %d, %s", code, errOut)
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

func stop(t *testing.T, p *process) {
	t.Helper()
	if code := p.stop(t, 30*time.Second); code != 0 {
		t.Fatalf("exit code after SIGTERM: got %d, want 0", code)
	}
}
