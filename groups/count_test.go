package groups

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
	"github.com/hookstream/hookstream/topics"
)

// apiLag is a group's lag as a client of GET /api/groups/{group} reads
// it: each count with the unit it is in.
type apiLag struct {
	Total      int64  `json:"total"`
	Unit       string `json:"unit"`
	Partitions []struct {
		Partition int32  `json:"partition"`
		Lag       int64  `json:"lag"`
		Unit      string `json:"unit"`
	} `json:"partitions"`
}

// apiPlan is a replay plan as a client of POST /api/replay/plan reads it.
type apiPlan struct {
	Moves []struct {
		Partition int32  `json:"partition"`
		Reread    int64  `json:"reread"`
		Skip      int64  `json:"skip"`
		Unit      string `json:"unit"`
	} `json:"moves"`
	Text string `json:"text"`
}

// transactions writes n transactions of k records each, of size bytes
// of value, to partition of topic, as the processor writes the events
// topic: each ends with a commit marker taking an offset.
func transactions(t *testing.T, env *kafkatest.Env, topic topics.Topic, partition int32, n, k, size int) {
	t.Helper()
	txn := producer(t, env, kgo.TransactionalID(env.Names.Prefix+"-test-txn"), kgo.ProducerBatchMaxBytes(int32(2*size+1024)))
	value := make([]byte, size)
	rand.Read(value) // as incompressible as the bound is in fetched bytes
	for i := range n {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatalf("begin transaction: %v", err)
		}
		for j := range k {
			r := &kgo.Record{Topic: string(topic), Partition: partition, Key: fmt.Appendf(nil, "t%d-%d", i, j), Value: value}
			if err := txn.ProduceSync(testContext(t), r).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
		}
		if err := txn.EndTransaction(testContext(t), kgo.TryCommit); err != nil {
			t.Fatalf("end transaction: %v", err)
		}
	}
	// The markers of the last transaction may be written after EndTxn
	// answers: the last stable offset reaches the end once they are.
	want := int64(n * (k + 1))
	kafkatest.WaitFor(t, 10*time.Second, func() error {
		listed, err := env.Admin(t).ListCommittedOffsets(testContext(t), string(topic))
		if err != nil {
			return err
		}
		if o, _ := listed.Lookup(string(topic), partition); o.Offset != want {
			return fmt.Errorf("last stable offset %d, want %d", o.Offset, want)
		}
		return nil
	})
}

// getJSON calls the API and decodes its 200 answer into v.
func getJSON(t *testing.T, call func(method, path string, body any) (int, []byte), method, path string, body, v any) {
	t.Helper()
	status, raw := call(method, path, body)
	if status != http.StatusOK {
		t.Fatalf("%s %s: got %d %s, want 200", method, path, status, raw)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s %s: %v\n%s", method, path, err, raw)
	}
}

// TestLagCountsEvents: on a topic written in transactions of 3 records,
// a subscription that has read 3 of 5 transactions lags the 6 events it
// has still to read, not the 8 offsets their records and markers take; a
// replay to the start re-reads its 9 events, one to the end skips 6.
func TestLagCountsEvents(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 2, maxBody)
	names := env.Names
	a, call := serveGroups(t, env)
	sub := subscriptions.Subscription{URL: "http://127.0.0.1:1/"}
	if err := a.registry.Create(testContext(t), &sub, "earliest"); err != nil {
		t.Fatalf("create subscription: %v", err)
	}
	transactions(t, env, names.Events, 0, 5, 3, 10) // records 0-2 marker 3, ..., 16-18 marker 19
	// As franz-go commits after the third transaction's last record.
	commit(t, env.Admin(t), names.SubscriptionGroup(sub.ID), names.Events, map[int32]int64{0: 11})

	var lag apiLag
	getJSON(t, call, "GET", "/api/groups/sub:"+sub.ID, nil, &lag)
	if got, want := fmt.Sprintf("%d %s", lag.Partitions[0].Lag, lag.Partitions[0].Unit), "6 events"; got != want {
		t.Errorf("lag of partition 0: got %s, want %s", got, want)
	}
	if got, want := fmt.Sprintf("%d %s", lag.Total, lag.Unit), "6 events"; got != want {
		t.Errorf("total lag: got %s, want %s", got, want)
	}

	var p apiPlan
	getJSON(t, call, "POST", "/api/replay/plan", ReplayRequest{Group: "sub:" + sub.ID, Target: TargetEarliest, Partitions: []int32{0}}, &p)
	if got, want := fmt.Sprintf("%d %s", p.Moves[0].Reread, p.Moves[0].Unit), "9 events"; got != want {
		t.Errorf("replay to the start: re-reads %s, want %s", got, want)
	}
	if !strings.Contains(p.Text, "Records to re-read: 9.") {
		t.Errorf("replay to the start: the plan says\n%s\nwant Records to re-read: 9.", p.Text)
	}
	getJSON(t, call, "POST", "/api/replay/plan", ReplayRequest{Group: "sub:" + sub.ID, Target: TargetLatest, Partitions: []int32{0}}, &p)
	if got, want := fmt.Sprintf("%d %s", p.Moves[0].Skip, p.Moves[0].Unit), "6 events"; got != want {
		t.Errorf("replay to the end: skips %s, want %s", got, want)
	}
}

// TestLagPastTheBoundInOffsets: a backlog larger than Lag reads to count
// it is given in offsets, and said to be an upper bound: by the API, and
// in the replay plan's text.
func TestLagPastTheBoundInOffsets(t *testing.T) {
	t.Parallel()
	env := kafkatest.New(t, 1, maxBody)
	names := env.Names
	_, call := serveGroups(t, env)
	// 24 transactions of one 60 KiB record: 1.4 MiB, past the bound of
	// a partition's reading.
	transactions(t, env, names.Ingest, 0, 24, 1, 60<<10)
	commit(t, env.Admin(t), names.ProcessorGroup(), names.Ingest, map[int32]int64{0: 0})

	var lag apiLag
	getJSON(t, call, "GET", "/api/groups/processor", nil, &lag)
	if got, want := fmt.Sprintf("%d %s", lag.Partitions[0].Lag, lag.Partitions[0].Unit), "48 offsets"; got != want {
		t.Errorf("lag of partition 0: got %s, want %s", got, want)
	}
	if got, want := fmt.Sprintf("%d %s", lag.Total, lag.Unit), "48 offsets"; got != want {
		t.Errorf("total lag: got %s, want %s", got, want)
	}

	commit(t, env.Admin(t), names.ProcessorGroup(), names.Ingest, map[int32]int64{0: 48})
	var p apiPlan
	getJSON(t, call, "POST", "/api/replay/plan", ReplayRequest{Group: "processor", Target: TargetEarliest}, &p)
	if got, want := fmt.Sprintf("%d %s", p.Moves[0].Reread, p.Moves[0].Unit), "48 offsets"; got != want {
		t.Errorf("replay to the start: re-reads %s, want %s", got, want)
	}
	if want := "Records to re-read: at most 48 (counted in offsets: too many to read and count)."; !strings.Contains(p.Text, want) {
		t.Errorf("replay to the start: the plan says\n%s\nwant %s", p.Text, want)
	}
}
