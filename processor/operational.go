package processor

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// deadLettered is the event.dead_lettered operational event of ingest
// record r, dead-lettered at stage with cause: an events record written in
// the transaction of its dead letter, so exactly one per dead letter. It
// goes to r's partition, next to the events r would have had, keyed by an
// id derived from r's place in the ingest topic.
func (t *txn) deadLettered(r *kgo.Record, stage string, cause error, now time.Time) *kgo.Record {
	o := &topics.Operational{Type: topics.OpEventDeadLettered, Event: string(r.Key), Stage: stage, Error: cause.Error(), At: now}
	return o.EventRecord(t.p.cfg.Names.Events, r.Partition, r.Topic, strconv.Itoa(int(r.Partition)), strconv.FormatInt(r.Offset, 10))
}
