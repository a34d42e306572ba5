package topics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// Instrument names a long-lived client and exports its kprom metrics
// (hookstream_* with a client_id label) to reg. A kprom collector serves
// one client, so each client gets its own; short-lived clients (restores,
// commands) go without.
func Instrument(reg prometheus.Registerer, clientID string) []kgo.Opt {
	return []kgo.Opt{
		kgo.ClientID(clientID),
		kgo.WithHooks(kprom.NewMetrics("hookstream", kprom.Registerer(reg), kprom.WithClientLabel())),
	}
}

// Partitioner puts the records of the keyed topics where their keys hash,
// as every hookstream producer's default partitioner does (PartitionOf),
// and every other record in the partition it names.
func Partitioner(keyed ...Topic) kgo.Partitioner {
	hash := kgo.StickyKeyPartitioner(nil)
	return kgo.BasicConsistentPartitioner(func(topic string) func(*kgo.Record, int) int {
		if slices.Contains(keyed, Topic(topic)) {
			return hash.ForTopic(topic).Partition
		}
		return func(r *kgo.Record, _ int) int { return int(r.Partition) }
	})
}
