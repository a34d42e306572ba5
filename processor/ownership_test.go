package processor_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/topics"
)

// held returns the partitions an instance reports ready and restoring, as
// /readyz shows them.
func (in *instance) held() (ready bool, partitions, restoring []int32) {
	ready, detail := in.p.Ready(context.Background())
	d, _ := detail.(map[string]any)
	partitions, _ = d["partitions"].([]int32)
	restoring, _ = d["restoring"].([]int32)
	return ready, partitions, restoring
}

// waitOwners waits until each instance holds want[i] restored partitions
// and no partition is held twice or left out.
func waitOwners(t *testing.T, env *kafkatest.Env, partitions int32, want map[*instance]int) {
	t.Helper()
	kafkatest.WaitFor(t, 60*time.Second, func() error {
		var all []int32
		for in, n := range want {
			_, held, restoring := in.held()
			if len(held) != n || len(restoring) > 0 {
				return fmt.Errorf("an instance holds %v (restoring %v), want %d partitions restored", held, restoring, n)
			}
			all = append(all, held...)
		}
		slices.Sort(all)
		if len(slices.Compact(all)) != len(all) || int32(len(all)) != partitions {
			return fmt.Errorf("partitions held across the group: %v, want each of %d exactly once", all, partitions)
		}
		return nil
	})
}

func produceEvents(t *testing.T, env *kafkatest.Env, cl *kgo.Client, from, to int) {
	t.Helper()
	var recs []*kgo.Record
	for i := from; i < to; i++ {
		recs = append(recs, ingestRecord(env, "shop", fmt.Sprintf("e%d", i), `{}`))
	}
	produce(t, cl, recs...)
}

// TestPartitionsMoveAwayTwiceWhileIdle: an idle processor (no records, no
// sweep) loses partitions in two rebalances in a row, as in a rolling
// restart in a quiet period. It must let go of each one (its /readyz stops
// listing it), and when they come back restore them and process new
// records exactly once.
func TestPartitionsMoveAwayTwiceWhileIdle(t *testing.T) {
	env := kafkatest.New(t, 2, maxBody)
	cl := env.Client(t)
	idle := func(name string) options {
		return options{name: name, stateDir: t.TempDir(), sweepInterval: time.Hour}
	}
	a := start(t, env, idle("a"))
	produceEvents(t, env, cl, 0, 10)
	waitEvents(t, env, 10, 30*time.Second)
	waitOwners(t, env, 2, map[*instance]int{a: 2})

	b := start(t, env, idle("b"))
	waitOwners(t, env, 2, map[*instance]int{a: 1, b: 1})
	b.stop(t)
	waitOwners(t, env, 2, map[*instance]int{a: 2})

	c := start(t, env, idle("c"))
	waitOwners(t, env, 2, map[*instance]int{a: 1, c: 1})
	c.stop(t)
	waitOwners(t, env, 2, map[*instance]int{a: 2})

	produceEvents(t, env, cl, 10, 30)
	got := waitEvents(t, env, 30, 30*time.Second)
	exactlyOnce(t, got, 30, 1)
	if n := a.metric("hookstream_processor_store_errors_total", "", ""); n != 0 {
		t.Errorf("store errors: got %v, want 0 (a returning partition restores at once)", n)
	}
}

// TestReadyOnlyOnceAssigned: /readyz says not ready while the processor
// has joined its group but holds no assignment yet, and ready once its
// partitions are restored.
func TestReadyOnlyOnceAssigned(t *testing.T) {
	env := kafkatest.New(t, 2, maxBody)
	if env.Cluster == nil {
		t.Skip("holds the group's first assignment in the in-process broker")
	}
	syncing, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	env.Cluster.ControlKey(int16(kmsg.SyncGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		once.Do(func() {
			close(syncing)
			env.Cluster.SleepControl(func() { <-release })
		})
		return nil, nil, false
	})
	var released sync.Once
	t.Cleanup(func() { released.Do(func() { close(release) }) })

	in := start(t, env, options{name: "a", stateDir: t.TempDir()})
	select {
	case <-syncing:
	case <-time.After(30 * time.Second):
		t.Fatal("the processor did not join its group within 30s")
	}
	if ready, held, restoring := in.held(); ready {
		t.Errorf("before the first assignment: got ready (partitions %v, restoring %v), want not ready", held, restoring)
	}
	released.Do(func() { close(release) })
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		if ready, held, restoring := in.held(); !ready || len(held) != 2 {
			return fmt.Errorf("ready %v with partitions %v and restoring %v, want ready with 2 partitions", ready, held, restoring)
		}
		return nil
	})
}

