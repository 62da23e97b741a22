package views

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tarnhq/tarn/internal/topic"
	"github.com/tarnhq/tarn/state"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// fingerprintKey is the key under which each meta store keeps the view's fingerprint.
const fingerprintKey = "fingerprint"

// metaStore names the store that keeps the fingerprint for the tasks of sub-topology s; one
// per sub-topology, so that tasks of different sub-topologies never share a store partition.
func metaStore(s *subtopology) string { return "meta-" + strconv.Itoa(s.id) }

// setup checks the view's inputs and creates the topics it writes: repartition, output and
// dead-letter topics when missing, and the changelogs of its stores.
func (e *engine) setup(ctx context.Context) error {
	cfg := e.rt.cfg
	e.base = append(append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		// Per topic: a batch above a topic's max.message.bytes fails every record in it.
		kgo.ProducerBatchMaxBytesFn(e.env.limits.BatchBytes),
	}, topic.FetchOpts(cfg.MaxRecordBytes)...), cfg.ClientOpts...)
	cl, err := kgo.NewClient(e.base...)
	if err != nil {
		return fmt.Errorf("views: view %q: kafka client: %w", e.v.name, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := e.readSources(ctx, adm); err != nil {
		return err
	}
	for _, group := range e.v.copart {
		var names []string
		for _, ref := range group {
			names = append(names, e.env.topics[ref])
		}
		if err := CheckCoPartitioned(ctx, adm, names...); err != nil {
			return fmt.Errorf("views: view %q: %w", e.v.name, err)
		}
	}
	if err := e.createTopics(ctx, adm); err != nil {
		return err
	}
	return e.setupSides(ctx, adm)
}

// readSources learns the partition counts of the view's source topics, which must exist.
func (e *engine) readSources(ctx context.Context, adm *kadm.Client) error {
	if err := e.readSideTopics(ctx, adm); err != nil {
		return err
	}
	var names []string
	for _, s := range e.v.subs {
		for _, src := range s.sources {
			if src.topic.repartition == "" {
				names = append(names, e.env.resolve(src.topic))
			}
		}
	}
	td, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return fmt.Errorf("views: view %q: list source topics: %w", e.v.name, err)
	}
	e.parts = map[string]int32{}
	var missing []string
	widest := int32(0)
	for _, n := range names {
		d, ok := td[n]
		if !ok || d.Err != nil {
			missing = append(missing, n)
			continue
		}
		e.parts[n] = int32(len(d.Partitions))
		widest = max(widest, e.parts[n])
	}
	if len(missing) > 0 {
		return fmt.Errorf("views: view %q: source topics %s do not exist; create them (or start the cdc source) first",
			e.v.name, strings.Join(missing, ", "))
	}
	n := e.rt.cfg.Partitions
	if n == 0 {
		n = widest
	}
	e.subParts = make([]int32, len(e.v.subs))
	for _, s := range e.v.subs {
		for _, src := range s.sources {
			name := e.env.resolve(src.topic)
			if src.topic.repartition != "" {
				e.parts[name] = e.repartitionCount(src.topic, n)
			}
			e.subParts[s.id] = max(e.subParts[s.id], e.parts[name])
		}
	}
	for _, t := range append(slices.Clone(e.v.outputs), e.env.dlqTopic()) {
		e.parts[t] = n
	}
	return nil
}

// createTopics creates repartition, output and dead-letter topics that are missing (existing
// ones keep their partition counts) and ensures every changelog.
func (e *engine) createTopics(ctx context.Context, adm *kadm.Client) error {
	rf := e.rt.cfg.ReplicationFactor
	for name, n := range e.parts {
		if src := e.bySource[name]; src != nil && src.topic.repartition == "" {
			continue
		}
		configs := map[string]*string{topic.MaxMessageBytesKey: topic.MaxMessageBytesValue(e.rt.cfg.MaxRecordBytes)}
		if e.isSource(name) {
			// Repartition records keep their event time as timestamp, which may be old when
			// a view reprocesses history: time-based retention would delete them unread.
			configs["retention.ms"] = &unlimited
		}
		got, err := ensureTopic(ctx, adm, name, n, rf, configs)
		if err != nil {
			return fmt.Errorf("views: view %q: %w", e.v.name, err)
		}
		if got != n && e.isSource(name) {
			return fmt.Errorf("views: view %q: repartition topic %s has %d partitions, want %d; delete it or set Config.Partitions",
				e.v.name, name, got, n)
		}
		e.parts[name] = got
	}
	created := slices.Collect(maps.Keys(e.parts))
	for _, s := range e.v.subs {
		names := []string{metaStore(s)}
		for _, st := range s.stores {
			names = append(names, st.name)
		}
		for _, store := range names {
			cl := e.storeID(store, 0).Topic()
			if err := state.EnsureChangelog(ctx, adm, cl, e.subParts[s.id], rf, e.rt.cfg.MaxRecordBytes); err != nil {
				return fmt.Errorf("views: view %q: %w", e.v.name, err)
			}
			created = append(created, cl)
		}
	}
	if err := waitTopics(ctx, adm, created); err != nil {
		return err
	}
	// Topics that existed keep their max.message.bytes; writes above it are dead-lettered.
	e.written = created
	if err := e.env.limits.Check(ctx, adm, e.log, created...); err != nil {
		return fmt.Errorf("views: view %q: %w", e.v.name, err)
	}
	return nil
}

