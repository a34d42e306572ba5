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
	"github.com/twmb/franz-go/pkg/kgo"
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

// HandOffHeadroom is the room a dispatcher's hand-off (a retry or a
// delivery dead letter) needs beyond the events record it carries: a
// longer key and its own headers.
const HandOffHeadroom = 16 << 10

// MaxHandOffBytes is the largest retry or delivery dead-letter record for
// a body limit: whatever the events topic accepted, with the dispatcher's
// key and headers.
func MaxHandOffBytes(maxBody int64) int64 { return MaxRecordBytes(maxBody) + HandOffHeadroom }

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
	handOff := func(retention time.Duration) map[string]string {
		c := del(retention)
		c["max.message.bytes"] = strconv.FormatInt(MaxHandOffBytes(maxBody), 10)
		return c
	}
	compact := map[string]string{"cleanup.policy": "compact", "max.message.bytes": maxMsg}
	return []Spec{
		{Topic: n.Ingest, Partitions: partitions, Configs: del(7 * day), CoPartitioned: true},
		{Topic: n.Events, Partitions: partitions, Configs: del(7 * day), CoPartitioned: true},
		{Topic: n.DLQ, Partitions: partitions, Configs: del(30 * day)},
		{Topic: n.Changelog, Partitions: partitions, Configs: compact, CoPartitioned: true},
		{Topic: n.Subscriptions, Partitions: 1, Configs: compact},
		{Topic: n.DeliveryRetry, Partitions: partitions, Configs: handOff(14 * day)},
		{Topic: n.DeliveryDLQ, Partitions: partitions, Configs: handOff(30 * day)},
		// Attempts are read with their event's partition, so they share
		// its number; kept as long as an event id is remembered (SetRetention).
		{Topic: n.DeliveryAttempts, Partitions: partitions, Configs: del(7 * day), CoPartitioned: true},
		{Topic: n.Access, Partitions: 1, Configs: compact},
		// One partition: the trail is one ordered log, its offset the
		// cursor of a reader; kept HOOKSTREAM_AUDIT_RETENTION (SetRetention).
		{Topic: n.Audit, Partitions: 1, Configs: del(DefaultAuditRetention)},
	}
}

// DefaultAuditRetention is how long the audit trail is kept by default,
// the default of HOOKSTREAM_AUDIT_RETENTION.
const DefaultAuditRetention = 90 * day

// SetRetention sets the retention of topic in specs: the delivery attempts
// are kept HOOKSTREAM_DEDUP_TTL, the audit trail
// HOOKSTREAM_AUDIT_RETENTION.
func SetRetention(specs []Spec, topic Topic, retention time.Duration) {
	for _, s := range specs {
		if s.Topic == topic {
			s.Configs["retention.ms"] = strconv.FormatInt(retention.Milliseconds(), 10)
		}
	}
}

// MaxDerivedReplicas caps the replication factor Ensure derives from the
// size of the cluster.
const MaxDerivedReplicas = 3

// MinInSync is the min.insync.replicas of a topic with rf replicas: one
// replica may be down while acks=all writes go on; never below 1.
func MinInSync(rf int16) int16 { return max(1, rf-1) }

// Ensured is what Ensure did and found.
type Ensured struct {
	// Created lists the topics Ensure created.
	Created []Topic
	// Replicas is the replication factor of the topics Ensure creates.
	Replicas int16
	// UnderReplicated maps each existing topic with fewer replicas than
	// Replicas to its replica count: worth a warning, not a refusal, since
	// raising it is a partition reassignment for the operator to plan.
	UnderReplicated map[Topic]int
}

