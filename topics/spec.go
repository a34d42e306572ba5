package topics

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Spec is how one topic must be created.
type Spec struct {
	Topic      Topic
	Partitions int32
	Configs    map[string]string
	// CoPartitioned topics must all have the same partition count: the
	// processor reads ingest partition p and writes events and changelog p.
	CoPartitioned bool
}

const day = 24 * time.Hour

// RecordOverhead is the room above the body limit that a record's headers
// and an envelope's fields take.
const RecordOverhead = 256 << 10

// MaxRecordBytes is the largest record hookstream writes for a body limit:
// an envelope carries the body base64-encoded plus its form decoding.
func MaxRecordBytes(maxBody int64) int64 { return 3*maxBody + RecordOverhead }

// Specs lists every topic of a deployment.
func Specs(n Names, partitions int32, maxBody int64) []Spec {
	maxMsg := strconv.FormatInt(MaxRecordBytes(maxBody), 10)
	del := func(retention time.Duration) map[string]string {
		return map[string]string{
			"cleanup.policy":    "delete",
			"retention.ms":      strconv.FormatInt(retention.Milliseconds(), 10),
			"max.message.bytes": maxMsg,
		}
	}
	compact := map[string]string{"cleanup.policy": "compact", "max.message.bytes": maxMsg}
	return []Spec{
		{Topic: n.Ingest, Partitions: partitions, Configs: del(7 * day), CoPartitioned: true},
		{Topic: n.Events, Partitions: partitions, Configs: del(7 * day), CoPartitioned: true},
		{Topic: n.DLQ, Partitions: partitions, Configs: del(30 * day)},
		{Topic: n.Changelog, Partitions: partitions, Configs: compact, CoPartitioned: true},
		{Topic: n.Subscriptions, Partitions: 1, Configs: compact},
		{Topic: n.DeliveryRetry, Partitions: partitions, Configs: del(14 * day)},
		{Topic: n.DeliveryDLQ, Partitions: partitions, Configs: del(30 * day)},
	}
}

// Ensure creates the topics of specs that are missing and checks the ones
// that exist: co-partitioned topics must have the same partition count. It
// is idempotent and returns the names it created.
func Ensure(ctx context.Context, adm *kadm.Client, specs []Spec) (created []Topic, err error) {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = string(s.Topic)
	}
	existing, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("topics: list: %w", err)
	}
	partitions := make(map[Topic]int, len(specs))
	for _, s := range specs {
		if d, ok := existing[string(s.Topic)]; ok && d.Err == nil {
			partitions[s.Topic] = len(d.Partitions)
			continue
		}
		configs := make(map[string]*string, len(s.Configs))
		for k, v := range s.Configs {
			configs[k] = &v
		}
		resp, err := adm.CreateTopic(ctx, s.Partitions, -1, configs, string(s.Topic))
		if err == nil {
			err = resp.Err
		}
		switch {
		case err == nil:
			created = append(created, s.Topic)
			partitions[s.Topic] = int(s.Partitions)
		case errors.Is(err, kerr.TopicAlreadyExists):
			// Another process created it first; learn its partition count.
			n, err := awaitTopic(ctx, adm, s.Topic)
			if err != nil {
				return created, err
			}
			partitions[s.Topic] = n
		default:
			return created, fmt.Errorf("topics: create %s: %w", s.Topic, err)
		}
	}
	return created, checkPartitions(specs, partitions)
}

// awaitTopic returns the partition count of a topic that exists, waiting
// for its metadata to appear.
func awaitTopic(ctx context.Context, adm *kadm.Client, t Topic) (int, error) {
	for {
		d, err := adm.ListTopics(ctx, string(t))
		if err != nil {
			return 0, fmt.Errorf("topics: list %s: %w", t, err)
		}
		if td, ok := d[string(t)]; ok && td.Err == nil && len(td.Partitions) > 0 {
			return len(td.Partitions), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("topics: %s exists but its metadata did not appear: %w", t, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkPartitions fails when co-partitioned topics differ in partition count.
func checkPartitions(specs []Spec, partitions map[Topic]int) error {
	var parts []string
	counts := make(map[int]bool)
	for _, s := range specs {
		if s.CoPartitioned {
			counts[partitions[s.Topic]] = true
			parts = append(parts, fmt.Sprintf("%s has %d", s.Topic, partitions[s.Topic]))
		}
	}
	if len(counts) <= 1 {
		return nil
	}
	sort.Strings(parts)
	return fmt.Errorf("topics: partition counts differ (%s): they must match because the processor writes partition p of each; recreate them or set HOOKSTREAM_PARTITIONS to match", strings.Join(parts, ", "))
}
