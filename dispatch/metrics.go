package dispatch

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookstream/hookstream/subscriptions"
)

type metrics struct {
	attempts       *prometheus.CounterVec
	refused        *prometheus.CounterVec
	latency        prometheus.Histogram
	dlq            *prometheus.CounterVec
	retriesPending prometheus.Gauge
	retriesSpilled prometheus.Gauge
	reappended     prometheus.Counter
	// attemptWriteErrors counts attempts the attempts topic did not take.
	attemptWriteErrors prometheus.Counter
	filterErrors       *prometheus.CounterVec
	exprSeconds        *prometheus.CounterVec
	exprThrottled      *prometheus.CounterVec
	topicTxns          *prometheus.CounterVec
	topicStopped       *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, d *Dispatcher) *metrics {
	m := &metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookstream_delivery_attempts_total",
			Help: "Delivery attempts by subscription and outcome (success, failure).",
		}, []string{"subscription", "outcome"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookstream_delivery_refused_total",
			Help: "Deliveries an open circuit held back, by subscription: not attempts, they wait for its probe.",
		}, []string{"subscription"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hookstream_delivery_seconds",
			Help:    "Duration of delivery attempts that reached the subscriber.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		dlq: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookstream_delivery_dlq_total",
			Help: "Deliveries written to the delivery DLQ, by subscription.",
		}, []string{"subscription"}),
		retriesPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hookstream_delivery_retries_pending",
			Help: "Retries read from the retry topic and waiting for their due time.",
		}),
		retriesSpilled: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hookstream_delivery_retries_spilled",
			Help: "Retries waiting long (subscription disabled, or due beyond the horizon) whose place in the retry topic is kept in memory, at most the dispatcher's bound; past it a partition's reading stops until there is room.",
		}),
		reappended: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookstream_delivery_retries_reappended_total",
			Help: "Retries waiting long (subscription disabled, or due beyond the horizon) written anew, unchanged, at the end of the retry topic so that its committed offset moves past them.",
		}),
		attemptWriteErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookstream_delivery_attempt_write_errors_total",
			Help: "Delivery attempts the delivery-attempts topic did not take: missing from the attempts API and the ledger.",
		}),
		filterErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookstream_delivery_filter_errors_total",
			Help: "Events whose subscription's filter failed to evaluate (a missing field without has(), a type mismatch, the cost limit), by subscription: not delivered to it, as if the filter were false.",
		}, []string{"subscription"}),
		exprSeconds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookstream_delivery_expr_seconds_total",
			Help: "Time the subscription's filter and transform spent judging events on this dispatcher, by subscription.",
		}, []string{"subscription"}),
		exprThrottled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookstream_delivery_expr_throttled_seconds_total",
			Help: "Time the subscription's lanes waited because its filter and transform had spent their share of a core (HOOKSTREAM_EXPR_CPU_SHARE), by subscription: its cursor falls behind, the other subscriptions are not slowed.",
		}, []string{"subscription"}),
		topicTxns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookstream_delivery_topic_transactions_total",
			Help: "Transactions of topic subscriptions' writes and cursors, by outcome (committed, aborted: tried again).",
		}, []string{"outcome"}),
		topicStopped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookstream_delivery_topic_stopped_total",
			Help: "Topic subscriptions stopped (disabled) because their topic cannot be written: deleted, refusing the dispatcher, or refusing a record for good, by subscription.",
		}, []string{"subscription"}),
	}
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hookstream_delivery_open_circuits",
		Help: "Subscriptions whose circuit is open.",
	}, func() float64 { open, _ := d.circuits(); return float64(len(open)) })
	disabled := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hookstream_delivery_disabled_subscriptions",
		Help: "Subscriptions hookstream disabled (410 Gone, or every real attempt failing for the disable-after time).",
	}, func() float64 { _, disabled := d.circuits(); return float64(len(disabled)) })
	reg.MustRegister(m.attempts, m.refused, m.latency, m.dlq, m.retriesPending, m.retriesSpilled, m.reappended, m.attemptWriteErrors, m.filterErrors, m.exprSeconds, m.exprThrottled, m.topicTxns, m.topicStopped, open, disabled, subscriptionStates{d})
	return m
}

var (
	circuitOpenDesc = prometheus.NewDesc("hookstream_delivery_circuit_open",
		"1 while the subscription's circuit is open in this dispatcher, else 0.", []string{"subscription"}, nil)
	subscriptionDisabledDesc = prometheus.NewDesc("hookstream_delivery_subscription_disabled",
		"1 while hookstream has the subscription disabled (410 Gone, or every real attempt failing for the disable-after time), else 0.",
		[]string{"subscription"}, nil)
	subscriptionFailingDesc = prometheus.NewDesc("hookstream_delivery_subscription_failing",
		"1 while the subscription is failing on this dispatcher: its last "+strconv.Itoa(subscriptions.FailingAfter)+" outcomes or more were failed attempts or events its transform dead-lettered, with no success since; else 0.",
		[]string{"subscription"}, nil)
)

// subscriptionStates exports, per subscription, whether its circuit is
// open, whether it is failing and whether hookstream disabled it: what
// alerts name.
type subscriptionStates struct{ d *Dispatcher }

func (c subscriptionStates) Describe(ch chan<- *prometheus.Desc) {
	ch <- circuitOpenDesc
	ch <- subscriptionDisabledDesc
	ch <- subscriptionFailingDesc
}

// Collect sends the series once it has read them and let go of the
// dispatcher's lock: Prometheus consumes the channel in the goroutine
// that evaluates the gauges of open circuits, which take that lock too.
func (c subscriptionStates) Collect(ch chan<- prometheus.Metric) {
	var metrics []prometheus.Metric
	c.d.mu.Lock()
	for id, st := range c.d.subs {
		st.mu.Lock()
		disabled := !st.sub.Enabled && st.sub.DisabledReason != ""
		_, failing := st.failures.failing()
		st.mu.Unlock()
		metrics = append(metrics,
			prometheus.MustNewConstMetric(circuitOpenDesc, prometheus.GaugeValue, flag(st.circuit.isOpen()), id),
			prometheus.MustNewConstMetric(subscriptionDisabledDesc, prometheus.GaugeValue, flag(disabled), id),
			prometheus.MustNewConstMetric(subscriptionFailingDesc, prometheus.GaugeValue, flag(failing), id))
	}
	c.d.mu.Unlock()
	for _, m := range metrics {
		ch <- m
	}
}

func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
