package groups

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
)

func plan(t *testing.T, env *kafkatest.Env, group, topic string, partitions []int32, target Target) Plan {
	t.Helper()
	p, err := PlanReplay(testContext(t), env.ClusterOf(env.Client(t)), group, topic, partitions, target)
	if err != nil {
		t.Fatalf("PlanReplay(%s, %+v): %v", group, target, err)
	}
	return p
}

func TestReplayToEarliest(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 3, maxBody)
	names := env.Names
	adm := env.Admin(t)
	fill(t, env, 5, 3)
	commit(t, adm, names.ProcessorGroup(), names.Ingest, map[int32]int64{0: 5, 1: 2})

	p := plan(t, env, "processor", "", nil, Target{Earliest: true})
	if got, want := p.Group, string(names.ProcessorGroup()); got != want {
		t.Errorf("group: got %s, want %s", got, want)
	}
	if got, want := p.Topic, string(names.Ingest); got != want {
		t.Errorf("topic: got %s, want %s", got, want)
	}
	topic := string(names.Ingest)
	want := []Move{
		{Topic: topic, Partition: 0, Current: 5, Target: 0, Reread: 5, Unit: Events},
		{Topic: topic, Partition: 1, Current: 2, Target: 0, Reread: 2, Unit: Events},
		{Topic: topic, Partition: 2, Current: -1, Target: 0, Reread: 0, Unit: Events},
	}
	if got := fmt.Sprint(p.Moves); got != fmt.Sprint(want) {
		t.Errorf("moves: got %v, want %v", got, want)
	}
	if n, u := p.Reread(); n != 7 || u != Events {
		t.Errorf("Reread: got %d %s, want 7 events", n, u)
	}
	if got, want := len(p.Members), 0; got != want {
		t.Errorf("members: got %v, want none", p.Members)
	}
	if !strings.Contains(p.Effect, "original id") {
		t.Errorf("effect: got %q, want it to say events keep their original id", p.Effect)
	}
	// Planning changes nothing.
	if got, want := fmt.Sprint(committed(t, adm, names.ProcessorGroup(), names.Ingest, 3)), "[5 2 -1]"; got != want {
		t.Errorf("offsets after planning: got %s, want %s", got, want)
	}

	if err := Execute(testContext(t), adm, p); err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if got, want := fmt.Sprint(committed(t, adm, names.ProcessorGroup(), names.Ingest, 3)), "[0 0 0]"; got != want {
		t.Errorf("offsets after Execute: got %s, want %s", got, want)
	}
	if got, want := lagOf(t, env, "processor")[0].Total, int64(8); got != want {
		t.Errorf("lag after Execute: got %d, want %d", got, want)
	}

	// --to-latest skips what is left, and says how much.
	commit(t, adm, names.ProcessorGroup(), names.Ingest, map[int32]int64{0: 1})
	p = plan(t, env, "processor", "", []int32{0}, Target{Latest: true})
	if got, want := fmt.Sprint(p.Moves), fmt.Sprint([]Move{{Topic: topic, Partition: 0, Current: 1, Target: 5, Skip: 4, Unit: Events}}); got != want {
		t.Errorf("moves to latest: got %v, want %v", got, want)
	}
}

// TestReplayTopics checks each group's default topic and that an explicit
// topic wins.
func TestReplayTopics(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 2, maxBody)
	names := env.Names
	tests := []struct {
		group, topic, want string
	}{
		{"processor", "", string(names.Ingest)},
		{"sub:s1", "", string(names.Events)},
		{"retry", "", string(names.DeliveryRetry)},
		{string(names.SubscriptionGroup("s2")), "", string(names.Events)},
		{"processor", string(names.DLQ), string(names.DLQ)},
	}
	for _, tt := range tests {
		p := plan(t, env, tt.group, tt.topic, nil, Target{Earliest: true})
		if got := p.Topic; got != tt.want {
			t.Errorf("PlanReplay(%s, topic %q): topic: got %s, want %s", tt.group, tt.topic, got, tt.want)
		}
		if got, want := len(p.Moves), 2; got != want {
			t.Errorf("PlanReplay(%s, topic %q): got %d moves, want %d", tt.group, tt.topic, got, want)
		}
	}

	errs := []struct {
		group, topic string
		partitions   []int32
		target       Target
		want         string
	}{
		{"processer", "", nil, Target{Earliest: true}, `unknown group "processer": want processor, retry, sub:<id> or a full name such as ` + string(names.ProcessorGroup())},
		{"processor", "", nil, Target{}, "replay target: none set (want earliest, latest, a time, a duration or offsets)"},
		{"processor", "", []int32{5}, Target{Earliest: true}, fmt.Sprintf("partition 5: %s has partitions 0 to 1", names.Ingest)},
		{"processor", "", nil, Target{Offsets: map[int32]int64{7: 1}}, fmt.Sprintf("partition 7: %s has partitions 0 to 1", names.Ingest)},
		{"processor", "", []int32{0}, Target{Offsets: map[int32]int64{0: 1}}, "replay: offsets name their partitions; give no partition list with them"},
		{"processor", "nope", nil, Target{Earliest: true}, "topic nope does not exist (hookstream topics create makes hookstream's topics)"},
	}
	for _, tt := range errs {
		_, err := PlanReplay(testContext(t), env.ClusterOf(env.Client(t)), tt.group, tt.topic, tt.partitions, tt.target)
		if got := errString(err); got != tt.want {
			t.Errorf("PlanReplay(%s, %q, %v, %+v) error: got %q, want %q", tt.group, tt.topic, tt.partitions, tt.target, got, tt.want)
		}
	}
}

