package statestore_test

import (
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hookstream/hookstream/statestore"
)

// Restoring a partition: open its store, read the changelog from the
// store's checkpoint, and apply the decoded records in batches, each with
// the offset to resume from.
func Example() {
	s, err := statestore.Open("state/processor", 7, statestore.Options{FS: vfs.NewMem()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	// Changelog records from offset s.Checkpoint(): a nil value is a
	// tombstone.
	first := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	records := []struct {
		offset int64
		key    string
		value  []byte
	}{
		{0, "github:6f1c", value(statestore.State{Status: statestore.Done, Partition: 7, Offset: 42, FirstSeen: first, Expires: first.Add(168 * time.Hour)})},
		{1, "stripe:evt_1", value(statestore.State{Status: statestore.Failed, Partition: 7, Offset: 43, FirstSeen: first.Add(time.Second), Expires: first.Add(168*time.Hour + time.Second)})},
		{2, "stripe:evt_1", nil},
	}
	var changes []statestore.Change
	for _, r := range records {
		c := statestore.Change{Key: []byte(r.key)}
		if r.value != nil {
			st, err := statestore.DecodeChangelog(r.value)
			if err != nil {
				fmt.Println(err)
				return
			}
			c.State = &st
		}
		changes = append(changes, c)
	}
	if err := s.Apply(changes, records[len(records)-1].offset+1); err != nil {
		fmt.Println(err)
		return
	}

	st, ok, err := s.Get([]byte("github:6f1c"))
	fmt.Println(st.Status, st.Offset, ok, err)
	expired, err := s.Expired(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), 100)
	fmt.Printf("%s %v\n", expired, err)
	fmt.Println("checkpoint", s.Checkpoint(), "keys", s.Keys())
	// Output:
	// done 42 true <nil>
	// [github:6f1c] <nil>
	// checkpoint 3 keys 1
}

// value is a changelog value as the processor writes it.
func value(st statestore.State) []byte {
	b, err := st.MarshalBinary()
	if err != nil {
		panic(err)
	}
	return b
}
