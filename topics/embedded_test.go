package topics_test

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

func TestEmbeddedKeepsRecordsAcrossRestart(t *testing.T) {
	dir, addr := t.TempDir(), kafkatest.FreeAddr(t)
	names := topics.NewNames("restart")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	b, err := topics.StartEmbedded(dir, addr, kafkatest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Addr(); got != addr {
		t.Errorf("Addr: got %s, want %s", got, addr)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topics.Ensure(ctx, cl, topics.Specs(names, 3, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		r := &kgo.Record{Topic: string(names.Ingest), Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close()
	b.Close()

	b, err = topics.StartEmbedded(dir, addr, kafkatest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cl, err = kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ensured, err := topics.Ensure(ctx, cl, topics.Specs(names, 3, 1<<20), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ensured.Created) != 0 {
		t.Errorf("Ensure after restart created %v, want nothing", ensured.Created)
	}
	ends, err := adm.ListEndOffsets(ctx, string(names.Ingest))
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != 10 {
		t.Errorf("records after restart: got %d, want 10", total)
	}
}

func TestEnsureRefusesPartitionMismatch(t *testing.T) {
	env := kafkatest.New(t, 3, 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A second deployment under the same prefix asks for 6 partitions: the
	// existing topics stay, and a new changelog at 6 would break the match.
	adm := env.Admin(t)
	if _, err := adm.DeleteTopic(ctx, string(env.Names.Changelog)); err != nil {
		t.Fatal(err)
	}
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		d, err := adm.ListTopics(ctx, string(env.Names.Changelog))
		if err != nil {
			return err
		}
		if d.Has(string(env.Names.Changelog)) {
			return fmt.Errorf("changelog still exists")
		}
		return nil
	})
	_, err := topics.Ensure(ctx, env.Client(t), topics.Specs(env.Names, 6, 1<<20), 0)
	if err == nil {
		t.Fatal("Ensure with mismatched partitions: got nil error")
	}
	want := fmt.Sprintf("topics: partition counts differ (%s has 6, %s has 3, %s has 3, %s has 3)", env.Names.Changelog, env.Names.DeliveryAttempts, env.Names.Events, env.Names.Ingest)
	if got := err.Error(); len(got) < len(want) || got[:len(want)] != want {
		t.Errorf("error: got %q, want prefix %q", got, want)
	}
}
