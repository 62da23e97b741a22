package cdc

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of one source; every series carries the slot as a constant label.
type metrics struct {
	snapshotRows  *prometheus.CounterVec // table
	changes       *prometheus.CounterVec // table, op
	batches       prometheus.Counter
	batchSeconds  prometheus.Histogram
	slotLag       prometheus.Gauge
	confirmedLSN  prometheus.Gauge
	heartbeats    prometheus.Counter
	rowStateBuild prometheus.Counter
	up            prometheus.Gauge
	errors        *prometheus.CounterVec // kind
	deadLetters   *prometheus.CounterVec // table, reason
}

func newMetrics(reg prometheus.Registerer, slot string) (*metrics, error) {
	labels := prometheus.Labels{"slot": slot}
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "tarn", Subsystem: "cdc", Name: name, Help: help, ConstLabels: labels}
	}
	m := &metrics{
		snapshotRows: prometheus.NewCounterVec(prometheus.CounterOpts(opts("snapshot_rows_total", "Rows written by the initial snapshot.")), []string{"table"}),
		changes:      prometheus.NewCounterVec(prometheus.CounterOpts(opts("changes_total", "Row changes written from the replication stream.")), []string{"table", "op"}),
		batches:      prometheus.NewCounter(prometheus.CounterOpts(opts("batches_total", "Batches of transactions made durable in Kafka."))),
		batchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "tarn", Subsystem: "cdc", Name: "batch_commit_seconds",
			Help: "Time to make one batch durable in Kafka.", ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		slotLag:       prometheus.NewGauge(prometheus.GaugeOpts(opts("slot_lag_bytes", "WAL bytes between the server's current position and the slot's confirmed position."))),
		confirmedLSN:  prometheus.NewGauge(prometheus.GaugeOpts(opts("confirmed_lsn", "Last LSN confirmed to the server (durable in Kafka)."))),
		heartbeats:    prometheus.NewCounter(prometheus.CounterOpts(opts("heartbeats_total", "Heartbeat messages emitted."))),
		rowStateBuild: prometheus.NewCounter(prometheus.CounterOpts(opts("row_state_rebuilds_total", "Rebuilds of the local row state from the table topics."))),
		up:            prometheus.NewGauge(prometheus.GaugeOpts(opts("source_up", "1 while this instance streams the source's changes, else 0 (failing, retrying, standing by)."))),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts(opts("errors_total",
			"Runs of the source that ended in an error, by kind: permanent (needs an operator), transient (retried), slot_busy (another connection holds the slot).")), []string{"kind"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts(opts("dead_letters_total",
			"Row changes sent to the dead-letter topic instead of their table topic, by table and reason (too-large).")), []string{"table", "reason"}),
	}
	for _, c := range []prometheus.Collector{m.snapshotRows, m.changes, m.batches, m.batchSeconds, m.slotLag, m.confirmedLSN, m.heartbeats, m.rowStateBuild, m.up, m.errors, m.deadLetters} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("%w: metrics for slot %s are already registered; give each source its own slot or Registerer", ErrConfig, slot)
			}
			return nil, fmt.Errorf("cdc: register metrics: %w", err)
		}
	}
	for _, kind := range []string{"permanent", "transient", "slot_busy"} {
		m.errors.WithLabelValues(kind) // so that every series exists before its first error
	}
	return m, nil
}
