package processor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/tidwall/gjson"
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

// TestDeadLetterEventLivesWithItsKey: event.dead_lettered events of
// records whose partitions are not their own keys' (12 partitions) are
// written where their keys hash, like every event: the story of each is
// found where a query looks (the partition of its key), a delivery attempt
// of it is folded into that story, and a processor replay, which
// dead-letters the records again, re-emits each once, marked.
func TestDeadLetterEventLivesWithItsKey(t *testing.T) {
	const partitions, bad = 12, 6
	env := kafkatest.New(t, partitions, maxBody)
	cl := env.Client(t)
	for i := range bad {
		r := ingestRecord(env, "shop", fmt.Sprintf("bad%d", i), `{}`)
		r.Headers = r.Headers[:1] // no hs-event-id: cannot be decoded
		produce(t, cl, r)
	}
	// opEvents are the event.dead_lettered records of the events topic,
	// by key: first emissions and marked replays.
	opEvents := func() (first, marked map[string][]*kgo.Record) {
		first, marked = make(map[string][]*kgo.Record), make(map[string][]*kgo.Record)
		for _, r := range env.Records(t, env.Names.Events) {
			if _, typ := topics.EventSourceType(r); typ != topics.OpEventDeadLettered {
				continue
			}
			if kafkatest.Headers(r)[topics.HeaderReplay] == "" {
				first[string(r.Key)] = append(first[string(r.Key)], r)
			} else {
				marked[string(r.Key)] = append(marked[string(r.Key)], r)
			}
		}
		return first, marked
	}
	in := start(t, env, options{name: "a", stateDir: t.TempDir()})
	var first map[string][]*kgo.Record
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if first, _ = opEvents(); len(first) != bad {
			return fmt.Errorf("%d %s events, want %d", len(first), topics.OpEventDeadLettered, bad)
		}
		return nil
	})
	// elsewhere is an event.dead_lettered whose key hashes to another
	// partition than the record it reports.
	var elsewhere []byte
	for key, recs := range first {
		r := recs[0]
		want := topics.PartitionOf(r.Key, partitions)
		if r.Partition != want {
			t.Errorf("%s: in events partition %d, want %d, where its key hashes", key, r.Partition, want)
		}
		reported := gjson.GetBytes(r.Value, "data.event").String()
		if topics.PartitionOf([]byte(reported), partitions) != want {
			elsewhere = r.Key
		}
		kafkatest.WaitFor(t, 30*time.Second, func() error {
			if _, ok, err := in.p.Lookup(want, r.Key); !ok {
				return fmt.Errorf("story of %s: not in partition %d, where its key hashes (%v)", key, want, err)
			}
			return nil
		})
	}
	if elsewhere == nil {
		t.Fatalf("every %s key hashes to the partition of the record it reports: the test needs one that does not", topics.OpEventDeadLettered)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := &topics.Attempt{Subscription: "sub_ops", EventID: string(elsewhere), N: 1, Outcome: topics.OutcomeDelivered, Status: 200, At: time.Now()}
	if err := cl.ProduceSync(ctx, a.Record(env.Names.DeliveryAttempts)).FirstErr(); err != nil {
		t.Fatalf("produce attempt: %v", err)
	}
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		st, _, err := in.p.Lookup(topics.PartitionOf(elsewhere, partitions), elsewhere)
		if err != nil || len(st.Deliveries) != 1 || st.Deliveries[0].Subscription != a.Subscription {
			return fmt.Errorf("story of %s: deliveries %+v (%v), want the attempt of %s", elsewhere, st.Deliveries, err, a.Subscription)
		}
		return nil
	})
	in.stop(t)

	env.ReplayProcessor(t)
	in = start(t, env, options{name: "a", stateDir: t.TempDir()})
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if n := in.count("replayed"); n < bad {
			return fmt.Errorf("replayed %d records, want the %d operational ones", n, bad)
		}
		if n := in.count("duplicate"); n < bad {
			return fmt.Errorf("%d duplicates, want the %d records that dead-lettering again wrote", n, bad)
		}
		return nil
	})
	in.stop(t)
	first, marked := opEvents()
	for key := range first {
		if len(first[key]) != 1 || len(marked[key]) != 1 {
			t.Errorf("%s on events after a replay: %d first emissions and %d marked replays, want 1 and 1", key, len(first[key]), len(marked[key]))
		}
	}
	if len(first) != bad || len(marked) != bad {
		t.Errorf("%s events after a replay: %d keys emitted first and %d replayed, want %d each", topics.OpEventDeadLettered, len(first), len(marked), bad)
	}
}
