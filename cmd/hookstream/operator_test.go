package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookstream/hookstream/internal/kafkatest"
)

// TestOperatorCLIAgainstRunningBinary is an operator's session against a
// running `hookstream run`: subscribe an endpoint, see events delivered,
// read lag, refuse a replay while the processor runs, and manage the
// subscription, all with the CLI and no flags beyond the embedded address.
func TestOperatorCLIAgainstRunningBinary(t *testing.T) {
	t.Parallel()
	d := newEmbedded(t)
	proc := d.run(t, "hookstream run")

	var mu sync.Mutex
	got := map[string]int{}
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		got[r.Header.Get("webhook-id")]++
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer sink.Close()
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		env := map[string]string{"HOOKSTREAM_EMBEDDED_ADDR": d.brokerAddr}
		return lagReplayRun(t, env, args...)
	}

	out, errOut, code := cli("subscriptions", "add", "--url", sink.URL+"/hook", "--output", "json")
	var sub struct{ ID, Secret string }
	if code != 0 || json.Unmarshal([]byte(out), &sub) != nil || !strings.HasPrefix(sub.Secret, "whsec_") {
		t.Fatalf("subscriptions add: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	d.mustAccept(t, "op-1", `{"type":"push"}`)
	d.mustAccept(t, "op-2", `{"type":"push"}`)
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		proc.mustBeAlive(t)
		mu.Lock()
		defer mu.Unlock()
		if got["github:op-1"] == 0 || got["github:op-2"] == 0 {
			return fmt.Errorf("delivered: %v", got)
		}
		return nil
	})

	kafkatest.WaitFor(t, 30*time.Second, func() error {
		out, errOut, code := cli("lag", "--output", "json")
		if code != 0 {
			return fmt.Errorf("lag: exit %d: %s", code, errOut)
		}
		var groups []struct {
			Group string
			Total int64
		}
		if err := json.Unmarshal([]byte(out), &groups); err != nil {
			return fmt.Errorf("lag output %q: %v", out, err)
		}
		seen := map[string]int64{}
		for _, g := range groups {
			seen[g.Group] = g.Total
		}
		if lag, ok := seen["hookstream-processor"]; !ok || lag != 0 {
			return fmt.Errorf("processor lag: %v", seen)
		}
		if lag, ok := seen["hookstream-sub-"+sub.ID]; !ok || lag != 0 {
			return fmt.Errorf("subscription lag: %v", seen)
		}
		return nil
	})

	out, errOut, code = cli("replay", "--group", "processor", "--to-earliest", "--execute")
	if code != 1 || !strings.Contains(errOut, "active member") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Errorf("replay while the processor runs: exit %d, stdout %q, stderr %q; want exit 1 and one line naming the active members", code, out, errOut)
	}

	if out, errOut, code = cli("subscriptions", "disable", sub.ID); code != 0 || !strings.Contains(out, "false") {
		t.Errorf("subscriptions disable: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if out, errOut, code = cli("subscriptions", "list"); code != 0 || !strings.Contains(out, sub.ID) || strings.Contains(out, sub.Secret) {
		t.Errorf("subscriptions list: exit %d, stdout %q, stderr %q; want the id and no secret", code, out, errOut)
	}
	if out, errOut, code = cli("subscriptions", "rm", sub.ID); code != 0 {
		t.Errorf("subscriptions rm: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, errOut, code = cli("subscriptions", "get", sub.ID); code != 1 || !strings.Contains(errOut, "subscription not found") {
		t.Errorf("subscriptions get after rm: exit %d, stderr %q; want exit 1 and not found", code, errOut)
	}
	if out, errOut, code = cli("lag"); code != 0 || strings.Contains(out, sub.ID) || !strings.Contains(out, "COMMITTED is the next offset") {
		t.Errorf("lag after rm: exit %d, stdout %q, stderr %q; want no row of the deleted subscription, and the footnote", code, out, errOut)
	}
	want := "hookstream: --group: no subscription " + sub.ID + " (hookstream subscriptions list shows them)\n"
	if _, errOut, code = cli("lag", "--group", "sub:"+sub.ID); code != 1 || errOut != want {
		t.Errorf("lag --group of a deleted subscription: exit %d, stderr %q; want exit 1 and %q", code, errOut, want)
	}
	if out, errOut, code = cli("dlq", "list", "--dlq", "delivery", "--output", "json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("dlq list: exit %d, stdout %q, stderr %q; want an empty list", code, out, errOut)
	}
	if code := proc.stop(t, 20*time.Second); code != 0 {
		t.Errorf("hookstream run exit code: got %d, want 0", code)
	}
}

// TestBenchAgainstRunningBinary runs `hookstream bench --sink` against a
// running `hookstream run`, without and with batched delivery: every
// request is answered, and every distinct event comes back through the
// built-in subscriber with its end-to-end latency.
func TestBenchAgainstRunningBinary(t *testing.T) {
	t.Parallel()
	d := newEmbedded(t)
	proc := d.run(t, "hookstream run")
	// One event per delivery, then batches of up to 20, each verified and
	// each of their events counted by the sink.
	for _, batching := range [][]string{nil, {"--sink-batch-max", "20", "--sink-batch-wait", "200ms"}} {
		args := append([]string{"bench", "--target", "http://" + d.httpAddr, "--rate", "200", "--duration", "2s", "--duplicates", "0.2",
			"--sink", kafkatest.FreeAddr(t), "--output", "json"}, batching...)
		out, errOut, code := lagReplayRun(t, map[string]string{"HOOKSTREAM_EMBEDDED_ADDR": d.brokerAddr}, args...)
		if code != 0 {
			t.Fatalf("bench %v: exit %d, stderr %q", batching, code, errOut)
		}
		var r struct {
			Sent, Completed, Errors int64
			Status                  map[string]int64
			Latency                 struct{ Count int64 }
			EndToEnd                *struct{ Count int64 } `json:"end_to_end"`
			Undelivered             int
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("bench output %q: %v", out, err)
		}
		if r.Sent < 200 || r.Completed != r.Sent || r.Errors != 0 || r.Status["202"] == 0 || r.Status["202"]+r.Status["200"] != r.Completed {
			t.Errorf("bench %v report: got %+v, want every request answered 202 (or 200 for a duplicate)", batching, r)
		}
		if r.EndToEnd == nil || r.EndToEnd.Count == 0 || r.EndToEnd.Count > r.Status["202"] || r.Undelivered != 0 {
			t.Errorf("bench %v end to end: got %+v with %d undelivered, want every distinct event delivered and measured (%d accepted)",
				batching, r.EndToEnd, r.Undelivered, r.Status["202"])
		}
	}
	// Its subscriptions, made and removed by writing the topics, are in
	// the audit trail as the CLI's changes: two runs, two of each.
	out, errOut, code := lagReplayRun(t, map[string]string{"HOOKSTREAM_ADMIN_ADDR": d.adminAddr}, "audit", "--actor", cliActor().Name, "--action", "subscription.*", "--output", "json")
	if code != 0 || strings.Count(out, `"action":"subscription.create"`) != 2 || strings.Count(out, `"action":"subscription.delete"`) != 2 {
		t.Errorf("audit of bench's subscriptions: exit %d, stderr %q, got\n%s\nwant two subscription.create and two subscription.delete", code, errOut, out)
	}
	if code := proc.stop(t, 20*time.Second); code != 0 {
		t.Errorf("hookstream run exit code: got %d, want 0", code)
	}
}

// TestBenchWaitsForTheSinkGroup: bench --sink sends nothing until a
// dispatcher consumes its subscription, so the group's forming is not
// counted as latency; with no dispatcher running it says so and sends
// nothing.
func TestBenchWaitsForTheSinkGroup(t *testing.T) {
	t.Parallel()
	d := newEmbedded(t)
	proc := d.runRoles(t, "hookstream run --roles ingest,processor", "ingest,processor")
	out, errOut, code := lagReplayRun(t, map[string]string{"HOOKSTREAM_EMBEDDED_ADDR": d.brokerAddr}, "bench", "--target", "http://"+d.httpAddr,
		"--rate", "200", "--duration", "1s", "--sink", kafkatest.FreeAddr(t), "--sink-join-timeout", "3s")
	if code != 1 || !strings.Contains(errOut, "did not form within 3s") || !strings.Contains(errOut, "is a dispatcher running?") || strings.Contains(out, "sent") {
		t.Errorf("bench --sink without a dispatcher: exit %d, stdout %q, stderr %q; want exit 1, no report, and the group that did not form", code, out, errOut)
	}
	if code := proc.stop(t, 20*time.Second); code != 0 {
		t.Errorf("hookstream run exit code: got %d, want 0", code)
	}
}
