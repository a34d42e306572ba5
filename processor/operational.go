package processor

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// deadLettered is the event.dead_lettered operational event of ingest
// record r, dead-lettered at stage with cause: an ingest record written in
// the transaction of its dead letter, keyed by an id derived from r's place
// in the ingest topic, to the partition its key hashes to (not r's), where
// a story query looks for it and its delivery attempts go. The processor
// then turns it into an event like any other: a replay that dead-letters r
// again writes the same key to the same partition again, which
// deduplication drops, and a replay of the operational record itself
// re-emits it with its replay mark. A record that is itself an operational
// event gets none, so a failing one cannot feed itself.
func (t *txn) deadLettered(r *kgo.Record, stage string, cause error, now time.Time) []*kgo.Record {
	if source, _ := topics.EventSourceType(r); source == topics.OperationalSource {
		return nil
	}
	o := &topics.Operational{Type: topics.OpEventDeadLettered, Event: string(r.Key), Stage: stage, Error: cause.Error(), At: now}
	return []*kgo.Record{o.IngestRecord(r.Topic, strconv.Itoa(int(r.Partition)), strconv.FormatInt(r.Offset, 10)).Record(t.p.cfg.Names.Ingest)}
}
