package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hookstream/hookstream/instances"
	"github.com/hookstream/hookstream/internal/kafkatest"
)

// TestInstancesCommand runs hookstream with every role and lists the
// deployment as an operator does: one instance, at the admin address it
// advertises, with its three roles (from its /readyz), a processor and a
// dispatcher member, and ready; the admin API lists it too, as itself.
func TestInstancesCommand(t *testing.T) {
	t.Parallel()
	d := newEmbedded(t)
	d.run(t, "hookstream run")
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		return lagReplayRun(t, map[string]string{"HOOKSTREAM_EMBEDDED_ADDR": d.brokerAddr}, args...)
	}
	check := func(list instances.List, self bool) error {
		if len(list.Instances) != 1 {
			return fmt.Errorf("got %d instances, want 1: %+v", len(list.Instances), list)
		}
		in := list.Instances[0]
		got := fmt.Sprintf("%s %v %s %s %d", in.AdminAddr, in.Self, strings.Join(in.Roles, ","), in.Readiness, len(in.Members))
		if want := fmt.Sprintf("%s %v dispatcher,ingest,processor ready 2", d.adminAddr, self); got != want {
			return fmt.Errorf("instance: got %q, want %q (%+v)", got, want, in)
		}
		return nil
	}
	kafkatest.WaitFor(t, 30*time.Second, func() error { // the retry consumer joins once subscriptions are read
		out, errOut, code := cli("instances", "--output", "json")
		if code != 0 {
			return fmt.Errorf("instances: exit %d, %s", code, errOut)
		}
		var list instances.List
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			return fmt.Errorf("instances --output json: %v\n%s", err, out)
		}
		return check(list, false)
	})

	out, errOut, code := cli("instances")
	if code != 0 {
		t.Fatalf("instances: exit %d, %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ADMIN ADDRESS") ||
		!strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), d.adminAddr+" 127.0.0.1 dispatcher,ingest,processor ready ") {
		t.Errorf("instances table: got\n%s\nwant a header and the instance, ready", out)
	}

	status, body, err := httpGet("http://" + d.adminAddr + "/api/instances")
	if err != nil || status != 200 {
		t.Fatalf("GET /api/instances: %d %s %v", status, body, err)
	}
	var list instances.List
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatalf("GET /api/instances: %v\n%s", err, body)
	}
	if err := check(list, true); err != nil {
		t.Errorf("GET /api/instances: %v", err)
	}
}
