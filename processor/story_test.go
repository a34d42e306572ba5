package processor_test

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	hsevents "github.com/hookstream/hookstream/events"
	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/statestore"
	"github.com/hookstream/hookstream/topics"
)

// stormSubscriptions is how many subscriptions fail an event in the story
// tests: with RecentTries attempts each, about 600 bytes per subscription,
// well past the 448 KiB record limit of a 64 KiB body limit had the story
// kept them all.
const stormSubscriptions = 900

// storm writes to the attempts topic RecentTries failed attempts of key
// by each of subs subscriptions, round by round (so the last subscriptions
// are the most recently attempted), each with an error as long as the
// ledger keeps, random so that no compression shrinks the story.
func storm(env *kafkatest.Env, key string, subs int) []*kgo.Record {
	at := time.Now().UTC()
	rng := rand.NewChaCha8([32]byte{1})
	noise := make([]byte, statestore.MaxLedgerError*3/4) // as long as the ledger keeps, in base64
	recs := make([]*kgo.Record, 0, subs*statestore.RecentTries)
	for n := 1; n <= statestore.RecentTries; n++ {
		for i := range subs {
			_, _ = rng.Read(noise)
			a := topics.Attempt{Subscription: fmt.Sprintf("sub_%04d", i), EventID: key, N: n, Outcome: topics.OutcomeFailed,
				Status: 503, Latency: time.Millisecond, Error: base64.StdEncoding.EncodeToString(noise), At: at}
			recs = append(recs, a.Record(env.Names.DeliveryAttempts))
		}
	}
	return recs
}

// stormed starts a processor on a broker of one partition and has it
// process the event shop:stormed. The client's batches are ones the
// topics' max.message.bytes takes, however many attempts a test writes at
// once.
func stormed(t *testing.T) (*kafkatest.Env, *kgo.Client, *instance) {
	t.Helper()
	env := kafkatest.New(t, 1, maxBody)
	cl := env.Client(t, kgo.ProducerBatchMaxBytes(int32(topics.MaxRecordBytes(maxBody))))
	in := start(t, env, options{name: "a", stateDir: t.TempDir()})
	produce(t, cl, ingestRecord(env, "shop", "stormed", `{"n":1}`))
	waitEvents(t, env, 1, 30*time.Second)
	return env, cl, in
}

// story waits until key's story in partition 0 has been told by check.
func story(t *testing.T, in *instance, key string, check func(statestore.State) error) statestore.State {
	t.Helper()
	var st statestore.State
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		var ok bool
		var err error
		if st, ok, err = in.p.Lookup(0, []byte(key)); err != nil || !ok {
			return fmt.Errorf("story of %s: found %v, %v", key, ok, err)
		}
		return check(st)
	})
	return st
}

// TestManyFailingSubscriptionsKeepTheStoryBounded: an event tried by more
// failing subscriptions than a changelog record could hold the story of
// does not stop its partition: the next event is processed, and the story
// keeps the entries of the MaxDeliveries most recently attempted
// subscriptions, the rest counted as omitted.
func TestManyFailingSubscriptionsKeepTheStoryBounded(t *testing.T) {
	env, cl, in := stormed(t)

	produce(t, cl, storm(env, "shop:stormed", stormSubscriptions)...)
	produce(t, cl, ingestRecord(env, "shop", "next", `{"n":2}`))
	waitEvents(t, env, 2, 30*time.Second)

	st := story(t, in, "shop:stormed", func(st statestore.State) error {
		if d := st.Deliveries; len(d) == 0 || d[len(d)-1].Attempts < statestore.RecentTries {
			return fmt.Errorf("story: %d deliveries, the last not yet tried %d times", len(d), statestore.RecentTries)
		}
		return nil
	})
	if got, want := len(st.Deliveries), statestore.MaxDeliveries; got != want {
		t.Errorf("deliveries: got %d, want %d", got, want)
	}
	if got, want := st.Omitted, uint32(stormSubscriptions-statestore.MaxDeliveries); got != want {
		t.Errorf("omitted: got %d, want %d", got, want)
	}
	for i, d := range st.Deliveries {
		if want := fmt.Sprintf("sub_%04d", stormSubscriptions-statestore.MaxDeliveries+i); d.Subscription != want || d.Attempts != statestore.RecentTries {
			t.Errorf("delivery %d: got %s with %d attempts, want %s with %d", i, d.Subscription, d.Attempts, want, statestore.RecentTries)
		}
	}
	s := hsevents.StoryOf("shop:stormed", st, func(string) bool { return false })
	if s.Omitted != st.Omitted || len(s.Deliveries) != statestore.MaxDeliveries {
		t.Errorf("story: got %d deliveries and %d omitted, want %d and %d", len(s.Deliveries), s.Omitted, statestore.MaxDeliveries, st.Omitted)
	}
	if n := in.metric("hookstream_processor_transactions_total", "result", "aborted"); n > 0 {
		t.Errorf("aborted transactions: got %v, want none", n)
	}
}

