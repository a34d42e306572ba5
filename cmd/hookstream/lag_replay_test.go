package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/config"
	"github.com/hookstream/hookstream/dispatch"
	"github.com/hookstream/hookstream/groups"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
	"github.com/hookstream/hookstream/webhook"
)

// lagReplayRun runs the binary with env and args and returns its stdout,
// stderr and exit code.
func lagReplayRun(t *testing.T, env map[string]string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hookstreamBin, args...)
	cmd.Env = environ(env)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if _, exited := errors.AsType[*exec.ExitError](err); !exited {
			t.Fatalf("hookstream %s: %v", strings.Join(args, " "), err)
		}
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// TestLagReplayCLI runs lag and replay as an operator does, against a
// broker where the processor group has read 1 of 4 records.
func TestLagReplayCLI(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 3, 1<<20)
	names := env.Names
	producer := env.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 4 {
		r := kafkatest.IngestRecord(names, "shop", fmt.Sprintf("e%d", i), "{}")
		r.Partition = 0
		if err := producer.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	adm := env.Admin(t)
	ingest, group := string(names.Ingest), string(names.ProcessorGroup())
	var start kadm.Offsets
	start.Add(kadm.Offset{Topic: ingest, Partition: 0, At: 1, LeaderEpoch: -1})
	if err := adm.CommitAllOffsets(ctx, group, start); err != nil {
		t.Fatalf("commit: %v", err)
	}
	committedAt0 := func() int64 {
		t.Helper()
		fetched, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			t.Fatalf("offsets of %s: %v", group, err)
		}
		o, _ := fetched.Lookup(ingest, 0)
		return o.At
	}
	cliEnv := map[string]string{
		"HOOKSTREAM_BROKERS":      strings.Join(env.Seeds, ","),
		"HOOKSTREAM_TOPIC_PREFIX": names.Prefix,
		"HOOKSTREAM_PARTITIONS":   "3",
	}
	run := func(wantCode int, args ...string) (string, string) {
		t.Helper()
		stdout, stderr, code := lagReplayRun(t, cliEnv, args...)
		if code != wantCode {
			t.Fatalf("hookstream %s: got exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, wantCode, stdout, stderr)
		}
		return stdout, stderr
	}

	// lag --output json: every group, the processor 3 behind on partition 0.
	out, _ := run(0, "lag", "--output", "json")
	var lags []groups.GroupLag
	if err := json.Unmarshal([]byte(out), &lags); err != nil {
		t.Fatalf("lag --output json: %v\n%s", err, out)
	}
	if got, want := len(lags), 2; got != want {
		t.Fatalf("lag --output json: got %d groups, want %d (processor and retry)\n%s", got, want, out)
	}
	if got, want := lags[0].Group, group; got != want {
		t.Errorf("lag: first group: got %s, want %s", got, want)
	}
	if got, want := lags[0].Total, int64(3); got != want {
		t.Errorf("lag: processor total: got %d, want %d", got, want)
	}
	if got, want := lags[0].Partitions[0], (groups.PartitionLag{Topic: ingest, Partition: 0, Committed: 1, End: 4, Lag: 3, Unit: groups.Events}); got != want {
		t.Errorf("lag: processor partition 0: got %+v, want %+v", got, want)
	}

	// lag --group processor as a table: one row per partition and a total.
	out, _ = run(0, "lag", "--group", "processor")
	table, _, _ := strings.Cut(out, "\n\n") // a footnote follows
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if got, want := len(lines), 5; got != want {
		t.Fatalf("lag --group processor: got %d lines, want %d (header, 3 partitions, total):\n%s", got, want, out)
	}
	if got, want := strings.Join(strings.Fields(lines[1]), " "), group+" Empty 0 "+ingest+" 0 1 4 3 -"; got != want {
		t.Errorf("lag table partition 0: got %q, want %q", got, want)
	}
	if got, want := strings.Join(strings.Fields(lines[4]), " "), group+" Empty 0 total 3"; got != want {
		t.Errorf("lag table total: got %q, want %q", got, want)
	}

	// replay: a dry run by default.
	out, _ = run(0, "replay", "--group", "processor", "--to-earliest")
	for _, want := range []string{
		"Replay of group " + group + " on " + ingest + " to the log start:",
		"Records to re-read: 1.",
		"re-emits each event",
		"Dry run: nothing committed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("replay dry run: got\n%s\nwant it to contain %q", out, want)
		}
	}
	if got, want := tableRow(out, "0"), "0 1 0 1"; got != want {
		t.Errorf("replay dry run, partition 0: got %q, want %q", got, want)
	}
	if got, want := committedAt0(), int64(1); got != want {
		t.Errorf("offset after a dry run: got %d, want %d", got, want)
	}

	out, _ = run(0, "replay", "--group", "processor", "--to-offsets", "0:9", "--output", "json")
	var plan struct {
		groups.Plan
		Executed bool `json:"executed"`
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatalf("replay --output json: %v\n%s", err, out)
	}
	wantMove := groups.Move{Topic: ingest, Partition: 0, Current: 1, Target: 4, Skip: 3, Unit: groups.Events, Clamped: groups.ClampedToEnd}
	if got := fmt.Sprint(plan.Moves, plan.Executed); got != fmt.Sprint([]groups.Move{wantMove}, false) {
		t.Errorf("replay --to-offsets 0:9 --output json: got %s, want %v", got, fmt.Sprint([]groups.Move{wantMove}, false))
	}

	// A member in the group: --execute is refused, naming it.
	member, err := kgo.NewClient(kgo.SeedBrokers(env.Seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(ingest), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	var leave sync.Once
	t.Cleanup(func() { leave.Do(member.Close) })
	kafkatest.WaitFor(t, 20*time.Second, func() error {
		described, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			return err
		}
		if d := described[group]; d.State != "Stable" {
			return fmt.Errorf("group %s is %s", group, d.State)
		}
		return nil
	})
	id, _ := member.GroupMetadata()
	_, stderr := run(1, "replay", "--group", "processor", "--to-earliest", "--execute")
	if !strings.HasPrefix(stderr, "hookstream: group "+group+" has 1 active member ("+id+" on ") ||
		!strings.HasSuffix(stderr, "): stop them first\n") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("replay --execute with a member: got stderr %q, want one line naming member %s", stderr, id)
	}
	leave.Do(member.Close) // leaves the group

	out, _ = run(0, "replay", "--group", "processor", "--to-earliest", "--execute")
	if !strings.Contains(out, "Committed: "+group) {
		t.Errorf("replay --execute: got\n%s\nwant a Committed line", out)
	}
	if got, want := committedAt0(), int64(0); got != want {
		t.Errorf("offset after --execute: got %d, want %d", got, want)
	}

	// Argument errors: exit code 1 and one line on stderr, nothing on stdout.
	stdout, stderr, code := lagReplayRun(t, cliEnv, "replay", "--group", "processor")
	if got, want := code, 1; got != want {
		t.Errorf("replay without a target: exit code: got %d, want %d", got, want)
	}
	if got, want := stderr, "hookstream: choose a target: --to-earliest, --to-latest, --to-time, --by-duration or --to-offsets\n"; got != want {
		t.Errorf("replay without a target: stderr: got %q, want %q", got, want)
	}
	if got, want := stdout, ""; got != want {
		t.Errorf("replay without a target: stdout: got %q, want %q", got, want)
	}
}

