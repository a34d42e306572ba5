package groups

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/subscriptions"
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
	env.Transact(t, names.Events, 0, 5, 3, 10) // records 0-2 marker 3, ..., 16-18 marker 19
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
	env.Transact(t, names.Ingest, 0, 24, 1, 60<<10)
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
