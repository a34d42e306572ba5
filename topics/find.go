package topics

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// findEventLimit bounds the records read to find an event on the events
// topic.
const findEventLimit = 100_000

// ErrEventNotFound: the event is not among the records of the events
// topic read to find it.
var ErrEventNotFound = errors.New("event not found")

// FindEvent returns the latest record of the event key on the events
// topic, read_committed: its partition is read back from its end, in
// doubling steps, at most findEventLimit records in all. An event not
// among them is ErrEventNotFound.
func (c Cluster) FindEvent(ctx context.Context, key string) (*kgo.Record, error) {
	rs, err := Span{Key: []byte(key), Stable: true}.Ranges(ctx, c.Client, c.Names.Events)
	if err != nil {
		return nil, fmt.Errorf("events topic: %w", err)
	}
	for p, r := range rs { // one partition, the key's, unless it is empty
		to, step, read := r.To, int64(1000), int64(0)
		for to > r.From && read < findEventLimit {
			from := max(r.From, to-min(step, findEventLimit-read))
			var found *kgo.Record
			err := c.ReadRanges(ctx, c.Names.Events, Ranges{p: {From: from, To: to}}, func(rec *kgo.Record) bool {
				if string(rec.Key) == key {
					found = rec
				}
				return true
			}, nil)
			if err != nil {
				return nil, fmt.Errorf("events topic: %w", err)
			}
			if found != nil {
				return found, nil
			}
			read += to - from
			to, step = from, 2*step
		}
		return nil, fmt.Errorf("%w: %s is not among the last %d records of partition %d of %s (use an envelope instead: events search prints them)",
			ErrEventNotFound, key, read, p, c.Names.Events)
	}
	return nil, fmt.Errorf("%w: %s: the events topic holds nothing in its partition", ErrEventNotFound, key)
}
