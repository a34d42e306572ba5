package processor_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/topics"
)

// TestDeadLetterEmitsOperationalEvent: every processor dead letter comes
// with exactly one event.dead_lettered event on the events topic, written
// in its transaction, naming the event, the stage and the error.
func TestDeadLetterEmitsOperationalEvent(t *testing.T) {
	env := kafkatest.New(t, 2, maxBody)
	cl := env.Client(t)
	var recs []*kgo.Record
	for i := range 3 {
		bad := ingestRecord(env, "shop", fmt.Sprintf("bad%d", i), `{}`)
		bad.Headers = bad.Headers[:1] // no hs-event-id: cannot be decoded
		recs = append(recs, bad, ingestRecord(env, "shop", fmt.Sprintf("good%d", i), `{}`))
	}
	produce(t, cl, recs...)
	in := start(t, env, options{name: "a", stateDir: t.TempDir()})
	waitEvents(t, env, 3, 30*time.Second)
	var dlq []*kgo.Record
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if dlq = env.Records(t, env.Names.DLQ); len(dlq) != 3 {
			return fmt.Errorf("dlq: %d records, want 3", len(dlq))
		}
		return nil
	})
	// Each event.dead_lettered goes through the ingest topic and becomes
	// an event a moment after its dead letter.
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		n := 0
		for _, r := range env.Records(t, env.Names.Events) {
			if source, _ := topics.EventSourceType(r); source == topics.OperationalSource {
				n++
			}
		}
		if n < len(dlq) {
			return fmt.Errorf("%d operational events, want one per dead letter (%d)", n, len(dlq))
		}
		return nil
	})
	in.stop(t)
	type opEvent struct {
		Type string `json:"type"`
		Data struct {
			Event, Stage, Error, At string
		} `json:"data"`
	}
	got := map[string]int{}
	for _, r := range env.Records(t, env.Names.Events) {
		if source, _ := topics.EventSourceType(r); source != topics.OperationalSource {
			continue
		}
		var e opEvent
		if err := json.Unmarshal(r.Value, &e); err != nil {
			t.Fatalf("operational event %s: %v", r.Value, err)
		}
		if e.Type != topics.OpEventDeadLettered || e.Data.Stage != topics.StageDecode || e.Data.Error == "" || e.Data.At == "" {
			t.Errorf("operational event %s: want %s with stage, error and at", r.Value, topics.OpEventDeadLettered)
		}
		got[e.Data.Event]++
	}
	for _, letter := range dlq {
		if n := got[string(letter.Key)]; n != 1 {
			t.Errorf("%s events for dead letter %s: got %d, want 1", topics.OpEventDeadLettered, letter.Key, n)
		}
	}
	if len(got) != len(dlq) {
		t.Errorf("%s events name %v; want one per dead letter", topics.OpEventDeadLettered, got)
	}
}

// TestReplayedDeadLetterEventIsMarked: a processor replay processes a
// record that failed again, and dead-letters it again; the events topic
// still holds its event.dead_lettered once as a first emission, and a
// re-emission only with a replay mark, like every other event.
func TestReplayedDeadLetterEventIsMarked(t *testing.T) {
	env := kafkatest.New(t, 1, maxBody)
	cl := env.Client(t)
	bad := ingestRecord(env, "shop", "bad", `{}`)
	bad.Headers = bad.Headers[:1] // no hs-event-id: cannot be decoded
	produce(t, cl, bad, ingestRecord(env, "shop", "good", `{}`))
	opEvents := func() (first, marked int) {
		for _, r := range env.Records(t, env.Names.Events) {
			if source, _ := topics.EventSourceType(r); source != topics.OperationalSource {
				continue
			}
			if kafkatest.Headers(r)[topics.HeaderReplay] == "" {
				first++
			} else {
				marked++
			}
		}
		return first, marked
	}
	in := start(t, env, options{name: "a", stateDir: t.TempDir()})
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if first, _ := opEvents(); first != 1 {
			return fmt.Errorf("%d %s events, want 1", first, topics.OpEventDeadLettered)
		}
		return nil
	})
	in.stop(t)

	env.ReplayProcessor(t)
	in = start(t, env, options{name: "a", stateDir: t.TempDir()})
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if n := in.count("replayed"); n < 2 {
			return fmt.Errorf("replayed %d records, want the good event and the operational one", n)
		}
		return nil
	})
	in.stop(t)
	if first, marked := opEvents(); first != 1 || marked != 1 {
		t.Errorf("%s on events: %d first emissions and %d marked replays, want 1 and 1", topics.OpEventDeadLettered, first, marked)
	}
}
