package groups

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
)

// serveGroups serves the groups API on env as run mounts it, and returns
// a function calling it: method, path and body (nil: none) to status and
// body.
func serveGroups(t *testing.T, env *kafkatest.Env) (*Service, func(method, path string, body any) (int, []byte)) {
	t.Helper()
	cl := env.Client(t)
	log := kafkatest.Logger(t)
	a := New(env.ClusterOf(cl), subscriptions.NewRegistry(env.ClusterOf(cl), log))
	srv := admin.New(admin.Config{Token: "t0ken"}, prometheus.NewRegistry(), log)
	a.Mount(srv)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return a, func(method, path string, body any) (int, []byte) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequestWithContext(testContext(t), method, hs.URL+path, rd)
		req.Header.Set("Authorization", "Bearer t0ken")
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return resp.StatusCode, raw
	}
}

// joinProcessorGroup puts a consumer in the processor group until the
// returned function is called, and returns its member id once the group
// is stable with it.
func joinProcessorGroup(t *testing.T, env *kafkatest.Env) (string, func()) {
	t.Helper()
	consumer, err := kgo.NewClient(
		kgo.SeedBrokers(env.Seeds...),
		kgo.ConsumerGroup(string(env.Names.ProcessorGroup())),
		kgo.ConsumeTopics(string(env.Names.Ingest)),
		kgo.DisableAutoCommit(),
	)
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	var once sync.Once
	leave := func() { once.Do(consumer.Close) }
	t.Cleanup(leave)
	var member string
	group := string(env.Names.ProcessorGroup())
	kafkatest.WaitFor(t, 20*time.Second, func() error {
		if member, _ = consumer.GroupMetadata(); member == "" {
			return fmt.Errorf("consumer has not joined %s yet", group)
		}
		infos, err := describe(testContext(t), env.Admin(t), group)
		if err != nil {
			return err
		}
		if got := infos[group]; got.state != "Stable" || len(got.owners) == 0 {
			return fmt.Errorf("group state %s, owners %v", got.state, got.owners)
		}
		return nil
	})
	return member, leave
}

// TestGroupsAPI reads the groups' lag over HTTP as the console does: the
// list with each group's totals, state and members; one group per
// partition with the member assigned it; and the errors of a bad name and
// of a subscription that does not exist.
func TestGroupsAPI(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 2, maxBody)
	names := env.Names
	fill(t, env, 4, 1)
	commit(t, env.Admin(t), names.ProcessorGroup(), names.Ingest, map[int32]int64{0: 1, 1: 1})
	a, call := serveGroups(t, env)
	sub := subscriptions.Subscription{URL: "http://127.0.0.1:1/"}
	if err := a.registry.Create(testContext(t), &sub, "earliest"); err != nil {
		t.Fatalf("create subscription: %v", err)
	}
	// A deleted subscription's group keeps its offsets: it is not shown.
	commit(t, env.Admin(t), names.SubscriptionGroup("sub_gone"), names.Events, map[int32]int64{0: 0})
	member, _ := joinProcessorGroup(t, env)

	status, body := call("GET", "/api/groups", nil)
	if status != http.StatusOK {
		t.Fatalf("GET /api/groups: got %d %s, want 200", status, body)
	}
	var list []GroupLag
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatalf("GET /api/groups: %v\n%s", err, body)
	}
	var got []string
	for _, g := range list {
		got = append(got, fmt.Sprintf("%s %s %d %d", g.Group, g.State, len(g.MemberNames), g.Total))
		if g.Partitions != nil {
			t.Errorf("GET /api/groups: %s: got partitions %v, want none in the list", g.Group, g.Partitions)
		}
	}
	want := []string{
		string(names.ProcessorGroup()) + " Stable 1 3",
		string(names.RetryGroup()) + " Dead 0 0",
		string(names.SubscriptionGroup(sub.ID)) + " Empty 0 0",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("GET /api/groups: got %q, want %q", got, want)
	}

	status, body = call("GET", "/api/groups/processor", nil)
	if status != http.StatusOK {
		t.Fatalf("GET /api/groups/processor: got %d %s, want 200", status, body)
	}
	var one GroupLag
	if err := json.Unmarshal(body, &one); err != nil {
		t.Fatalf("GET /api/groups/processor: %v\n%s", err, body)
	}
	if got, want := len(one.MemberNames), 1; got != want || !strings.HasPrefix(one.MemberNames[0], member+" on ") {
		t.Fatalf("GET /api/groups/processor: members %v, want %s on its host", one.MemberNames, member)
	}
	var rows []string
	for _, p := range one.Partitions {
		rows = append(rows, fmt.Sprintf("%d %d %d %d %s", p.Partition, p.Committed, p.End, p.Lag, p.Member))
	}
	wantRows := []string{"0 1 4 3 " + one.MemberNames[0], "1 1 1 0 " + one.MemberNames[0]}
	if fmt.Sprint(rows) != fmt.Sprint(wantRows) {
		t.Errorf("GET /api/groups/processor: got rows %q, want %q", rows, wantRows)
	}

	for _, tt := range []struct {
		path   string
		status int
		err    string
	}{
		{"/api/groups/sub:" + sub.ID, http.StatusOK, ""},
		{"/api/groups/" + string(names.SubscriptionGroup(sub.ID)), http.StatusOK, ""},
		{"/api/groups/sub:sub_gone", http.StatusNotFound, "no subscription sub_gone (hookstream subscriptions list shows them)"},
		{"/api/groups/consumers", http.StatusBadRequest, `unknown group "consumers": want processor, retry, sub:<id> or a full name such as ` + string(names.ProcessorGroup())},
		{"/api/groups/retry", http.StatusNotFound, "group " + string(names.RetryGroup()) + " does not exist: no consumer has joined it or committed offsets"},
	} {
		status, body := call("GET", tt.path, nil)
		var e struct{ Error string }
		_ = json.Unmarshal(body, &e)
		if status != tt.status || e.Error != tt.err {
			t.Errorf("GET %s: got %d %q, want %d %q", tt.path, status, e.Error, tt.status, tt.err)
		}
	}
}

