package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/admin"
	"github.com/hookstream/hookstream/deadletter"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/topics"
)

// runDLQ runs `hookstream dlq args...` against env's cluster and returns
// its stdout, stderr and exit code.
func runDLQ(t *testing.T, env *kafkatest.Env, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hookstreamBin, append([]string{"dlq"}, args...)...)
	cmd.Env = environ(map[string]string{
		"HOOKSTREAM_BROKERS":      strings.Join(env.Seeds, ","),
		"HOOKSTREAM_TOPIC_PREFIX": env.Names.Prefix,
	})
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("hookstream dlq %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), code
}

// TestDLQCommand lists, shows and redrives a processor dead letter with
// the binary, and checks that usage errors exit 1 with one line.
func TestDLQCommand(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 2, 1<<20)
	names := env.Names
	failedAt := time.Now().Add(-time.Hour).UTC()
	letter := kafkatest.IngestRecord(names, "shop", "o1", `{"order":1}`)
	letter.Topic, letter.Partition = string(names.DLQ), 1
	letter.Headers = append(letter.Headers,
		kgo.RecordHeader{Key: topics.HeaderError, Value: []byte("decode: header hs-event-id is missing")},
		kgo.RecordHeader{Key: topics.HeaderErrorStage, Value: []byte(topics.StageDecode)},
		kgo.RecordHeader{Key: topics.HeaderOrigTopic, Value: []byte(names.Ingest)},
		kgo.RecordHeader{Key: topics.HeaderOrigPartition, Value: []byte("1")},
		kgo.RecordHeader{Key: topics.HeaderOrigOffset, Value: []byte("5")},
		kgo.RecordHeader{Key: topics.HeaderFailedAt, Value: []byte(failedAt.Format(topics.TimeFormat))},
	)
	cl := env.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.ProduceSync(context.Background(), letter).FirstErr(); err != nil {
		t.Fatalf("produce the letter: %v", err)
	}

	out, stderr, code := runDLQ(t, env, "list", "--output", "json")
	if code != 0 {
		t.Fatalf("dlq list --output json: exit %d, stderr %q", code, stderr)
	}
	var listed []struct {
		Kind      string            `json:"kind"`
		Partition int32             `json:"partition"`
		Offset    int64             `json:"offset"`
		Key       string            `json:"key"`
		Stage     string            `json:"stage"`
		Error     string            `json:"error"`
		FailedAt  time.Time         `json:"failed_at"`
		Headers   map[string]string `json:"headers"`
		Redriven  bool              `json:"redriven"`
	}
	if err := json.Unmarshal([]byte(out), &listed); err != nil {
		t.Fatalf("dlq list --output json: %v\n%s", err, out)
	}
	if len(listed) != 1 {
		t.Fatalf("dlq list --output json: got %d letters, want 1:\n%s", len(listed), out)
	}
	if l := listed[0]; l.Kind != "processor" || l.Partition != 1 || l.Offset != 0 || l.Key != "shop:o1" || l.Stage != "decode" ||
		l.Error != "decode: header hs-event-id is missing" || !l.FailedAt.Equal(failedAt) || l.Headers[topics.HeaderSource] != "shop" || l.Redriven {
		t.Errorf("dlq list --output json: got %+v, want shop:o1 at 1/0, stage decode, its error and headers, not redriven", l)
	}

	out, stderr, code = runDLQ(t, env, "show", "1/0")
	if code != 0 || !strings.Contains(out, "shop:o1") || !strings.Contains(out, `{"order":1}`) || !strings.Contains(out, topics.HeaderOrigOffset) {
		t.Errorf("dlq show 1/0: exit %d, stdout %q, stderr %q, want the key, headers and body", code, out, stderr)
	}

	out, stderr, code = runDLQ(t, env, "redrive", "--key", "shop:o1")
	if code != 0 || !strings.Contains(out, "dry run: would redrive 1 records to "+string(names.Ingest)) {
		t.Errorf("dlq redrive (dry run): exit %d, stdout %q, stderr %q, want a dry run of 1 record", code, out, stderr)
	}
	if n := len(env.Records(t, names.Ingest)); n != 0 {
		t.Errorf("%s after a dry run: got %d records, want none", names.Ingest, n)
	}
	for i, want := range []string{
		"redrove 1 records to " + string(names.Ingest) + " (0 already redriven, skipped)\n",
		"redrove 0 records to " + string(names.Ingest) + " (1 already redriven, skipped)\n",
	} {
		out, stderr, code = runDLQ(t, env, "redrive", "--all", "--execute")
		if code != 0 || out != want {
			t.Errorf("dlq redrive --all --execute #%d: exit %d, stdout %q, stderr %q, want %q", i+1, code, out, stderr, want)
		}
	}
	if recs := env.Records(t, names.Ingest); len(recs) != 1 || string(recs[0].Key) != "shop:o1" {
		t.Errorf("%s after two redrives: got %d records, want shop:o1 once", names.Ingest, len(recs))
	}

	usage := []struct {
		name string
		args []string
		want string
	}{
		{"redrive without a selection", []string{"redrive"}, "redrive needs a selection"},
		{"redrive --all with a selection", []string{"redrive", "--all", "--key", "x"}, "--all selects every letter"},
		{"offsets without a partition", []string{"list", "--from-offset", "3"}, "need --partition"},
		{"unknown dlq", []string{"list", "--dlq", "retry"}, `unknown dead-letter queue "retry"`},
		{"bad since", []string{"list", "--since", "yesterday"}, `--since: "yesterday"`},
		{"bad output", []string{"list", "--output", "yaml"}, "--output"},
		{"bad letter", []string{"show", "1:0"}, "is not PARTITION/OFFSET"},
		{"missing letter", []string{"show", "0/9"}, "no dead letter at this offset"},
	}
	for _, tt := range usage {
		t.Run(tt.name, func(t *testing.T) {
			out, stderr, code := runDLQ(t, env, tt.args...)
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			if code != 1 || out != "" || len(lines) != 1 || !strings.Contains(lines[0], tt.want) {
				t.Errorf("dlq %s: exit %d, stdout %q, stderr %q, want exit 1, no output, one line containing %q",
					strings.Join(tt.args, " "), code, out, stderr, tt.want)
			}
		})
	}
}

