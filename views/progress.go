package views

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
)

// progress is how far a rebuilding version is, measured from its consumer group's committed
// offsets, so it covers every partition whichever instance processes it.
type progress struct {
	at time.Time
	// lag is, per source "topic/partition" (inputs and the version's repartition topics),
	// the records between the committed offset (or the log start) and the end.
	lag   map[string]int64
	total int64
	// rate is the smoothed speed at which the total lag shrinks, in records/s; eta the time
	// left at that speed, -1 while unknown.
	rate float64
	eta  time.Duration
}

// caughtUp reports whether every partition's lag is at most max.
func (p progress) caughtUp(limit int64) bool {
	if len(p.lag) == 0 {
		return false
	}
	for _, l := range p.lag {
		if l > limit {
			return false
		}
	}
	return true
}

// measure reads the group's committed offsets and then the ends of its source topics: in that
// order, records that a committed upstream batch produced to a repartition topic are already
// below the end read, so a caught-up upstream cannot hide downstream lag.
func (e *engine) measure(ctx context.Context, adm *kadm.Client, prev progress, now time.Time) (progress, error) {
	topics := make([]string, 0, len(e.bySource))
	for t := range e.bySource {
		topics = append(topics, t)
	}
	committed, err := adm.FetchOffsetsForTopics(ctx, e.group, topics...)
	if err == nil {
		err = committed.Error()
	}
	if err != nil {
		return prev, fmt.Errorf("views: committed offsets of group %s: %w", e.group, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return prev, fmt.Errorf("views: end offsets of %v: %w", topics, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return prev, fmt.Errorf("views: start offsets of %v: %w", topics, err)
	}
	p := progress{at: now, lag: map[string]int64{}, eta: -1}
	ends.Each(func(o kadm.ListedOffset) {
		from := int64(0)
		if s, ok := starts.Lookup(o.Topic, o.Partition); ok {
			from = s.Offset
		}
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.At >= 0 {
			from = max(from, c.At)
		}
		l := max(o.Offset-from, 0)
		p.lag[o.Topic+"/"+strconv.Itoa(int(o.Partition))] = l
		p.total += l
	})
	p.rate = prev.rate
	if dt := now.Sub(prev.at).Seconds(); !prev.at.IsZero() && dt > 0 {
		inst := float64(prev.total-p.total) / dt
		if prev.rate == 0 {
			p.rate = inst
		} else {
			p.rate = 0.7*prev.rate + 0.3*inst
		}
	}
	if p.rate > 0 {
		p.eta = time.Duration(float64(p.total) / p.rate * float64(time.Second))
	}
	return p, nil
}

// rebuildMetrics are the collectors of rebuilds, registered with the runtime's others.
type rebuildMetrics struct {
	serving  *prometheus.GaugeVec
	lag      *prometheus.GaugeVec
	eta      *prometheus.GaugeVec
	records  *prometheus.CounterVec
	differ   *prometheus.GaugeVec
	compared *prometheus.GaugeVec
	failures *prometheus.CounterVec
	switches *prometheus.CounterVec
}

func newRebuildMetrics(reg prometheus.Registerer) (*rebuildMetrics, error) {
	m := &rebuildMetrics{
		serving: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tarn_views_serving_version", Help: "The version of a view that queries read.",
		}, []string{"view"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tarn_views_rebuild_lag_records",
			Help: "Records a rebuilding version still has to process, by view and source topic partition.",
		}, []string{"view", "topic", "partition"}),
		eta: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tarn_views_rebuild_eta_seconds", Help: "Estimated time until a rebuilding version catches up (-1: unknown).",
		}, []string{"view"}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tarn_views_rebuild_records_total", Help: "Input records processed by rebuilding versions on this instance.",
		}, []string{"view"}),
		differ: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tarn_views_rebuild_shadow_differences", Help: "Keys whose values differed between the new and the old version at the last switch.",
		}, []string{"view"}),
		compared: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tarn_views_rebuild_shadow_keys", Help: "Keys compared by the shadow check at the last switch.",
		}, []string{"view"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tarn_views_rebuild_failures_total", Help: "Rebuilds that failed on this instance.",
		}, []string{"view"}),
		switches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tarn_views_rebuild_switches_total", Help: "Switches of serving version followed by this instance.",
		}, []string{"view"}),
	}
	for _, c := range []prometheus.Collector{m.serving, m.lag, m.eta, m.records, m.differ, m.compared, m.failures, m.switches} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe publishes a measured progress.
func (m *rebuildMetrics) observe(view Name, p progress) {
	for tp, l := range p.lag {
		i := len(tp) - 1
		for i > 0 && tp[i] != '/' {
			i--
		}
		m.lag.WithLabelValues(string(view), tp[:i], tp[i+1:]).Set(float64(l))
	}
	m.eta.WithLabelValues(string(view)).Set(p.eta.Seconds())
}

// clear removes a finished rebuild's gauges.
func (m *rebuildMetrics) clear(view Name) {
	m.lag.DeletePartialMatch(prometheus.Labels{"view": string(view)})
	m.eta.DeleteLabelValues(string(view))
}

// throttle limits a rebuilding engine to a rate of input records, allowing bursts of one
// second's worth, so a rebuild leaves room to the serving version.
type throttle struct {
	rate   float64
	tokens float64
	last   time.Time
	seen   int64
}

func newThrottle(rate float64) *throttle { return &throttle{rate: rate, tokens: rate} }

// wait sleeps until the records processed so far are within the rate. A nil throttle does not
// limit.
func (t *throttle) wait(ctx context.Context, processed int64) {
	if t == nil {
		return
	}
	now := time.Now()
	if !t.last.IsZero() {
		t.tokens = min(t.rate, t.tokens+now.Sub(t.last).Seconds()*t.rate)
	}
	t.last = now
	t.tokens -= float64(processed - t.seen)
	t.seen = processed
	if t.tokens >= 0 {
		return
	}
	d := time.Duration(-t.tokens / t.rate * float64(time.Second))
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
