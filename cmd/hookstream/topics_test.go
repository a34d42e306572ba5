package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/topics"
)

// TestTopicsDescribeListsEveryTopic: topics describe shows every topic
// hookstream creates, each as it exists on the cluster.
func TestTopicsDescribeListsEveryTopic(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 2, 1<<20)
	stdout, stderr, code := lagReplayRun(t, map[string]string{
		"HOOKSTREAM_BROKERS":      strings.Join(env.Seeds, ","),
		"HOOKSTREAM_TOPIC_PREFIX": env.Names.Prefix,
	}, "topics", "describe", "--output", "json")
	if code != 0 {
		t.Fatalf("topics describe: exit %d, stderr %q", code, stderr)
	}
	var described []struct {
		Topic  string
		Exists bool
	}
	if err := json.Unmarshal([]byte(stdout), &described); err != nil {
		t.Fatalf("topics describe --output json: %v\n%s", err, stdout)
	}
	var got, want []string
	for _, d := range described {
		if !d.Exists {
			t.Errorf("%s: described missing, want it found", d.Topic)
		}
		got = append(got, d.Topic)
	}
	for _, s := range topics.Specs(env.Names, 2, 1<<20) {
		want = append(want, string(s.Topic))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("topics described: got %v, want %v", got, want)
	}
}
