package processor

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	records        *prometheus.CounterVec
	transactions   *prometheus.CounterVec
	expired        prometheus.Counter
	restoreSeconds prometheus.Histogram
	restoreRecords prometheus.Counter
	// changelogSkipped counts changelog records that are not states.
	changelogSkipped prometheus.Counter
	storeErrors      prometheus.Counter
	sessionRestarts  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, p *Processor) *metrics {
	m := &metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookstream_processor_records_total",
			Help: "Ingest records by outcome (processed, duplicate, replayed, failed), counted once their transaction commits.",
		}, []string{"outcome"}),
		transactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookstream_processor_transactions_total",
			Help: "Processor transactions by result (committed, aborted).",
		}, []string{"result"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookstream_processor_expired_keys_total",
			Help: "Event ids forgotten after the dedup TTL (tombstoned in the changelog).",
		}),
		restoreSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hookstream_processor_restore_seconds",
			Help:    "Time to restore a partition's state store from the changelog.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10),
		}),
		restoreRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookstream_processor_restore_records_total",
			Help: "Changelog records applied while restoring state stores.",
		}),
		changelogSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookstream_processor_changelog_skipped_total",
			Help: "Changelog records skipped while restoring because they are not states (no key, undecodable value).",
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookstream_processor_store_errors_total",
			Help: "State store failures; each pauses its partition until the store is restored.",
		}),
		sessionRestarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookstream_processor_session_restarts_total",
			Help: "Processor sessions that failed (broker outage, fenced producer) and were started anew.",
		}),
	}
	keys := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hookstream_processor_state_keys",
		Help: "Event ids held in the state stores of this instance's partitions.",
	}, func() float64 {
		p.mu.Lock()
		defer p.mu.Unlock()
		var n int64
		for _, part := range p.parts {
			if part.ready.Load() {
				n += part.store.Keys()
			}
		}
		return float64(n)
	})
	restoring := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hookstream_processor_partitions_restoring",
		Help: "Assigned partitions whose state store is restoring (paused).",
	}, func() float64 {
		p.mu.Lock()
		defer p.mu.Unlock()
		n := 0
		for _, part := range p.parts {
			if !part.ready.Load() {
				n++
			}
		}
		return float64(n)
	})
	reg.MustRegister(m.records, m.transactions, m.expired, m.restoreSeconds, m.restoreRecords, m.changelogSkipped, m.storeErrors, m.sessionRestarts, keys, restoring)
	return m
}
