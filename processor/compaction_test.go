package processor_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/internal/kafkatest"
	"github.com/hookstream/hookstream/statestore"
)

// TestRestoreAfterCompaction: a store restored from a compacted changelog
// holds exactly the latest state of each key and none of the keys whose
// latest record is a tombstone, whether compaction kept the tombstones
// (delete.retention.ms not yet passed) or removed them with the values
// they deleted.
func TestRestoreAfterCompaction(t *testing.T) {
	if kafkatest.Real() {
		t.Skip("compacts with kfake's Cluster.Compact; a real broker compacts on its own schedule")
	}
	env := kafkatest.New(t, 1, maxBody)
	cl := env.Client(t)
	changelog := string(env.Names.Changelog)

	now := time.Now().UTC().Truncate(time.Second)
	state := func(duplicates uint32) *statestore.State {
		return &statestore.State{Status: statestore.Done, Offset: int64(duplicates), FirstSeen: now, Expires: now.Add(time.Hour),
			ReceivedAt: now, Duplicates: duplicates, LastDuplicateAt: now}
	}
	// Each write its own batch: compaction keeps the last batch whole.
	writes := []struct {
		key   string
		state *statestore.State // nil: a tombstone
	}{
		{"shop:a", state(1)}, {"shop:b", state(1)}, {"shop:a", state(2)}, {"shop:c", state(1)},
		{"shop:b", state(2)}, {"shop:d", state(1)}, {"shop:a", state(3)}, {"shop:b", nil},
		{"shop:c", nil}, {"shop:e", state(1)}, {"shop:e", nil}, {"shop:c", state(7)},
		{"shop:f", state(1)},
	}
	want := make(map[string]*statestore.State)
	keys := 0 // the keys whose latest record is a state
	for _, w := range writes {
		r := &kgo.Record{Topic: changelog, Key: []byte(w.key)}
		if w.state != nil {
			v, err := w.state.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			r.Value = v
		}
		produce(t, cl, r)
		want[w.key] = w.state
	}
	for _, st := range want {
		if st != nil {
			keys++
		}
	}

	for _, tt := range []struct {
		name            string
		deleteRetention string // "": the topic's default (a day)
		tombstones      int    // left after compaction
	}{
		{name: "tombstones kept", tombstones: 2},
		{name: "tombstones removed", deleteRetention: "0", tombstones: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.deleteRetention != "" {
				setTopicConfig(t, env, env.Names.Changelog, "delete.retention.ms", tt.deleteRetention)
			}
			env.Cluster.Compact()
			left := make(map[string]int)
			tombstones := 0
			for _, r := range env.Records(t, env.Names.Changelog) {
				left[string(r.Key)]++
				if r.Value == nil {
					tombstones++
				}
			}
			compacted := tombstones == tt.tombstones
			for _, n := range left {
				compacted = compacted && n == 1
			}
			if !compacted {
				t.Fatalf("after compaction: got %v records by key and %d tombstones, want one record a key and %d tombstones", left, tombstones, tt.tombstones)
			}

			dir := t.TempDir()
			in := start(t, env, options{name: "restore", stateDir: dir})
			for key, st := range want {
				var got statestore.State
				var ok bool
				kafkatest.WaitFor(t, 30*time.Second, func() error {
					var err error
					got, ok, err = in.p.Lookup(0, []byte(key))
					if errors.Is(err, statestore.ErrNotOwned) || errors.Is(err, statestore.ErrRestoring) {
						return err
					}
					if err != nil {
						t.Fatalf("lookup %s: %v", key, err)
					}
					return nil
				})
				switch {
				case st == nil && ok:
					t.Errorf("%s: got %+v, want no state (tombstoned)", key, got)
				case st != nil && !ok:
					t.Errorf("%s: got no state, want %+v", key, *st)
				case st != nil && !bytes.Equal(marshal(t, &got), marshal(t, st)):
					t.Errorf("%s: got %+v, want %+v", key, got, *st)
				}
			}
			in.stop(t)

			store, err := statestore.Open(dir, 0, statestore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			if got := store.Keys(); got != int64(keys) {
				t.Errorf("keys: got %d, want %d", got, keys)
			}
		})
	}
}

func marshal(t *testing.T, st *statestore.State) []byte {
	t.Helper()
	b, err := st.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
