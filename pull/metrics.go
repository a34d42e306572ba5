package pull

import "github.com/prometheus/client_golang/prometheus"

// metrics are the server's collectors.
type metrics struct {
	requests *prometheus.CounterVec
	served   *prometheus.CounterVec
	waiting  prometheus.Gauge
	refused  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, s *Server) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookstream_pull_requests_total",
			Help: "Pull requests answered, by status code (499: the consumer left first).",
		}, []string{"code"}),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookstream_pull_events_total",
			Help: "Events served to pull consumers, by subscription (a repeated request serves its events again).",
		}, []string{"subscription"}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hookstream_pull_waiting",
			Help: "Pull requests waiting for events (long polls).",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookstream_pull_budget_refused_total",
			Help: "Pull requests answered 503 because the byte budget had no room for them.",
		}),
	}
	reg.MustRegister(m.requests, m.served, m.waiting, m.refused, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hookstream_pull_requests_in_progress",
		Help: "Pull requests being served, long polls included; past the bound a request gets 429.",
	}, func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return float64(s.total)
	}), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hookstream_pull_budget_bytes_in_use",
		Help: "Bytes pull requests hold of the byte budget: records read for answers and answers being written; past the budget a request gets 503.",
	}, func() float64 { return float64(s.budget.inUse.Load()) }))
	return m
}

func (m *metrics) events(id string) prometheus.Counter { return m.served.WithLabelValues(id) }

func (m *metrics) forget(id string) { m.served.DeleteLabelValues(id) }