// TestDuplicateOfAStormedEventIsDropped: duplicates of an event many
// subscriptions failed, before and after the attempts are folded in, are
// dropped and counted, never dead-lettered.
func TestDuplicateOfAStormedEventIsDropped(t *testing.T) {
	env, cl, in := stormed(t)

	produce(t, cl, ingestRecord(env, "shop", "stormed", `{"n":1}`))
	produce(t, cl, storm(env, "shop:stormed", stormSubscriptions)...)
	produce(t, cl, ingestRecord(env, "shop", "stormed", `{"n":1}`), ingestRecord(env, "shop", "next", `{"n":2}`))
	got := waitEvents(t, env, 2, 30*time.Second)

	omitted := uint32(stormSubscriptions - statestore.MaxDeliveries)
	st := story(t, in, "shop:stormed", func(st statestore.State) error {
		if st.Duplicates < 2 || st.Omitted < omitted {
			return fmt.Errorf("story: %d duplicates and %d omitted, want 2 and %d", st.Duplicates, st.Omitted, omitted)
		}
		return nil
	})
	if st.Status != statestore.Done || st.Duplicates != 2 || len(st.Deliveries) != statestore.MaxDeliveries || st.Omitted != omitted {
		t.Errorf("story: got %s with %d duplicates, %d deliveries and %d omitted, want done with 2, %d and %d",
			st.Status, st.Duplicates, len(st.Deliveries), st.Omitted, statestore.MaxDeliveries, omitted)
	}
	exactlyOnce(t, got, 2, 1)
	if dlq := env.Records(t, env.Names.DLQ); len(dlq) != 0 {
		t.Errorf("dlq: got %d records (first %s), want none", len(dlq), dlq[0].Key)
	}
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if n := in.count("duplicate"); n != 2 {
			return fmt.Errorf("duplicates counted: got %d, want 2", n)
		}
		return nil
	})
	if n := in.count("failed"); n != 0 {
		t.Errorf("failed: got %d, want 0", n)
	}
}

// TestOversizedStoryIsTrimmedToTheRecordLimit: a story whose changelog
// record would outgrow the record limit even within MaxDeliveries (here
// subscription ids of 10 KiB, written by a raw producer of the attempts
// topic) is refused and counted, and written without its least recently
// attempted deliveries, counted as omitted: the partition goes on, and
// no changelog record exceeds the limit.
func TestOversizedStoryIsTrimmedToTheRecordLimit(t *testing.T) {
	env, cl, in := stormed(t)

	at := time.Now().UTC()
	var recs []*kgo.Record
	for i := range statestore.MaxDeliveries {
		a := topics.Attempt{Subscription: fmt.Sprintf("%010d", i) + strings.Repeat("s", 10<<10), EventID: "shop:stormed", N: 1,
			Outcome: topics.OutcomeFailed, Status: 503, At: at}
		recs = append(recs, a.Record(env.Names.DeliveryAttempts))
	}
	produce(t, cl, recs...)
	produce(t, cl, ingestRecord(env, "shop", "next", `{"n":2}`))
	waitEvents(t, env, 2, 30*time.Second)

	st := story(t, in, "shop:stormed", func(st statestore.State) error {
		if n := len(st.Deliveries) + int(st.Omitted); n != statestore.MaxDeliveries {
			return fmt.Errorf("story: %d deliveries and %d omitted, want %d in all", len(st.Deliveries), st.Omitted, statestore.MaxDeliveries)
		}
		return nil
	})
	if len(st.Deliveries) == 0 || st.Omitted == 0 || !strings.HasPrefix(st.Deliveries[len(st.Deliveries)-1].Subscription, fmt.Sprintf("%010d", statestore.MaxDeliveries-1)) {
		t.Errorf("story: got %d deliveries and %d omitted, want the most recently attempted kept and some omitted", len(st.Deliveries), st.Omitted)
	}
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if n := in.metric("hookstream_processor_state_refused_total", "", ""); n < 1 {
			return fmt.Errorf("state writes refused: got %v, want at least 1", n)
		}
		return nil
	})
	for _, r := range env.Records(t, env.Names.Changelog) {
		if n := topics.RecordBytes(r); n > topics.MaxRecordBytes(maxBody) {
			t.Errorf("changelog record of %s at offset %d: got %d bytes, want at most %d", r.Key, r.Offset, n, topics.MaxRecordBytes(maxBody))
		}
	}
	if n := in.metric("hookstream_processor_transactions_total", "result", "aborted"); n > 0 {
		t.Errorf("aborted transactions: got %v, want none", n)
	}
}

// TestDuplicateWhoseStoryTheBrokerRefusesIsDropped: when the broker
// refuses a duplicate's story (the changelog's max.message.bytes lowered
// under it), the duplicate is dropped without being counted in it, after
// at most the aborts the strikes take: never dead-lettered, and its
// partition goes on.
func TestDuplicateWhoseStoryTheBrokerRefusesIsDropped(t *testing.T) {
	env, cl, in := stormed(t)
	produce(t, cl, storm(env, "shop:stormed", 100)...)
	story(t, in, "shop:stormed", func(st statestore.State) error {
		if st.Omitted != 100-statestore.MaxDeliveries {
			return fmt.Errorf("story: %d omitted, want %d", st.Omitted, 100-statestore.MaxDeliveries)
		}
		return nil
	})

	lowerMaxMessageBytes(t, env, env.Names.Changelog, 8<<10)
	produce(t, cl, ingestRecord(env, "shop", "stormed", `{"n":1}`), ingestRecord(env, "shop", "next", `{"n":2}`))
	got := waitEvents(t, env, 2, 30*time.Second)
	exactlyOnce(t, got, 2, 1)
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if n := in.count("duplicate"); n != 1 {
			return fmt.Errorf("duplicates counted: got %d, want 1", n)
		}
		return nil
	})
	if dlq := env.Records(t, env.Names.DLQ); len(dlq) != 0 {
		t.Errorf("dlq: got %d records (first %s), want none", len(dlq), dlq[0].Key)
	}
	if n := in.metric("hookstream_processor_transactions_total", "result", "aborted"); n > 3 {
		t.Errorf("aborted transactions: got %v, want at most 3", n)
	}
}