// TestStoreAheadOfRecreatedTopics: the topics are deleted and created anew
// while a processor's state directory stays. Its store is ahead of the new
// changelog: it is rebuilt from the changelog, so ids it remembered from
// the old topics are new events, each processed once.
func TestStoreAheadOfRecreatedTopics(t *testing.T) {
	env := kafkatest.New(t, 1, maxBody)
	dir := t.TempDir()
	in := start(t, env, options{name: "a", stateDir: dir})
	produceEvents(t, env, env.Client(t), 0, 20)
	waitEvents(t, env, 20, 30*time.Second)
	in.stop(t)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var names []string
	for _, s := range topics.Specs(env.Names, 1, maxBody) {
		names = append(names, string(s.Topic))
	}
	resps, err := env.Admin(t).DeleteTopics(ctx, names...)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		t.Fatalf("delete topics: %v", err)
	}
	// A real broker deletes topics in the background: creating them again
	// before they are gone would keep the old ones, then lose them.
	adm := env.Admin(t)
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		listed, err := adm.ListTopics(ctx)
		if err != nil {
			return err
		}
		for _, name := range names {
			if listed.Has(name) {
				return fmt.Errorf("%s still listed after its deletion", name)
			}
		}
		return nil
	})
	env.Ensure(t, 1, maxBody)

	// Ids the store remembers, now at the offsets of other ids.
	in = start(t, env, options{name: "a", stateDir: dir})
	produceEvents(t, env, env.Client(t), 10, 20)
	got := waitEvents(t, env, 10, 30*time.Second)
	exactlyOnce(t, got, 10, 1)
	if n := in.count("duplicate"); n != 0 {
		t.Errorf("duplicates dropped: got %d, want 0 (the old topics' ids are forgotten)", n)
	}
}

// TestStandbyIsReady: a processor the group assigns no partition (more
// instances than partitions) is a ready standby, not stuck unready.
func TestStandbyIsReady(t *testing.T) {
	env := kafkatest.New(t, 1, maxBody)
	a := start(t, env, options{name: "a", stateDir: t.TempDir()})
	b := start(t, env, options{name: "b", stateDir: t.TempDir()})
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		var held int
		for _, in := range []*instance{a, b} {
			ready, partitions, restoring := in.held()
			if !ready {
				return fmt.Errorf("an instance holding %v (restoring %v) is not ready", partitions, restoring)
			}
			held += len(partitions)
		}
		if held != 1 {
			return fmt.Errorf("%d partitions held, want 1", held)
		}
		return nil
	})
}

// TestRestartedInstanceTakesItsPartitionsBack: an instance that stops
// cleanly hands its partitions over at once, and one that crashed (it
// never left the group) and restarts under the same transactional id
// takes its partitions back at once, without waiting out the session
// timeout of its dead predecessor. The session and rebalance timeouts are
// two minutes, so either wait would fail the test's one-minute bounds.
func TestRestartedInstanceTakesItsPartitionsBack(t *testing.T) {
	env := kafkatest.New(t, 2, maxBody)
	cl := env.Client(t)
	long := func(name string) options {
		return options{name: name, stateDir: t.TempDir(), sessionTimeout: 2 * time.Minute}
	}
	a := start(t, env, long("a"))
	b := start(t, env, long("b"))
	waitOwners(t, env, 2, map[*instance]int{a: 1, b: 1})

	b.stop(t) // a clean stop
	waitOwners(t, env, 2, map[*instance]int{a: 2})
	produceEvents(t, env, cl, 0, 10)
	waitEvents(t, env, 10, 30*time.Second)

	if env.Cluster == nil {
		return // a crash that never leaves the group needs the in-process broker
	}
	bDir := t.TempDir()
	b = start(t, env, options{name: "b", stateDir: bDir, sessionTimeout: 2 * time.Minute})
	waitOwners(t, env, 2, map[*instance]int{a: 1, b: 1})
	// b crashes: the broker never learns that it left.
	env.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.LeaveGroup}, Count: -1})
	b.stop(t)
	b = start(t, env, options{name: "b", stateDir: bDir, sessionTimeout: 2 * time.Minute})
	waitOwners(t, env, 2, map[*instance]int{a: 1, b: 1})
	produceEvents(t, env, cl, 10, 30)
	exactlyOnce(t, waitEvents(t, env, 30, 30*time.Second), 30, 1)
}

