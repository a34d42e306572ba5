package topics_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/topics"
)

// checkReplication fails unless every partition of every topic of names has
// rf replicas and the topic itself sets min.insync.replicas to minISR. It
// polls: on a real cluster, the broker that answers may not have applied
// the new topics' metadata yet.
func checkReplication(t *testing.T, adm *kadm.Client, names topics.Names, rf int, minISR string) {
	t.Helper()
	var all []string
	for _, s := range topics.Specs(names, 1, 1<<20) {
		all = append(all, string(s.Topic))
	}
	kafkatest.WaitFor(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		details, err := adm.ListTopics(ctx, all...)
		if err != nil {
			return err
		}
		configs, err := adm.DescribeTopicConfigs(ctx, all...)
		if err != nil {
			return err
		}
		var problems []string
		for _, name := range all {
			d, ok := details[name]
			if !ok || d.Err != nil {
				problems = append(problems, fmt.Sprintf("%s: not listed (%v)", name, d.Err))
				continue
			}
			for _, p := range d.Partitions {
				if len(p.Replicas) != rf {
					problems = append(problems, fmt.Sprintf("%s/%d: got %d replicas %v, want %d", name, p.Partition, len(p.Replicas), p.Replicas, rf))
				}
			}
			rc, err := configs.On(name, nil)
			if err == nil {
				err = rc.Err
			}
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: configs: %v", name, err))
				continue
			}
			got := "not set on the topic"
			for _, c := range rc.Configs {
				if c.Key == "min.insync.replicas" && c.Value != nil && c.Source == kmsg.ConfigSourceDynamicTopicConfig {
					got = *c.Value
				}
			}
			if got != minISR {
				problems = append(problems, fmt.Sprintf("%s: got min.insync.replicas %s, want %s", name, got, minISR))
			}
		}
		if len(problems) > 0 {
			return errors.New(strings.Join(problems, "; "))
		}
		return nil
	})
}

func fakeCluster(t *testing.T, brokers int) (*kgo.Client, *kadm.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(brokers))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl, kadm.NewClient(cl)
}

func TestEnsureReplication(t *testing.T) {
	tests := []struct {
		name       string
		brokers    int
		rf         int16
		wantRF     int
		wantMinISR string
	}{
		{"derived on one broker", 1, 0, 1, "1"},
		{"derived on two brokers", 2, 0, 2, "1"},
		{"derived on three brokers", 3, 0, 3, "2"},
		{"derived is at most three", 5, 0, 3, "2"},
		{"configured below the brokers", 3, 2, 2, "1"},
		{"configured four", 5, 4, 4, "3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl, adm := fakeCluster(t, tt.brokers)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			names := topics.NewNames("rf")
			specs := topics.Specs(names, 2, 1<<20)
			got, err := topics.Ensure(ctx, cl, specs, tt.rf)
			if err != nil {
				t.Fatal(err)
			}
			if int(got.Replicas) != tt.wantRF {
				t.Errorf("Replicas: got %d, want %d", got.Replicas, tt.wantRF)
			}
			if len(got.Created) != len(specs) || len(got.UnderReplicated) != 0 {
				t.Errorf("got created %v and under-replicated %v, want all %d created and none under-replicated", got.Created, got.UnderReplicated, len(specs))
			}
			checkReplication(t, adm, names, tt.wantRF, tt.wantMinISR)
		})
	}
}

func TestEnsureRefusesMoreReplicasThanBrokers(t *testing.T) {
	cl, _ := fakeCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := topics.Ensure(ctx, cl, topics.Specs(topics.NewNames("rf"), 1, 1<<20), 3)
	if err == nil {
		t.Fatal("Ensure with 3 replicas on 1 broker: got nil error")
	}
	for _, want := range []string{"replication factor 3", "1 broker", "HOOKSTREAM_REPLICATION_FACTOR"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error: got %q, want it to contain %q", err, want)
		}
	}
}

func TestEnsureReportsUnderReplicatedTopics(t *testing.T) {
	cl, adm := fakeCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := topics.NewNames("rf")
	// An earlier deployment created the ingest topic with one replica.
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, string(names.Ingest)); err != nil {
		t.Fatal(err)
	}
	specs := topics.Specs(names, 2, 1<<20)
	got, err := topics.Ensure(ctx, cl, specs, 0)
	if err != nil {
		t.Fatalf("Ensure: got %v, want a report, not an error", err)
	}
	if want := map[topics.Topic]int{names.Ingest: 1}; len(got.UnderReplicated) != 1 || got.UnderReplicated[names.Ingest] != 1 {
		t.Errorf("UnderReplicated: got %v, want %v", got.UnderReplicated, want)
	}
	if len(got.Created) != len(specs)-1 {
		t.Errorf("Created: got %v, want the %d other topics", got.Created, len(specs)-1)
	}
}

// TestEnsureReplicationOnCluster runs on a real cluster of three or more
// brokers (scripts/kafka-local.sh start --brokers 3).
func TestEnsureReplicationOnCluster(t *testing.T) {
	if !kafkatest.Real() {
		t.Skip("needs " + kafkatest.BrokersEnv + " pointing at a cluster of 3 or more brokers")
	}
	env := kafkatest.New(t, 3, 1<<20)
	adm := env.Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	brokers, err := adm.ListBrokers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(brokers) < 3 {
		t.Skipf("the cluster at %s has %d broker(s), want 3 or more", strings.Join(env.Seeds, ","), len(brokers))
	}
	checkReplication(t, adm, env.Names, 3, "2")
}