func TestDLQSince(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Time
		err  bool
	}{
		{"2h", now.Add(-2 * time.Hour), false},
		{"2026-11-20T08:00:00Z", time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC), false},
		{"-2h", time.Time{}, true},
		{"0s", time.Time{}, true},
		{"yesterday", time.Time{}, true},
	}
	for _, tt := range tests {
		got, err := timeFlag("since", tt.in, now)
		if (err != nil) != tt.err || !got.Equal(tt.want) {
			t.Errorf("timeFlag(%q): got %v, %v, want %v (error: %v)", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestDLQRef(t *testing.T) {
	tests := []struct {
		in        string
		partition int32
		offset    int64
		err       bool
	}{
		{"3/42", 3, 42, false},
		{"0/0", 0, 0, false},
		{"3:42", 0, 0, true},
		{"-1/2", 0, 0, true},
		{"1/", 0, 0, true},
		{"1/2/3", 0, 0, true},
		{strconv.Itoa(1<<31) + "/0", 0, 0, true},
	}
	for _, tt := range tests {
		p, o, err := dlqRef(tt.in)
		if (err != nil) != tt.err || p != tt.partition || o != tt.offset {
			t.Errorf("dlqRef(%q): got %d, %d, %v, want %d, %d (error: %v)", tt.in, p, o, err, tt.partition, tt.offset, tt.err)
		}
	}
}

// TestDLQWordsAgree: the CLI's --dlq and the API's kind take the same
// words for the two queues, and say so in the same words when given
// another.
func TestDLQWordsAgree(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 1, 1<<20)
	const want = `unknown dead-letter queue "ingest" (want processor or delivery)`
	_, stderr, code := runDLQ(t, env, "list", "--dlq", "ingest")
	if code == 0 || !strings.Contains(stderr, "--dlq: "+want) {
		t.Errorf("dlq list --dlq ingest: exit %d, stderr %q, want it refused with %q", code, stderr, want)
	}

	srv := admin.New(admin.Config{}, prometheus.NewRegistry(), kafkatest.Logger(t))
	deadletter.New(env.ClusterOf(env.Client(t))).Mount(srv)
	api := httptest.NewServer(srv)
	t.Cleanup(api.Close)
	for _, kind := range []string{"ingest", "processor", "delivery"} {
		resp, err := http.Get(api.URL + "/api/dlq?kind=" + kind)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var refused struct{ Error string }
		_ = json.Unmarshal(body, &refused) // a list, when taken
		switch {
		case kind == "ingest" && (resp.StatusCode != http.StatusBadRequest || refused.Error != "kind: "+want):
			t.Errorf("GET /api/dlq?kind=ingest: got %d %s, want 400 and %q", resp.StatusCode, body, want)
		case kind != "ingest" && resp.StatusCode != http.StatusOK:
			t.Errorf("GET /api/dlq?kind=%s: got %d %s, want 200", kind, resp.StatusCode, body)
		}
		if kind == "ingest" {
			continue
		}
		if _, stderr, code := runDLQ(t, env, "list", "--dlq", kind); code != 0 {
			t.Errorf("dlq list --dlq %s: exit %d, stderr %q, want it taken", kind, code, stderr)
		}
	}
}