func TestReplayToOffsetsClamps(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 3, maxBody)
	names := env.Names
	adm := env.Admin(t)
	fill(t, env, 5, 3, 4)
	// Retention removed the first two records of partition 2.
	var del kadm.Offsets
	del.Add(kadm.Offset{Topic: string(names.Ingest), Partition: 2, At: 2, LeaderEpoch: -1})
	if _, err := adm.DeleteRecords(testContext(t), del); err != nil {
		t.Fatalf("delete records: %v", err)
	}
	commit(t, adm, names.ProcessorGroup(), names.Ingest, map[int32]int64{0: 5, 1: 3, 2: 4})

	offsets, err := ParseOffsets("0:2,1:99,2:0")
	if err != nil {
		t.Fatal(err)
	}
	p := plan(t, env, "processor", "", nil, Target{Offsets: offsets})
	topic := string(names.Ingest)
	want := []Move{
		{Topic: topic, Partition: 0, Current: 5, Target: 2, Reread: 3, Unit: Events},
		{Topic: topic, Partition: 1, Current: 3, Target: 3, Reread: 0, Unit: Events, Clamped: ClampedToEnd},
		{Topic: topic, Partition: 2, Current: 4, Target: 2, Reread: 2, Unit: Events, Clamped: ClampedToStart},
	}
	if got := fmt.Sprint(p.Moves); got != fmt.Sprint(want) {
		t.Errorf("moves: got %v, want %v", got, want)
	}

	// Only the named partitions move.
	p = plan(t, env, "processor", "", nil, Target{Offsets: map[int32]int64{0: 2}})
	if err := Execute(testContext(t), adm, p); err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if got, want := fmt.Sprint(committed(t, adm, names.ProcessorGroup(), names.Ingest, 3)), "[2 3 4]"; got != want {
		t.Errorf("offsets after Execute: got %s, want %s", got, want)
	}
}

// TestReplayToTime produces records stamped t0, t0+1m and t0+2m and checks
// that a time target picks exactly the records at or after it.
func TestReplayToTime(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 2, maxBody)
	names := env.Names
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	produce(t, producer(t, env), names.Ingest, 0, 3, t0, t0.Add(time.Minute), t0.Add(2*time.Minute))
	produce(t, producer(t, env), names.Ingest, 1, 1, t0.Add(-time.Hour))

	tests := []struct {
		name   string
		target Target
		want   [2]int64 // target offsets of partitions 0 and 1
	}{
		{"before every record", Target{Time: t0.Add(-2 * time.Hour)}, [2]int64{0, 0}},
		{"at t0", Target{Time: t0}, [2]int64{0, 1}},
		{"just after t0", Target{Time: t0.Add(time.Millisecond)}, [2]int64{1, 1}},
		{"at t0+1m", Target{Time: t0.Add(time.Minute)}, [2]int64{1, 1}},
		{"between t0+1m and t0+2m", Target{Time: t0.Add(90 * time.Second)}, [2]int64{2, 1}},
		{"at t0+2m", Target{Time: t0.Add(2 * time.Minute)}, [2]int64{2, 1}},
		{"after every record", Target{Time: t0.Add(3 * time.Minute)}, [2]int64{3, 1}},
		{"by duration, between t0+1m and t0+2m", Target{Duration: time.Since(t0.Add(90 * time.Second))}, [2]int64{2, 1}},
		{"by duration, before every record", Target{Duration: 3 * time.Hour}, [2]int64{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := plan(t, env, "processor", "", nil, tt.target)
			var got [2]int64
			for i, m := range p.Moves {
				got[i] = m.Target
				if m.Clamped != "" {
					t.Errorf("partition %d: got clamped %q, want no clamping", m.Partition, m.Clamped)
				}
			}
			if got != tt.want {
				t.Errorf("targets: got %v, want %v", got, tt.want)
			}
			if got, want := p.Moves[0].Reread, 3-tt.want[0]; got != want {
				t.Errorf("partition 0 reread (nothing committed): got %d, want %d", got, want)
			}
		})
	}
}

