package ingest

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// maxSourceLabels bounds the source label's values: with unknown sources
// allowed, any path segment would otherwise become a time series.
const maxSourceLabels = 200

// otherSource is the label of sources past maxSourceLabels and of unknown
// ones that were refused.
const otherSource = "_other"

type metrics struct {
	requests       *prometheus.CounterVec
	fastDuplicates *prometheus.CounterVec
	ackLatency     prometheus.Histogram
	shed           prometheus.Counter

	mu     sync.Mutex
	labels map[string]struct{}
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookstream_ingest_requests_total",
			Help: "Webhook requests by source and HTTP status code.",
		}, []string{"source", "code"}),
		fastDuplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookstream_ingest_fastpath_duplicates_total",
			Help: "Webhooks answered 200 duplicate by the receiver's own recent-id cache.",
		}, []string{"source"}),
		ackLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hookstream_ingest_ack_seconds",
			Help:    "Time from produce to Kafka's acks=all acknowledgement.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		shed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookstream_ingest_shed_total",
			Help: "Webhooks answered 503 at once because the receiver was over capacity (requests in flight or producer buffer).",
		}),
		labels: make(map[string]struct{}),
	}
	reg.MustRegister(m.requests, m.fastDuplicates, m.ackLatency, m.shed)
	return m
}

// label is the source label of name: known says the source was accepted
// for processing (configured, or unknown sources allowed).
func (m *metrics) label(name string, known bool) string {
	if !known {
		return otherSource
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.labels[name]; ok {
		return name
	}
	if len(m.labels) >= maxSourceLabels {
		return otherSource
	}
	m.labels[name] = struct{}{}
	return name
}