// TestZombieHoldsUpNoLongerThanItsSession: an instance stops answering
// (paused, or cut off) while its transaction is open, after writing to the
// events and changelog partitions. The group moves its partition after its
// session timeout, and the new owner restores that partition from the
// changelog, which it can read only past the zombie's open transaction:
// until the broker aborts it on the transaction timeout. That timeout is
// the session timeout, so the partition is back within about two
// sessions, not after the former fixed 30 s.
func TestZombieHoldsUpNoLongerThanItsSession(t *testing.T) {
	env := kafkatest.New(t, 2, maxBody)
	if env.Cluster == nil {
		t.Skip("pauses an instance's requests in the in-process broker")
	}
	cl := env.Client(t)
	session := 6 * time.Second // the broker's least
	a := start(t, env, options{name: "a", stateDir: t.TempDir(), sessionTimeout: session})
	b := start(t, env, options{name: "b", stateDir: t.TempDir(), sessionTimeout: session})
	waitOwners(t, env, 2, map[*instance]int{a: 1, b: 1})
	_, held, _ := a.held()
	zombiePart := held[0]

	// a's member id: the member the group assigned zombiePart.
	group := string(env.Names.ProcessorGroup())
	described, err := kadm.NewClient(cl).DescribeGroups(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	var member string
	for _, m := range described[group].Members {
		if c, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range c.Topics {
				if slices.Contains(tp.Partitions, zombiePart) {
					member = m.MemberID
				}
			}
		}
	}
	txnID := env.Names.Prefix + "-processor-a"
	instanceID := func(id *string) bool { return id != nil && *id == txnID }
	paused := func(req kmsg.Request) bool {
		switch r := req.(type) {
		case *kmsg.EndTxnRequest:
			return r.TransactionalID == txnID
		case *kmsg.HeartbeatRequest:
			return r.MemberID == member || instanceID(r.InstanceID)
		case *kmsg.JoinGroupRequest:
			return r.MemberID == member || instanceID(r.InstanceID)
		case *kmsg.SyncGroupRequest:
			return r.MemberID == member || instanceID(r.InstanceID)
		}
		return false
	}
	release := make(chan struct{})
	var released sync.Once
	t.Cleanup(func() { released.Do(func() { close(release) }) })
	for _, key := range []kmsg.Key{kmsg.EndTxn, kmsg.Heartbeat, kmsg.JoinGroup, kmsg.SyncGroup} {
		env.Cluster.ControlKey(int16(key), func(req kmsg.Request) (kmsg.Response, error, bool) {
			env.Cluster.KeepControl()
			if paused(req) {
				env.Cluster.SleepControl(func() { <-release })
			}
			return nil, nil, false
		})
	}

	rec := ingestRecord(env, "shop", "zombie", `{}`)
	rec.Partition = zombiePart
	produce(t, env.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner())), rec)
	// b restores zombiePart once the broker aborts a's transaction, and
	// processes the event a never committed: within two sessions (12s),
	// and never before the former 30s transaction timeout.
	kafkatest.WaitFor(t, 24*time.Second, func() error {
		if ready, held, restoring := b.held(); !ready || len(held) != 2 {
			return fmt.Errorf("b: ready %v with partitions %v, restoring %v; want both partitions", ready, held, restoring)
		}
		return nil
	})
	exactlyOnce(t, waitEvents(t, env, 1, 20*time.Second), 1, 1)
}