// waitTopics waits until every topic's partitions have leaders: a topic just created is not
// in every broker's metadata at once, and restoring from it would fail.
func waitTopics(ctx context.Context, adm *kadm.Client, names []string) error {
	for {
		td, err := adm.ListTopics(ctx, names...)
		if err != nil {
			return fmt.Errorf("views: describe created topics: %w", err)
		}
		ready := true
		for _, n := range names {
			d := td[n]
			ready = ready && d.Err == nil && len(d.Partitions) > 0
			for _, p := range d.Partitions {
				ready = ready && p.Err == nil && p.Leader >= 0
			}
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (e *engine) isSource(name string) bool { return e.subOf[name] != nil }

var unlimited = "-1"

// ensureTopic creates a topic with n partitions unless it exists, and returns its partition
// count.
func ensureTopic(ctx context.Context, adm *kadm.Client, name string, n int32, rf int16, configs map[string]*string) (int32, error) {
	resp, err := adm.CreateTopic(ctx, n, rf, configs, name)
	if err == nil {
		err = resp.Err
	}
	if err == nil {
		return n, nil
	}
	if !errors.Is(err, kerr.TopicAlreadyExists) {
		return 0, fmt.Errorf("create topic %s: %w", name, err)
	}
	// Another instance may have just created it: its partitions show up in metadata soon.
	for {
		td, err := adm.ListTopics(ctx, name)
		if err != nil {
			return 0, fmt.Errorf("describe topic %s: %w", name, err)
		}
		if n := len(td[name].Partitions); n > 0 {
			return int32(n), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// CheckCoPartitioned returns an error wrapping [ErrCoPartition] unless every topic has the same
// partition count (tarn and Kafka's default partitioner both use murmur2, so equal counts mean
// a key lands in the same partition of each). The message names every topic and count.
func CheckCoPartitioned(ctx context.Context, adm *kadm.Client, topics ...string) error {
	td, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return fmt.Errorf("views: describe %s: %w", strings.Join(topics, ", "), err)
	}
	counts := make([]string, len(topics))
	same := true
	for i, t := range topics {
		d, ok := td[t]
		if !ok || d.Err != nil {
			return fmt.Errorf("%w: topic %s does not exist", ErrCoPartition, t)
		}
		counts[i] = fmt.Sprintf("%s has %d", t, len(d.Partitions))
		same = same && len(d.Partitions) == len(td[topics[0]].Partitions)
	}
	if !same {
		return fmt.Errorf("%w: %s partitions; give them the same partition count", ErrCoPartition, strings.Join(counts, ", "))
	}
	return nil
}

func (e *engine) storeID(store string, p int32) state.ID {
	return state.ID{App: e.rt.cfg.App, View: string(e.v.name), Version: e.v.version, Store: store, Partition: p}
}

// open makes the task of id: it restores the task's stores from their changelogs and checks
// the fingerprint the stores were written with.
func (e *engine) open(ctx context.Context, id taskID) (*runTask, error) {
	if e.frozen {
		return e.openFrozen(ctx, id)
	}
	db := e.rt.cfg.State
	sub := e.v.subs[id.sub]
	w := newWrites(e)
	t := &runTask{task: newTask(e.env, sub, id.part, w), w: w}
	for _, st := range sub.stores {
		var rec *task
		if st == e.v.served {
			rec = t.task
		}
		if st.windowed {
			w, err := db.Window(e.storeID(st.name, id.part), st.windowOptions())
			if err != nil {
				return nil, err
			}
			t.win[st.index] = winAdapter{ws: t.w, w: w, rec: rec, t: t.task}
			t.stores = append(t.stores, w)
			if rec != nil {
				t.served = w
			}
			continue
		}
		kv, err := db.KV(e.storeID(st.name, id.part))
		if err != nil {
			return nil, err
		}
		t.kv[st.index] = kvAdapter{w: t.w, kv: kv, rec: rec, t: t.task}
		t.stores = append(t.stores, kv)
		if rec != nil {
			t.served = kv
		}
	}
	meta, err := db.KV(e.storeID(metaStore(sub), id.part))
	if err != nil {
		return nil, err
	}
	t.meta = meta
	if err := e.restore(ctx, id, append(t.stores, meta)); err != nil {
		return nil, err
	}
	fp, ok, err := meta.Get(db, []byte(fingerprintKey))
	switch {
	case err != nil:
		return nil, err
	case !ok:
		t.writeFP = true
	case string(fp) != e.v.finger:
		return nil, fmt.Errorf("%w: view %q v%d partition %d was written by definition %.12s, this one is %.12s; "+
			"the versions topic does not match the stores (was it deleted?); call Runtime.Rebuild to rebuild the view",
			ErrFingerprint, e.v.name, e.v.version, id.part, fp, e.v.finger)
	}
	if err := e.openSides(ctx, t); err != nil {
		return nil, err
	}
	return t, nil
}

func (e *engine) restore(ctx context.Context, id taskID, stores []state.Store) error {
	e.setRestoring(id, true)
	defer e.setRestoring(id, false)
	began := time.Now()
	stats, err := e.rt.cfg.State.Restore(ctx, state.RestoreConfig{Client: e.base}, stores...)
	if err != nil {
		return fmt.Errorf("views: view %q: restore partition %d: %w", e.v.name, id.part, err)
	}
	e.log.Info("views: task restored", "sub", id.sub, "partition", id.part, "records", stats.Records,
		"elapsed", time.Since(began).Round(time.Millisecond))
	return nil
}

func (e *engine) setRestoring(id taskID, on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if on {
		e.mu.restoring[id] = true
	} else {
		delete(e.mu.restoring, id)
	}
	e.rt.metrics.restoring.WithLabelValues(string(e.v.name)).Set(float64(len(e.mu.restoring)))
}
