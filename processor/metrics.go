package processor

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

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
	// stateRefused counts state writes refused for their size.
	stateRefused prometheus.Counter
}

// committed counts n records of a committed transaction with outcome.
func (m *metrics) committed(outcome string, n int) {
	m.records.WithLabelValues(outcome).Add(float64(n))
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
		stateRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookstream_processor_state_refused_total",
			Help: "State writes whose changelog record would have exceeded the record limit, counted once their transaction commits: each was written without the story's least recently attempted deliveries (counted as omitted), or not at all when even that could not fit.",
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
	sweepLag := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hookstream_processor_sweep_lag_seconds",
		Help: "How long the oldest expired event id in this instance's state stores has waited for the sweep; 0 when the sweep is caught up. Up to the sweep interval is normal; growing means expired ids pile up.",
	}, p.sweepLag)
	reg.MustRegister(m.records, m.transactions, m.expired, m.restoreSeconds, m.restoreRecords, m.changelogSkipped, m.storeErrors, m.sessionRestarts, m.stateRefused, keys, restoring, sweepLag)
	return m
}

// sweepLag is how long the oldest expired id of the ready partitions has
// waited for the sweep, in seconds. A store that cannot be read is left
// out: the processing loop reports it and rebuilds it.
func (p *Processor) sweepLag() float64 {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	var lag time.Duration
	for _, part := range p.parts {
		if !part.ready.Load() {
			continue
		}
		if oldest, ok, err := part.store.OldestExpiry(); err == nil && ok {
			lag = max(lag, now.Sub(oldest))
		}
	}
	return lag.Seconds()
}