// TestReplayRefusedWhileMembersActive starts a consumer in the processor
// group: the plan lists it, Execute refuses naming it and changes nothing;
// once it is closed, Execute commits.
func TestReplayRefusedWhileMembersActive(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 2, maxBody)
	names := env.Names
	adm := env.Admin(t)
	fill(t, env, 4)
	commit(t, adm, names.ProcessorGroup(), names.Ingest, map[int32]int64{0: 4, 1: 0})

	consumer, err := kgo.NewClient(
		kgo.SeedBrokers(env.Seeds...),
		kgo.ConsumerGroup(string(names.ProcessorGroup())),
		kgo.ConsumeTopics(string(names.Ingest)),
		kgo.DisableAutoCommit(),
	)
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	var closeOnce sync.Once
	closeConsumer := func() { closeOnce.Do(consumer.Close) }
	t.Cleanup(closeConsumer)
	var member string
	kafkatest.WaitFor(t, 20*time.Second, func() error { // the client joins in the background
		if member, _ = consumer.GroupMetadata(); member == "" {
			return fmt.Errorf("consumer has not joined %s yet", names.ProcessorGroup())
		}
		infos, err := describe(testContext(t), adm, string(names.ProcessorGroup()))
		if err != nil {
			return err
		}
		if got := infos[string(names.ProcessorGroup())]; got.state != "Stable" {
			return fmt.Errorf("group state %s, members %v", got.state, got.members)
		}
		return nil
	})

	p := plan(t, env, "processor", "", nil, Target{Earliest: true})
	if got, want := len(p.Members), 1; got != want {
		t.Fatalf("members: got %v, want %d", p.Members, want)
	}
	if got := p.Members[0]; !strings.HasPrefix(got, member+" on ") {
		t.Errorf("member: got %q, want %q on its host", got, member)
	}
	err = Execute(testContext(t), adm, p)
	want := fmt.Sprintf("group %s has 1 active member (%s): stop them first", names.ProcessorGroup(), p.Members[0])
	if got := errString(err); got != want {
		t.Errorf("Execute with a member: got %q, want %q", got, want)
	}
	if got, want := fmt.Sprint(committed(t, adm, names.ProcessorGroup(), names.Ingest, 2)), "[4 0]"; got != want {
		t.Errorf("offsets after the refusal: got %s, want %s", got, want)
	}

	closeConsumer() // leaves the group
	if err := Execute(testContext(t), adm, p); err != nil {
		t.Fatalf("Execute after the member left: %v", err)
	}
	if got, want := fmt.Sprint(committed(t, adm, names.ProcessorGroup(), names.Ingest, 2)), "[0 0]"; got != want {
		t.Errorf("offsets after Execute: got %s, want %s", got, want)
	}
}

// TestReplayByTimeNeverSkips: a time target is a replay, a move back in
// the log: for a group that has not yet read that far it keeps the
// group's offset rather than pass over records the group never read (only
// --to-latest and --to-offsets skip, and say so).
func TestReplayByTimeNeverSkips(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 1, maxBody)
	names := env.Names
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	produce(t, producer(t, env), names.Ingest, 0, 3, t0, t0.Add(time.Minute), t0.Add(2*time.Minute))
	commit(t, env.Admin(t), names.ProcessorGroup(), names.Ingest, map[int32]int64{0: 1})

	for _, target := range []Target{{Time: t0.Add(90 * time.Second)}, {Time: t0.Add(time.Hour)}, {Duration: time.Second}} {
		m := plan(t, env, "processor", "", nil, target).Moves[0]
		if m.Target != 1 || m.Skip != 0 || m.Reread != 0 || m.Clamped != ClampedToCurrent {
			t.Errorf("%+v: got target %d, skip %d, reread %d, note %q; want the group kept at 1 (%q)", target, m.Target, m.Skip, m.Reread, m.Clamped, ClampedToCurrent)
		}
	}
	if m := plan(t, env, "processor", "", nil, Target{Time: t0}).Moves[0]; m.Target != 0 || m.Reread != 1 || m.Clamped != "" {
		t.Errorf("t0: got %+v, want a move back to 0 re-reading 1", m)
	}
}
