package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookstream/hookstream/internal/kafkatest"
)

// TestEventsResendCommand: an event delivered once is resent with
// hookstream events resend; the subscriber receives it again with the
// same webhook-id, and events get tells the resend. A subscription that
// does not exist is refused in one line.
func TestEventsResendCommand(t *testing.T) {
	t.Parallel()
	d := newEmbedded(t)
	run := d.run(t, "hookstream run")
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		return lagReplayRun(t, map[string]string{"HOOKSTREAM_EMBEDDED_ADDR": d.brokerAddr, "HOOKSTREAM_ADMIN_ADDR": d.adminAddr}, args...)
	}
	var (
		mu  sync.Mutex
		ids []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ids = append(ids, r.Header.Get("webhook-id"))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	received := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), ids...)
	}
	out, errOut, code := cli("subscriptions", "add", "--url", srv.URL, "--from", "earliest", "--output", "json")
	var sub struct{ ID string }
	if code != 0 || json.Unmarshal([]byte(out), &sub) != nil {
		t.Fatalf("subscriptions add: exit %d, %s %s", code, out, errOut)
	}
	const id = "github:resend-1"
	d.mustAccept(t, "resend-1", `{"type":"push"}`)
	waitGet := func(want string) string {
		t.Helper()
		var table string
		kafkatest.WaitFor(t, 60*time.Second, func() error {
			run.mustBeAlive(t)
			var errOut string
			var code int
			if table, errOut, code = cli("events", "get", id); code != 0 {
				return fmt.Errorf("events get: exit %d, %s", code, errOut)
			}
			if !strings.Contains(table, want) {
				return fmt.Errorf("events get: no %q in\n%s", want, table)
			}
			return nil
		})
		return table
	}
	waitGet(sub.ID + ": attempt 1 delivered")

	out, errOut, code = cli("events", "resend", id, "--subscription", sub.ID)
	if want := "resend of " + id + " to " + sub.ID + " written, due now as attempt 1"; code != 0 || !strings.HasPrefix(out, want) {
		t.Fatalf("events resend: exit %d, %q %q; want %q", code, out, errOut, want)
	}
	waitGet(sub.ID + ": resend, attempt 1 delivered")
	if got := received(); fmt.Sprint(got) != fmt.Sprint([]string{id, id}) {
		t.Errorf("subscriber received %v, want %s twice", got, id)
	}

	// A subscription that would not receive the event: refused, and the
	// refusal says how to resend anyway.
	out, errOut, code = cli("subscriptions", "add", "--url", srv.URL, "--source", "crm", "--output", "json")
	var crm struct{ ID string }
	if code != 0 || json.Unmarshal([]byte(out), &crm) != nil {
		t.Fatalf("subscriptions add --source crm: exit %d, %s %s", code, out, errOut)
	}
	_, errOut, code = cli("events", "resend", id, "--subscription", crm.ID)
	if want := fmt.Sprintf("subscription %s would not receive %s: source \"github\" matches none of sources [\"crm\"]; resend with --force to send it anyway\n", crm.ID, id); code != 1 || !strings.HasSuffix(errOut, want) {
		t.Errorf("events resend to a subscription that would not receive it: exit %d, %q; want 1, ending %q", code, errOut, want)
	}

	_, errOut, code = cli("events", "resend", id, "--subscription", "sub_nope")
	if want := "hookstream: admin API at " + d.adminAddr + ": no subscription sub_nope (hookstream subscriptions list shows them)\n"; code != 1 || errOut != want {
		t.Errorf("events resend to an unknown subscription: exit %d, %q; want 1, %q", code, errOut, want)
	}
	_, errOut, code = cli("events", "resend", id)
	if want := "hookstream: --subscription: required (the id of the subscription to resend to)\n"; code != 1 || errOut != want {
		t.Errorf("events resend without --subscription: exit %d, %q; want 1, %q", code, errOut, want)
	}
}