// tableRow returns the fields, space separated, of the first line of out
// whose first field is first.
func tableRow(out, first string) string {
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == first {
			return strings.Join(f, " ")
		}
	}
	return ""
}

// TestLagReplayFlagErrors checks the one-line messages of bad arguments;
// none of them needs a broker.
func TestLagReplayFlagErrors(t *testing.T) {
	t.Setenv("HOOKSTREAM_TOPIC_PREFIX", "hookstream")
	t.Setenv("HOOKSTREAM_BROKERS", "127.0.0.1:1") // nothing listens: a case that got this far would fail
	const unknown = `want processor, retry, sub:<id> or a full name such as hookstream-processor`
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"replay", "--group", "processor"},
			"choose a target: --to-earliest, --to-latest, --to-time, --by-duration or --to-offsets"},
		{[]string{"replay", "--group", "processor", "--to-earliest", "--to-time", "2026-11-21T10:00:00Z"},
			"--to-earliest and --to-time given: choose one target"},
		{[]string{"replay", "--group", "processor", "--to-earliest", "--to-latest", "--by-duration", "1h"},
			"--to-earliest, --to-latest and --by-duration given: choose one target"},
		{[]string{"replay", "--group", "processor", "--to-time", "yesterday"},
			`--to-time "yesterday": not an RFC 3339 time such as 2026-11-21T10:00:00Z`},
		{[]string{"replay", "--group", "processor", "--to-time", "2026-11-21 10:00"},
			`--to-time "2026-11-21 10:00": not an RFC 3339 time such as 2026-11-21T10:00:00Z`},
		{[]string{"replay", "--group", "processor", "--by-duration", "soon"},
			`--by-duration "soon": not a positive duration such as 90m or 2h`},
		{[]string{"replay", "--group", "processor", "--by-duration", "-5m"},
			`--by-duration "-5m": not a positive duration such as 90m or 2h`},
		{[]string{"replay", "--group", "processor", "--to-offsets", "0:x"},
			`--to-offsets: "0:x": offset "x" is not an offset (want 0 or more)`},
		{[]string{"replay", "--group", "processor", "--to-offsets", "0:1", "--partition", "0"},
			"--partition: not with --to-offsets, whose entries name their partitions"},
		{[]string{"replay", "--group", "processor", "--to-earliest", "--partition", "x"},
			`invalid argument "x" for "--partition" flag: strconv.ParseInt: parsing "x": invalid syntax`},
		{[]string{"replay", "--group", "processor", "--to-earliest=false"},
			"--to-earliest=false: give the target flag without a value"},
		{[]string{"replay", "--group", "processer", "--to-earliest"},
			`--group: unknown group "processer": ` + unknown},
		{[]string{"replay", "--group", "sub:", "--to-earliest"},
			`--group: group "sub:" has no subscription id (want sub:<id>)`},
		{[]string{"replay", "--to-earliest"},
			"--group is required: processor, retry, sub:<id> or a full group name"},
		{[]string{"replay", "--group", "processor", "--to-earliest", "--output", "yaml"},
			`--output: invalid value "yaml" (want table or json)`},
		{[]string{"lag", "--group", "consumers"},
			`--group: unknown group "consumers": ` + unknown},
		{[]string{"lag", "--output", "yaml"},
			`--output: invalid value "yaml" (want table or json)`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			root := &cobra.Command{Use: "hookstream", SilenceUsage: true, SilenceErrors: true}
			config.RegisterFlags(root.PersistentFlags(), config.Common)
			root.AddCommand(newLagCommand(), newReplayCommand())
			root.SetArgs(tt.args)
			root.SetOut(io.Discard)
			root.SetErr(io.Discard)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := root.ExecuteContext(ctx)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("error: got %q, want %q", got, tt.want)
			}
			if strings.Contains(got, "\n") {
				t.Errorf("error: got %d lines, want one", strings.Count(got, "\n")+1)
			}
		})
	}
}

