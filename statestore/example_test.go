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
	records := []struct {
		offset int64
		key    string
		value  []byte
	}{
		{0, "github:6f1c", []byte(`{"status":"done","partition":7,"offset":42,"first_seen":"2026-11-21T10:00:00Z","expires":"2026-11-28T10:00:00Z"}`)},
		{1, "stripe:evt_1", []byte(`{"status":"failed","partition":7,"offset":43,"first_seen":"2026-11-21T10:00:01Z","expires":"2026-11-28T10:00:01Z"}`)},
		{2, "stripe:evt_1", nil},
	}
	var changes []statestore.Change
	for _, r := range records {
		c := statestore.Change{Key: []byte(r.key)}
		if r.value != nil {
			c.State = new(statestore.State)
			if err := c.State.UnmarshalJSON(r.value); err != nil {
				fmt.Println(err)
				return
			}
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
