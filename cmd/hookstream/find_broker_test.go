package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookstream/hookstream/internal/kafkatest"
)

// TestCLIFindsEmbeddedBrokerInDataDir moves the embedded broker's port for
// `hookstream run` only: other commands find it through the data
// directory (its variable or --data-dir), where run no longer points once
// it has stopped.
func TestCLIFindsEmbeddedBrokerInDataDir(t *testing.T) {
	t.Parallel()
	d := newEmbedded(t)
	proc := d.run(t, "hookstream run")

	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"HOOKSTREAM_DATA_DIR", map[string]string{"HOOKSTREAM_DATA_DIR": d.dataDir}, nil},
		{"--data-dir", nil, []string{"--data-dir", d.dataDir}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := lagReplayRun(t, tc.env, append([]string{"topics", "describe"}, tc.args...)...)
			if code != 0 || !strings.Contains(out, "hookstream.ingest") || errOut != "" {
				t.Errorf("topics describe: exit %d, stdout %q, stderr %q; want the topics and no error", code, out, errOut)
			}
		})
	}

	if code := proc.stop(t, 20*time.Second); code != 0 {
		t.Fatalf("hookstream run exit code: got %d, want 0", code)
	}
	if _, err := os.Stat(filepath.Join(d.dataDir, "kafka.addr")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("kafka.addr after run stopped: got %v, want it removed", err)
	}
}

// TestCLIWithoutBrokerSaysSoInOneLine runs commands where no broker
// listens: each prints one line naming the address and what to do.
func TestCLIWithoutBrokerSaysSoInOneLine(t *testing.T) {
	t.Parallel()
	addr := kafkatest.FreeAddr(t)
	for _, args := range [][]string{
		{"topics", "describe"},
		{"subscriptions", "list"},
		{"lag"},
		{"dlq", "list"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, errOut, code := lagReplayRun(t, map[string]string{"HOOKSTREAM_EMBEDDED_ADDR": addr, "HOOKSTREAM_DATA_DIR": t.TempDir()}, args...)
			want := "hookstream: no Kafka broker at " + addr + ": is `hookstream run` running? set --brokers\n"
			if code != 1 || errOut != want || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 1, no output and %q", code, out, errOut, want)
			}
		})
	}
	t.Run("brokers", func(t *testing.T) {
		_, errOut, code := lagReplayRun(t, map[string]string{"HOOKSTREAM_BROKERS": addr}, "topics", "describe")
		want := "hookstream: no Kafka broker reachable at " + addr + ": check --brokers (HOOKSTREAM_BROKERS)\n"
		if code != 1 || errOut != want {
			t.Errorf("exit %d, stderr %q; want exit 1 and %q", code, errOut, want)
		}
	})
}
