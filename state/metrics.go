package state

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the package's Prometheus collectors.
type metrics struct {
	restoreLag      *prometheus.GaugeVec
	restoredRecords *prometheus.CounterVec
	restoredBytes   *prometheus.CounterVec
	produced        *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		restoreLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tarn", Subsystem: "state", Name: "restore_lag_records",
			Help: "Changelog offsets a store partition still has to restore (0 when caught up).",
		}, []string{"topic", "partition"}),
		restoredRecords: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tarn", Subsystem: "state", Name: "restored_records_total",
			Help: "Changelog records applied to local stores by restore.",
		}, []string{"topic", "partition"}),
		restoredBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tarn", Subsystem: "state", Name: "restored_bytes_total",
			Help: "Key and value bytes of the changelog records applied by restore.",
		}, []string{"topic", "partition"}),
		produced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tarn", Subsystem: "state", Name: "changelog_records_produced_total",
			Help: "Changelog records acknowledged by Kafka for store writes (after per-batch de-duplication).",
		}, []string{"topic"}),
	}
	var err error
	m.restoreLag, err = register(reg, m.restoreLag)
	if err == nil {
		m.restoredRecords, err = register(reg, m.restoredRecords)
	}
	if err == nil {
		m.restoredBytes, err = register(reg, m.restoredBytes)
	}
	if err == nil {
		m.produced, err = register(reg, m.produced)
	}
	return m, err
}

// register registers c, or returns the collector already registered under its name so that
// two DBs may share one Registerer.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	if err != nil {
		return c, fmt.Errorf("state: register metrics: %w", err)
	}
	return c, nil
}