// TestLagCountsEventsCLI: lag counts the events left to read on a topic
// written in transactions, not the offsets their commit markers take
// too; past what it reads to count, it shows offsets, as an upper bound;
// replay's plan counts events likewise.
func TestLagCountsEventsCLI(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 2, 1<<20)
	names := env.Names
	ingest, group := string(names.Ingest), string(names.ProcessorGroup())
	env.Transact(t, names.Ingest, 0, 5, 3, 100)     // records 0-2 marker 3, ..., 16-18 marker 19
	env.Transact(t, names.Ingest, 1, 24, 1, 60<<10) // 1.4 MiB: past what lag reads to count
	var start kadm.Offsets
	start.Add(kadm.Offset{Topic: ingest, Partition: 0, At: 11, LeaderEpoch: -1})
	start.Add(kadm.Offset{Topic: ingest, Partition: 1, At: 0, LeaderEpoch: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := env.Admin(t).CommitAllOffsets(ctx, group, start); err != nil {
		t.Fatalf("commit: %v", err)
	}
	cliEnv := map[string]string{
		"HOOKSTREAM_BROKERS":      strings.Join(env.Seeds, ","),
		"HOOKSTREAM_TOPIC_PREFIX": names.Prefix,
		"HOOKSTREAM_PARTITIONS":   "2",
	}
	out, stderr, code := lagReplayRun(t, cliEnv, "lag", "--group", "processor")
	if code != 0 {
		t.Fatalf("lag: exit code %d\n%s", code, stderr)
	}
	for _, want := range []string{
		group + " Empty 0 " + ingest + " 0 11 20 6 -",
		group + " Empty 0 " + ingest + " 1 0 48 ≤ 48 offsets -",
		group + " Empty 0 total ≤ 54 offsets",
	} {
		if !slices.Contains(fieldLines(out), want) {
			t.Errorf("lag: got\n%s\nwant a row %q", out, want)
		}
	}
	out, stderr, code = lagReplayRun(t, cliEnv, "replay", "--group", "processor", "--to-earliest", "--partition", "0")
	if code != 0 || !strings.Contains(out, "Records to re-read: 9.") {
		t.Errorf("replay --to-earliest --partition 0: exit code %d, got\n%s%s\nwant Records to re-read: 9.", code, out, stderr)
	}
}

// fieldLines are the lines of out, their fields separated by one space.
func fieldLines(out string) []string {
	var lines []string
	for line := range strings.Lines(out) {
		lines = append(lines, strings.Join(strings.Fields(line), " "))
	}
	return lines
}

// TestReplayWhileDispatchersRun: a subscription's replay executed while
// a dispatcher runs is applied by it, and the command says so: the
// subscriber receives the events again at once, with no restart.
func TestReplayWhileDispatchersRun(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 2, 1<<20)
	cl := env.Client(t)
	log := kafkatest.Logger(t)
	registry := subscriptions.NewRegistry(env.ClusterOf(cl), log)
	var mu sync.Mutex
	received := make(map[string]int)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		received[r.Header.Get("webhook-id")]++
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sub := subscriptions.Subscription{URL: srv.URL}
	if err := registry.Create(ctx, &sub, "earliest"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		e := &topics.Envelope{ID: fmt.Sprintf("shop:%d", i), Source: "shop", EventID: fmt.Sprint(i), Type: "t", ReceivedAt: time.Now(), ProcessedAt: time.Now(), Data: []byte(`{}`)}
		v, _ := e.Marshal()
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: string(env.Names.Events), Key: []byte(e.ID), Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	d := dispatch.New(dispatch.Config{Client: webhook.Config{AllowPrivate: true}},
		topics.Cluster{Client: cl, Opts: []kgo.Opt{kgo.SeedBrokers(env.Seeds...)}, Names: env.Names}, registry, log, prometheus.NewRegistry())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	deliveredTimes := func(want int) func() error {
		return func() error {
			mu.Lock()
			defer mu.Unlock()
			for i := range 3 {
				if n := received[fmt.Sprintf("shop:%d", i)]; n != want {
					return fmt.Errorf("shop:%d delivered %d times, want %d", i, n, want)
				}
			}
			return nil
		}
	}
	kafkatest.WaitFor(t, 30*time.Second, deliveredTimes(1))
	group := string(env.Names.SubscriptionGroup(sub.ID))
	kafkatest.WaitFor(t, 30*time.Second, func() error { // the cursor past them
		fetched, err := env.Admin(t).FetchOffsets(ctx, group)
		if err != nil {
			return err
		}
		var n int64
		fetched.Each(func(o kadm.OffsetResponse) { n += max(o.At, 0) })
		if n != 3 {
			return fmt.Errorf("%s committed past %d records, want 3", group, n)
		}
		return nil
	})

	cliEnv := map[string]string{
		"HOOKSTREAM_BROKERS":      strings.Join(env.Seeds, ","),
		"HOOKSTREAM_TOPIC_PREFIX": env.Names.Prefix,
		"HOOKSTREAM_PARTITIONS":   "2",
	}
	out, stderr, code := lagReplayRun(t, cliEnv, "replay", "--group", "sub:"+sub.ID, "--to-earliest", "--execute")
	if code != 0 {
		t.Fatalf("replay --execute: exit code %d\n%s%s", code, out, stderr)
	}
	want := "Applied: the running dispatchers moved subscription " + sub.ID + " to these targets and deliver from them now.\n"
	if !strings.HasSuffix(out, want) {
		t.Errorf("replay --execute with a dispatcher running: got\n%s\nwant it to end with %q", out, want)
	}
	kafkatest.WaitFor(t, 30*time.Second, deliveredTimes(2))
}