// Ensure creates the topics of specs that are missing and checks the ones
// that exist. New topics get rf replicas (0: as many as the cluster has
// brokers, at most MaxDerivedReplicas) and min.insync.replicas
// MinInSync(rf). Existing co-partitioned topics must have the same
// partition count; existing topics with fewer replicas are reported. It is
// idempotent. It returns once every partition of every topic has a leader:
// on a real cluster that takes a moment after CreateTopics answers.
func Ensure(ctx context.Context, cl *kgo.Client, specs []Spec, rf int16) (Ensured, error) {
	adm := kadm.NewClient(cl)
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = string(s.Topic)
	}
	md, err := adm.Metadata(ctx, names...)
	if err != nil {
		return Ensured{}, fmt.Errorf("topics: metadata: %w", err)
	}
	res := Ensured{Replicas: rf}
	if rf == 0 {
		res.Replicas = int16(min(len(md.Brokers), MaxDerivedReplicas))
	}
	for _, s := range specs {
		if d, ok := md.Topics[string(s.Topic)]; ok && d.Err == nil {
			continue
		}
		if int(res.Replicas) > len(md.Brokers) {
			return res, fmt.Errorf("topics: create %s: replication factor %d is more than the %d broker(s) of the cluster: lower HOOKSTREAM_REPLICATION_FACTOR or start more brokers", s.Topic, res.Replicas, len(md.Brokers))
		}
		configs := make(map[string]*string, len(s.Configs)+1)
		for k, v := range s.Configs {
			configs[k] = &v
		}
		minISR := strconv.Itoa(int(MinInSync(res.Replicas)))
		configs["min.insync.replicas"] = &minISR
		resp, err := adm.CreateTopic(ctx, s.Partitions, res.Replicas, configs, string(s.Topic))
		if err == nil {
			err = resp.Err
		}
		switch {
		case err == nil:
			res.Created = append(res.Created, s.Topic)
		case errors.Is(err, kerr.TopicAlreadyExists):
			// Another process created it first.
		default:
			return res, fmt.Errorf("topics: create %s: %w", s.Topic, err)
		}
	}
	details, err := awaitLeaders(ctx, cl, names)
	if err != nil {
		return res, err
	}
	partitions := make(map[Topic]int, len(details))
	for name, d := range details {
		partitions[name] = len(d.Partitions)
		if n := replicas(d); n < int(res.Replicas) {
			if res.UnderReplicated == nil {
				res.UnderReplicated = make(map[Topic]int)
			}
			res.UnderReplicated[name] = n
		}
	}
	return res, checkPartitions(specs, partitions)
}

// replicas is the smallest replica count of td's partitions.
func replicas(td kadm.TopicDetail) int {
	n := -1
	for _, p := range td.Partitions {
		if n < 0 || len(p.Replicas) < n {
			n = len(p.Replicas)
		}
	}
	return n
}

// awaitLeaders returns each topic's details, waiting until every partition
// has a leader.
func awaitLeaders(ctx context.Context, cl *kgo.Client, names []string) (map[Topic]kadm.TopicDetail, error) {
	adm := kadm.NewClient(cl)
	for {
		d, err := adm.ListTopics(ctx, names...)
		if err != nil {
			return nil, fmt.Errorf("topics: list: %w", err)
		}
		out := make(map[Topic]kadm.TopicDetail, len(names))
		var waiting []string
		for _, name := range names {
			td, ok := d[name]
			if !ok || td.Err != nil || len(td.Partitions) == 0 || !allLed(td) {
				waiting = append(waiting, name)
				continue
			}
			out[Topic(name)] = td
		}
		if len(waiting) == 0 {
			return out, nil
		}
		// kadm answers from the client's metadata cache for a few
		// seconds; drop what it holds of the topics still waiting.
		cl.PurgeTopicsFromClient(waiting...)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("topics: %s not ready (no leader yet): %w", strings.Join(waiting, ", "), ctx.Err())
		case <-time.After(50 * time.Millisecond):
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

func allLed(td kadm.TopicDetail) bool {
	for _, p := range td.Partitions {
		if p.Err != nil || p.Leader < 0 {
			return false
		}
	}
	return true
}
