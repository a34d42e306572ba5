package processor_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	hsevents "github.com/hookstream/hookstream/events"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/statestore"
)

// TestLogNamesTrace: the log line about a record that fails names the
// trace its traceparent carries.
func TestLogNamesTrace(t *testing.T) {
	env := kafkatest.New(t, 1, maxBody)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	bad := ingestRecord(env, "shop", "k1", `{}`)
	bad.Key = []byte("k1") // names no event: dead-lettered at decode
	bad.Headers = append(bad.Headers, kgo.RecordHeader{Key: "traceparent", Value: []byte("00-" + traceID + "-00f067aa0ba902b7-01")})
	produce(t, env.Client(t), bad)
	log, logs := kafkatest.CaptureLogs(t)
	start(t, env, options{name: "a", stateDir: t.TempDir(), log: log})

	const msg = "record failed; sent to the DLQ"
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		lines := logs.Lines(msg)
		if len(lines) == 0 {
			return fmt.Errorf("no line %q yet", msg)
		}
		if got := lines[0]["trace_id"]; got != traceID || lines[0]["event_id"] != "k1" {
			return fmt.Errorf("line %q: got trace_id %v, event_id %v, want %s, k1", msg, got, lines[0]["event_id"], traceID)
		}
		return nil
	})
}

// TestStoryKeepsTrace: an event's story names the trace its ingest record
// carried, the same after a replay (whose record carries it again) and
// after its store is rebuilt from the changelog; an event posted with no
// trace has none.
func TestStoryKeepsTrace(t *testing.T) {
	env := kafkatest.New(t, 1, maxBody)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	traced := ingestRecord(env, "shop", "traced", `{}`)
	traced.Headers = append(traced.Headers, kgo.RecordHeader{Key: "traceparent", Value: []byte("00-" + traceID + "-00f067aa0ba902b7-01")})
	produce(t, env.Client(t), traced, ingestRecord(env, "shop", "untraced", `{}`))
	check := func(in *instance, replays uint32) {
		t.Helper()
		story(t, in, "shop:traced", func(st statestore.State) error {
			s := hsevents.StoryOf("shop:traced", st, func(string) bool { return false })
			if s.TraceID != traceID || s.Replays.Count != replays {
				return fmt.Errorf("story of shop:traced: got trace %q after %d replays, want %s after %d", s.TraceID, s.Replays.Count, traceID, replays)
			}
			return nil
		})
		st := story(t, in, "shop:untraced", func(statestore.State) error { return nil })
		if s := hsevents.StoryOf("shop:untraced", st, func(string) bool { return false }); s.TraceID != "" {
			t.Errorf("story of shop:untraced: got trace %q, want none", s.TraceID)
		}
	}
	in := start(t, env, options{name: "a", stateDir: t.TempDir()})
	check(in, 0)
	in.stop(t)

	env.ReplayProcessor(t)
	in = start(t, env, options{name: "a", stateDir: t.TempDir()}) // restored from the changelog
	check(in, 1)
}
