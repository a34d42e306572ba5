package groups

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// lagDesc is hookstream_consumer_group_lag.
var lagDesc = prometheus.NewDesc("hookstream_consumer_group_lag",
	"Offsets a deployment's consumer group has still to read, from the first record it has not read to the last stable offset, by group and topic: "+
		"an upper bound of the events, as each transaction's commit marker takes an offset (hookstream lag counts events).",
	[]string{"group", "topic"}, nil)

// Collector exports the lag of every group of the deployment, measured
// when Prometheus scrapes. The value is cluster-wide: every instance that
// exports it reports the same number.
//
// It is in offsets, not events: a scrape reads one small fetch per
// partition to find the first unread record (probeOnly), where counting
// events would read the backlog at every scrape, and an alert on its
// growth wants one unit throughout, not events below a bound and offsets
// past it.
type Collector struct {
	groups *Service
	log    *slog.Logger
}

// NewCollector returns a lag collector reading through groups: the
// groups of deleted subscriptions are not exported, and a pull
// subscription's is counted from where a pull reads.
func NewCollector(groups *Service, log *slog.Logger) *Collector {
	return &Collector{groups: groups, log: log}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) { ch <- lagDesc }

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	subs, err := c.groups.registry.List(ctx)
	if err != nil {
		c.log.Warn("consumer group lag for /metrics: subscriptions", "err", err)
		return
	}
	lags, err := c.groups.measure(ctx, "", subs, probeOnly)
	if err != nil {
		c.log.Warn("consumer group lag for /metrics", "err", err)
		return
	}
	for _, g := range lags {
		byTopic := make(map[string]int64)
		for _, p := range g.Partitions {
			byTopic[p.Topic] += p.Lag
		}
		for topic, lag := range byTopic {
			ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, float64(lag), g.Group, topic)
		}
	}
}
