package views

import "github.com/prometheus/client_golang/prometheus"

// metrics are the runtime's Prometheus collectors, registered once per Runtime.
type metrics struct {
	records     *prometheus.CounterVec
	deadLetters *prometheus.CounterVec
	batches     *prometheus.HistogramVec
	lag         *prometheus.GaugeVec
	restoring   *prometheus.GaugeVec
	aborts      *prometheus.CounterVec
	commitLag   *prometheus.GaugeVec
	failing     *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tarn_views_records_total", Help: "Input records processed, by view.",
		}, []string{"view"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tarn_views_dead_letters_total",
			Help: "Records sent to the dead-letter topic, by view and reason (decode, late, too-large, ...).",
		}, []string{"view", "reason"}),
		batches: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tarn_views_batch_seconds", Help: "Time to process and commit one polled batch.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"view"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tarn_views_input_lag_records",
			Help: "Records between the last applied (queryable) offset and the end of an input partition, measured every second.",
		}, []string{"view", "topic", "partition"}),
		restoring: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tarn_views_restoring_tasks", Help: "Tasks restoring their stores, by view.",
		}, []string{"view"}),
		aborts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tarn_views_transaction_aborts_total", Help: "Aborted exactly-once batches, by view.",
		}, []string{"view"}),
		commitLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tarn_views_uncommitted_records",
			Help: "At least once: input records applied but not yet committed when the last commit landed (processed again after a crash), by view.",
		}, []string{"view"}),
		failing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tarn_views_failing",
			Help: "1 while a view retries after a failure (Kafka unreachable, a transaction failed), else 0; /v1/views says why.",
		}, []string{"view"}),
	}
	for _, c := range []prometheus.Collector{m.records, m.deadLetters, m.batches, m.lag, m.restoring, m.aborts, m.commitLag, m.failing} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) deadLetter(view, reason string) {
	if m != nil {
		m.deadLetters.WithLabelValues(view, reason).Inc()
	}
}
