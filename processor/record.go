package processor

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookstream/hookstream/topics"
)

// dlqRecord is the dead letter of r in its own partition of dlq. It can
// exceed the record limit as r could; callers cut it with topics.Fit.
func dlqRecord(dlq topics.Topic, r *kgo.Record, stage string, cause error, failedAt time.Time) *kgo.Record {
	letter := topics.NewDeadLetter(r, stage, cause.Error(), failedAt).Record(dlq)
	letter.Partition = r.Partition
	return letter
}
