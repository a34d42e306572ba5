package ingest

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookstream/hookstream/topics"
)

type metrics struct {
	requests       *prometheus.CounterVec
	fastDuplicates *prometheus.CounterVec
	ackLatency     prometheus.Histogram
	shed           prometheus.Counter
	lastAccepted   *prometheus.GaugeVec
	invalid        *prometheus.CounterVec

	mu sync.Mutex
	// labels bounds the source label's values (topics.MaxSourceNames):
	// with unknown sources allowed, any path segment would otherwise
	// become a time series.
	labels topics.SourceNames
	stats  map[string]*SourceStats // by source label
}

// Stats are the receiver's answers since it started.
type Stats struct {
	// Sources are the answers per source; sources past the label limit and
	// refused unknown ones count together as "_other".
	Sources map[string]SourceStats
}

// SourceStats are the answers to one source's requests.
type SourceStats struct {
	Accepted   int64 // 202: written to Kafka
	Duplicates int64 // 200: a duplicate on the fast path
	Rejected   int64 // any other status
}

// Stats returns the receiver's answers since it started.
func (h *Handler) Stats() Stats {
	m := h.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	out := Stats{Sources: make(map[string]SourceStats, len(m.stats))}
	for name, s := range m.stats {
		out.Sources[name] = *s
	}
	return out
}

// answered counts a request answered status.
func (m *metrics) answered(source string, status int) {
	m.requests.WithLabelValues(source, strconv.Itoa(status)).Inc()
	if status == http.StatusAccepted {
		m.lastAccepted.WithLabelValues(source).SetToCurrentTime()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats[source]
	if s == nil {
		s = &SourceStats{}
		m.stats[source] = s
	}
	switch status {
	case http.StatusAccepted:
		s.Accepted++
	case http.StatusOK:
		s.Duplicates++
	default:
		s.Rejected++
	}
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
			Help: "Webhooks answered 503 at once because the receiver was over capacity (requests in flight, body budget or producer buffer).",
		}),
		lastAccepted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hookstream_ingest_last_accepted_timestamp_seconds",
			Help: "When a source last had a webhook accepted (202), in Unix seconds: how long it has been silent.",
		}, []string{"source"}),
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookstream_ingest_invalid_payloads_total",
			Help: "Webhooks whose payload did not match their source's JSON Schema, by source and on_invalid action (reject: answered 422; dlq: accepted, then dead-lettered).",
		}, []string{"source", "action"}),
		stats: make(map[string]*SourceStats),
	}
	reg.MustRegister(m.requests, m.fastDuplicates, m.ackLatency, m.shed, m.lastAccepted, m.invalid)
	return m
}

// label is the source label of name: known says the source was accepted
// for processing (configured, or unknown sources allowed); refused unknown
// ones, and sources past topics.MaxSourceNames, are topics.OtherSource.
func (m *metrics) label(name string, known bool) string {
	if !known {
		return topics.OtherSource
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.labels.Name(name)
}
