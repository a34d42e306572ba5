package groups

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookstream/hookstream/topics"
)

// lagDesc is hookstream_consumer_group_lag.
var lagDesc = prometheus.NewDesc("hookstream_consumer_group_lag",
	"Records a deployment's consumer group has still to read (as Lag measures it), by group and topic.",
	[]string{"group", "topic"}, nil)

// Collector exports the lag of every group of the deployment, measured
// when Prometheus scrapes. The value is cluster-wide: every instance that
// exports it reports the same number.
type Collector struct {
	c    topics.Cluster
	subs func(context.Context) (map[string]bool, error)
	log  *slog.Logger
}

// NewCollector returns a lag collector querying through c's shared
// client. subs lists the subscriptions that exist, by id: the groups of
// deleted ones are not exported.
func NewCollector(c topics.Cluster, subs func(context.Context) (map[string]bool, error), log *slog.Logger) *Collector {
	return &Collector{c: c, subs: subs, log: log}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) { ch <- lagDesc }

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lags, err := Lag(ctx, c.c, "")
	if err != nil {
		c.log.Warn("consumer group lag for /metrics", "err", err)
		return
	}
	subs, err := c.subs(ctx)
	if err != nil {
		c.log.Warn("consumer group lag for /metrics: subscriptions", "err", err)
		return
	}
	for _, g := range WithoutDeleted(c.c.Names, lags, subs) {
		byTopic := make(map[string]int64)
		for _, p := range g.Partitions {
			byTopic[p.Topic] += p.Lag
		}
		for topic, lag := range byTopic {
			ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, float64(lag), g.Group, topic)
		}
	}
}
