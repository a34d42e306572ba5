package groups

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/topics"
)

const maxBody = 64 << 10

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// producer returns a client that writes records to the partition they name.
func producer(t *testing.T, env *kafkatest.Env, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return env.Client(t, append([]kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
}

// produce writes n records to topic's partition, with the timestamps
// given (the current time for the rest).
func produce(t *testing.T, cl *kgo.Client, topic topics.Topic, partition int32, n int, stamps ...time.Time) {
	t.Helper()
	for i := range n {
		r := &kgo.Record{Topic: string(topic), Partition: partition, Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("{}")}
		if i < len(stamps) {
			r.Timestamp = stamps[i]
		}
		if err := cl.ProduceSync(testContext(t), r).FirstErr(); err != nil {
			t.Fatalf("produce to %s/%d: %v", topic, partition, err)
		}
	}
}

// fill writes counts[p] records to partition p of the ingest topic.
func fill(t *testing.T, env *kafkatest.Env, counts ...int) {
	t.Helper()
	prod := producer(t, env)
	for p, n := range counts {
		produce(t, prod, env.Names.Ingest, int32(p), n)
	}
}

// commit commits offsets for group as an admin does.
func commit(t *testing.T, adm *kadm.Client, group topics.Group, topic topics.Topic, offsets map[int32]int64) {
	t.Helper()
	var os kadm.Offsets
	for p, at := range offsets {
		os.Add(kadm.Offset{Topic: string(topic), Partition: p, At: at, LeaderEpoch: -1})
	}
	if err := adm.CommitAllOffsets(testContext(t), string(group), os); err != nil {
		t.Fatalf("commit %v for %s: %v", offsets, group, err)
	}
}

// committed returns the group's committed offsets on topic, -1 for none.
func committed(t *testing.T, adm *kadm.Client, group topics.Group, topic topics.Topic, partitions int32) []int64 {
	t.Helper()
	fetched, err := adm.FetchOffsets(testContext(t), string(group))
	if err != nil {
		t.Fatalf("offsets of %s: %v", group, err)
	}
	out := make([]int64, partitions)
	for p := range partitions {
		out[p] = -1
		if o, ok := fetched.Lookup(string(topic), p); ok && o.Err == nil {
			out[p] = o.At
		}
	}
	return out
}

func lagOf(t *testing.T, env *kafkatest.Env, group string) []GroupLag {
	t.Helper()
	lags, err := readLag(testContext(t), env.ClusterOf(env.Client(t)), group)
	if err != nil {
		t.Fatalf("readLag(%q): %v", group, err)
	}
	return lags
}

// TestLag checks lag against what was produced and committed: committed
// partitions lag by what follows their offset, an uncommitted partition of
// the processor by all of it (the processor starts at the log start), an
// uncommitted partition of a subscription by nothing (subscriptions start
// at the end).
func TestLag(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 3, maxBody)
	names := env.Names
	adm := env.Admin(t)
	fill(t, env, 5, 3, 2)
	commit(t, adm, names.ProcessorGroup(), names.Ingest, map[int32]int64{0: 2, 1: 3})
	produce(t, producer(t, env), names.Events, 1, 4)
	commit(t, adm, names.SubscriptionGroup("s1"), names.Events, map[int32]int64{1: 1})

	lags := lagOf(t, env, "processor")
	if got, want := len(lags), 1; got != want {
		t.Fatalf("readLag(processor): got %d groups, want %d", got, want)
	}
	g := lags[0]
	if got, want := g.Group, string(names.ProcessorGroup()); got != want {
		t.Errorf("group: got %s, want %s", got, want)
	}
	if got, want := g.State, "Empty"; got != want {
		t.Errorf("state: got %s, want %s", got, want)
	}
	if got, want := g.Members, 0; got != want {
		t.Errorf("members: got %d, want %d", got, want)
	}
	want := []PartitionLag{
		{Topic: string(names.Ingest), Partition: 0, Committed: 2, End: 5, Lag: 3, Unit: Events},
		{Topic: string(names.Ingest), Partition: 1, Committed: 3, End: 3, Lag: 0, Unit: Events},
		{Topic: string(names.Ingest), Partition: 2, Committed: -1, End: 2, Lag: 2, Unit: Events},
	}
	if got := fmt.Sprint(g.Partitions); got != fmt.Sprint(want) {
		t.Errorf("partitions: got %v, want %v", got, want)
	}
	if got, want := g.Total, int64(5); got != want {
		t.Errorf("total: got %d, want %d", got, want)
	}

	// Every group: processor, retry (never used) and the subscription.
	lags = lagOf(t, env, "")
	var got []string
	for _, l := range lags {
		got = append(got, fmt.Sprintf("%s %s %d", l.Group, l.State, l.Total))
	}
	wantGroups := []string{
		fmt.Sprintf("%s Empty 5", names.ProcessorGroup()),
		fmt.Sprintf("%s Dead 0", names.RetryGroup()),
		fmt.Sprintf("%s Empty 3", names.SubscriptionGroup("s1")),
	}
	if fmt.Sprint(got) != fmt.Sprint(wantGroups) {
		t.Errorf("Lag of every group: got %v, want %v", got, wantGroups)
	}
	if len(lags) == 3 {
		sub := lags[2].Partitions
		want := []PartitionLag{
			{Topic: string(names.Events), Partition: 0, Committed: -1, End: 0, Lag: 0, Unit: Events},
			{Topic: string(names.Events), Partition: 1, Committed: 1, End: 4, Lag: 3, Unit: Events},
			{Topic: string(names.Events), Partition: 2, Committed: -1, End: 0, Lag: 0, Unit: Events},
		}
		if fmt.Sprint(sub) != fmt.Sprint(want) {
			t.Errorf("subscription partitions: got %v, want %v", sub, want)
		}
	}

	// Consuming the rest brings the lag to 0.
	commit(t, adm, names.ProcessorGroup(), names.Ingest, map[int32]int64{0: 5, 2: 2})
	if got, want := lagOf(t, env, string(names.ProcessorGroup()))[0].Total, int64(0); got != want {
		t.Errorf("lag after consuming everything: got %d, want %d", got, want)
	}

	if _, err := readLag(testContext(t), env.ClusterOf(env.Client(t)), "sub:"); err == nil {
		t.Errorf("readLag(sub:): got no error, want one")
	}
}

// TestLagTransactional checks that a read_committed consumer that has read
// every record of a transactional topic lags 0: franz-go commits the
// offset after the last record, which leaves the commit marker ahead of it.
// An open transaction is not lag either, nor are aborted records.
func TestLagTransactional(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 2, maxBody)
	names := env.Names
	adm := env.Admin(t)
	group := names.SubscriptionGroup("tx")
	txn := producer(t, env, kgo.TransactionalID(names.Prefix+"-test-txn"))

	begin := func(n int) {
		t.Helper()
		if err := txn.BeginTransaction(); err != nil {
			t.Fatalf("begin transaction: %v", err)
		}
		produce(t, txn, names.Events, 0, n)
	}
	end := func(how kgo.TransactionEndTry) {
		t.Helper()
		if err := txn.EndTransaction(testContext(t), how); err != nil {
			t.Fatalf("end transaction: %v", err)
		}
	}
	begin(3)           // offsets 0-2
	end(kgo.TryCommit) // commit marker at 3

	// A read_committed consumer in the group reads everything and commits.
	consumer := env.Client(t,
		kgo.ConsumerGroup(string(group)),
		kgo.ConsumeTopics(string(names.Events)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DisableAutoCommit(),
	)
	read := 0
	for read < 3 {
		fs := consumer.PollFetches(testContext(t))
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume: %v", err)
		}
		read += fs.NumRecords()
	}
	if err := consumer.CommitUncommittedOffsets(testContext(t)); err != nil {
		t.Fatalf("commit: %v", err)
	}
	consumer.Close()
	if got, want := committed(t, adm, group, names.Events, 1)[0], int64(3); got != want {
		t.Fatalf("committed by the consumer: got %d, want %d (the offset after its last record)", got, want)
	}

	// An ended transaction's markers may be written after EndTxn answers
	// (Kafka's transactions v2): the last stable offset moves once they
	// are, so each state is polled for.
	check := func(when string, want PartitionLag) {
		t.Helper()
		kafkatest.WaitFor(t, 10*time.Second, func() error {
			lags := lagOf(t, env, "sub:tx")
			if got := lags[0].Partitions[0]; got != want {
				return fmt.Errorf("%s: got %+v, want %+v", when, got, want)
			}
			if got, want := lags[0].Total, want.Lag; got != want {
				return fmt.Errorf("%s: total: got %d, want %d", when, got, want)
			}
			return nil
		})
	}
	topic := string(names.Events)
	check("caught up after a committed transaction", PartitionLag{Topic: topic, Partition: 0, Committed: 3, End: 4, Lag: 0, Unit: Events})
	// Moving to the end passes over the commit marker only: no record.
	if got := plan(t, env, "sub:tx", "", nil, Target{Latest: true}).Moves[0]; got.Target != 4 || got.Skip != 0 {
		t.Errorf("replay to latest when caught up: got %+v, want target 4 skipping 0 records", got)
	}

	begin(2) // offsets 4-5, open
	check("caught up with a transaction open", PartitionLag{Topic: topic, Partition: 0, Committed: 3, End: 4, Lag: 0, Unit: Events})
	end(kgo.TryAbort) // abort marker at 6
	check("caught up after an aborted transaction", PartitionLag{Topic: topic, Partition: 0, Committed: 3, End: 7, Lag: 0, Unit: Events})

	begin(2)           // offsets 7-8
	end(kgo.TryCommit) // commit marker at 9
	// Two records to read, at offsets 7 and 8: the marker after them is
	// no event.
	check("two records behind", PartitionLag{Topic: topic, Partition: 0, Committed: 3, End: 10, Lag: 2, Unit: Events})
	if got := plan(t, env, "sub:tx", "", nil, Target{Latest: true}).Moves[0]; got.Target != 10 || got.Skip != 2 {
		t.Errorf("replay to latest two records behind: got %+v, want target 10 skipping 2 records", got)
	}
}

// TestLagUnknownGroup asks for a group nobody has joined or committed
// for: an error naming it, not a Dead group lagging 0.
func TestLagUnknownGroup(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 1, maxBody)
	_, err := readLag(testContext(t), env.ClusterOf(env.Client(t)), "sub:sub_missing")
	want := "group " + string(env.Names.SubscriptionGroup("sub_missing")) + " does not exist: no consumer has joined it or committed offsets"
	if err == nil || err.Error() != want {
		t.Errorf("Lag of a missing group: got %v, want %q", err, want)
	}
}

// readLag is the lag of group as measure reports it with nothing pulled,
// within countBudget.
func readLag(ctx context.Context, c topics.Cluster, group string) ([]GroupLag, error) {
	return measure(ctx, c, group, nil, countBudget)
}