// TestReplayAPI plans and executes replays over HTTP as the console does:
// the plan carries the text hookstream replay prints; executing is refused
// (409, naming the member) while the group has one, and leaves the
// offsets; once the member left it commits. Bad input is 400.
func TestReplayAPI(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 2, maxBody)
	names := env.Names
	adm := env.Admin(t)
	fill(t, env, 4, 2)
	commit(t, adm, names.ProcessorGroup(), names.Ingest, map[int32]int64{0: 4, 1: 2})
	a, call := serveGroups(t, env)
	_, leave := joinProcessorGroup(t, env)

	req := ReplayRequest{Group: "processor", Target: TargetOffsets, Value: "0:1"}
	status, body := call("POST", "/api/replay/plan", req)
	if status != http.StatusOK {
		t.Fatalf("plan: got %d %s, want 200", status, body)
	}
	var r Replay
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("plan: %v\n%s", err, body)
	}
	direct, err := a.Replay(testContext(t), "processor", "", nil, Target{Offsets: map[int32]int64{0: 1}}, false)
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if r.Text != direct.Text {
		t.Errorf("plan text: got\n%s\nwant what the command prints:\n%s", r.Text, direct.Text)
	}
	for _, want := range []string{
		"Replay of group " + string(names.ProcessorGroup()) + " on " + string(names.Ingest) + " to offsets 0:1:",
		"Records to re-read: 3.",
		"Active members: ",
	} {
		if !strings.Contains(r.Text, want) {
			t.Errorf("plan text: got\n%s\nwant it to contain %q", r.Text, want)
		}
	}
	if r.Executable || !strings.Contains(r.Refusal, "has 1 active member") || r.Executed {
		t.Errorf("plan with a member: got executable %v, refusal %q, executed %v; want refused naming the member", r.Executable, r.Refusal, r.Executed)
	}

	status, body = call("POST", "/api/replay/execute", req)
	var e struct{ Error string }
	_ = json.Unmarshal(body, &e)
	if status != http.StatusConflict || e.Error != r.Refusal {
		t.Errorf("execute with a member: got %d %q, want 409 %q", status, e.Error, r.Refusal)
	}
	if got, want := fmt.Sprint(committed(t, adm, names.ProcessorGroup(), names.Ingest, 2)), "[4 2]"; got != want {
		t.Errorf("offsets after the refusal: got %s, want %s", got, want)
	}

	leave()
	status, body = call("POST", "/api/replay/execute", req)
	if status != http.StatusOK {
		t.Fatalf("execute: got %d %s, want 200", status, body)
	}
	r = Replay{}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("execute: %v\n%s", err, body)
	}
	if !r.Executed || !r.Executable {
		t.Errorf("execute: got executed %v, executable %v, want both", r.Executed, r.Executable)
	}
	if got, want := fmt.Sprint(committed(t, adm, names.ProcessorGroup(), names.Ingest, 2)), "[1 2]"; got != want {
		t.Errorf("offsets after execute: got %s, want %s", got, want)
	}

	for _, tt := range []struct {
		name string
		body any
		err  string
	}{
		{"no group", ReplayRequest{Target: TargetEarliest}, "group: required (processor, retry, sub:<id> or a full group name)"},
		{"bad group", ReplayRequest{Group: "consumers", Target: TargetEarliest}, `unknown group "consumers": want processor, retry, sub:<id> or a full name such as ` + string(names.ProcessorGroup())},
		{"no target", ReplayRequest{Group: "processor"}, `unknown target "": want earliest, latest, time, duration or offsets`},
		{"bad time", ReplayRequest{Group: "processor", Target: TargetTime, Value: "yesterday"}, `"yesterday": not an RFC 3339 time such as 2026-11-21T10:00:00Z`},
		{"bad duration", ReplayRequest{Group: "processor", Target: TargetDuration, Value: "-5m"}, `"-5m": not a positive duration such as 90m or 2h`},
		{"value on earliest", ReplayRequest{Group: "processor", Target: TargetEarliest, Value: "1"}, `target earliest takes no value, got "1"`},
		{"offsets and partitions", ReplayRequest{Group: "processor", Target: TargetOffsets, Value: "0:1", Partitions: []int32{0}}, "replay: offsets name their partitions; give no partition list with them"},
		{"partition out of range", ReplayRequest{Group: "processor", Target: TargetEarliest, Partitions: []int32{7}}, "partition 7: " + string(names.Ingest) + " has partitions 0 to 1"},
		{"unknown field", map[string]any{"group": "processor", "target": "earliest", "to": "x"}, `invalid JSON: json: unknown field "to"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, body := call("POST", "/api/replay/plan", tt.body)
			var e struct{ Error string }
			_ = json.Unmarshal(body, &e)
			if status != http.StatusBadRequest || e.Error != tt.err {
				t.Errorf("plan: got %d %q, want 400 %q", status, e.Error, tt.err)
			}
		})
	}
}
