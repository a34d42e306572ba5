package main

import (
	"strings"
	"testing"

	"github.com/hookstream/hookstream/internal/kafkatest"
)

// TestSubscriptionsAddAtTheLimit: with HOOKSTREAM_MAX_SUBSCRIPTIONS
// subscriptions, `subscriptions add` prints one line naming the limit,
// exits 1 and writes nothing.
func TestSubscriptionsAddAtTheLimit(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 3, 1<<20)
	cliEnv := map[string]string{"HOOKSTREAM_BROKERS": strings.Join(env.Seeds, ","), "HOOKSTREAM_TOPIC_PREFIX": env.Names.Prefix,
		"HOOKSTREAM_PARTITIONS": "3", "HOOKSTREAM_MAX_SUBSCRIPTIONS": "1"}
	if out, errOut, code := lagReplayRun(t, cliEnv, "subscriptions", "add", "--url", "https://hooks.example.com/a"); code != 0 {
		t.Fatalf("add under the limit: exit %d, stdout %q, stderr %q; want it created", code, out, errOut)
	}
	_, errOut, code := lagReplayRun(t, cliEnv, "subscriptions", "add", "--url", "https://hooks.example.com/b")
	if want := "hookstream: subscription limit of 1 reached (HOOKSTREAM_MAX_SUBSCRIPTIONS); delete one first\n"; code != 1 || errOut != want {
		t.Errorf("add at the limit: exit %d, stderr %q; want exit 1 and %q", code, errOut, want)
	}
	if out, errOut, code := lagReplayRun(t, cliEnv, "subscriptions", "list", "--output", "json"); code != 0 || strings.Count(out, `"url"`) != 1 {
		t.Errorf("subscriptions list: exit %d, stdout %q, stderr %q; want the one subscription", code, out, errOut)
	}
}
