package views

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tarnhq/tarn/internal/topic"
	"github.com/tarnhq/tarn/state"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// servedSpec is what it takes to answer queries from one version's served store without its
// definition: the versions topic keeps it with each version, because after a code change the
// binary has only the new definition while the old version must keep serving.
type servedSpec struct {
	Store    string `json:"store"`
	Windowed bool   `json:"windowed,omitempty"`
	// Window bounds and store options of a windowed store.
	Kind      windowKind    `json:"kind,omitempty"`
	Size      time.Duration `json:"size,omitempty"`
	Span      time.Duration `json:"span,omitempty"`
	Grace     time.Duration `json:"grace,omitempty"`
	Retention time.Duration `json:"retention,omitempty"`
	// Topics are the resolved source topics of the store's sub-topology: the partitions the
	// version's consumer group assigns to the instances that hold the store.
	Topics []string `json:"topics"`
}

// specOf describes v's served store as it runs at version in app; nil if v has none.
func specOf(v *View, app string, version int) *servedSpec {
	st := v.served
	if st == nil {
		return nil
	}
	at := v.at(version)
	s := &servedSpec{Store: st.name, Windowed: st.windowed, Span: st.span, Grace: st.grace, Retention: st.retention}
	if v.windows != nil {
		s.Kind, s.Size = v.windows.kind, v.windows.size
	}
	for _, src := range st.sub.sources {
		s.Topics = append(s.Topics, src.topic.resolve(app, at))
	}
	return s
}

// view builds a definition that has only the served store, fed by nothing: enough to restore
// the store on the partitions the group assigns and to answer queries from it.
func (s *servedSpec) view(name Name, version int, fp string) *View {
	v := &View{name: name, version: version, finger: fp}
	sub := &subtopology{id: 0, view: v}
	for _, t := range s.Topics {
		sub.sources = append(sub.sources, &sourceNode{step: "frozen", topic: topicRef{literal: t}})
	}
	st := &storeSpec{name: s.Store, windowed: s.Windowed, sub: sub, span: s.Span, grace: s.Grace, retention: s.Retention}
	sub.stores = []*storeSpec{st}
	v.subs, v.stores, v.served = []*subtopology{sub}, []*storeSpec{st}, st
	if s.Windowed {
		v.windows = &Windows{kind: s.Kind, size: s.Size}
	}
	return v
}

// at returns the definition as it runs at a data version: versions are numbered by the
// runtime (the versions topic); the declared [Version] is only hashed into the fingerprint
// and is the lowest number a new version gets.
func (v *View) at(version int) *View {
	c := *v
	c.version = version
	return &c
}

// setupFrozen learns the partition counts of a frozen version's topics, which must exist: it
// creates nothing, because a frozen version only reads what it wrote while it was processing.
func (e *engine) setupFrozen(ctx context.Context) error {
	cfg := e.rt.cfg
	e.base = append(append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner())},
		topic.FetchOpts(cfg.MaxRecordBytes)...), cfg.ClientOpts...)
	cl, err := kgo.NewClient(e.base...)
	if err != nil {
		return fmt.Errorf("views: view %q: kafka client: %w", e.v.name, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := e.readSources(ctx, adm); err != nil {
		return err
	}
	return waitTopics(ctx, adm, []string{e.storeID(e.v.served.name, 0).Topic()})
}

// openFrozen restores a frozen version's served store partition from its changelog. There is
// no meta store and no fingerprint check: nothing is written.
func (e *engine) openFrozen(ctx context.Context, id taskID) (*runTask, error) {
	db := e.rt.cfg.State
	st := e.v.served
	w := newWrites(e)
	t := &runTask{task: newTask(e.env, e.v.subs[0], id.part, w), w: w}
	var store offsetStore
	if st.windowed {
		w, err := db.Window(e.storeID(st.name, id.part), st.windowOptions())
		if err != nil {
			return nil, err
		}
		store = w
	} else {
		kv, err := db.KV(e.storeID(st.name, id.part))
		if err != nil {
			return nil, err
		}
		store = kv
	}
	t.served, t.stores = store, []state.Store{store}
	if err := e.restore(ctx, id, t.stores); err != nil {
		return nil, err
	}
	return t, nil
}

// frozenPoll bounds one poll of a frozen session, so that new assignments are restored soon.
const frozenPoll = 200 * time.Millisecond

// frozenSession is a session of a version that answers queries and processes nothing: it is a
// member of the version's group (so its partitions are spread and routed as usual) with every
// topic paused, and restores the tasks it is assigned.
func (e *engine) frozenSession(ctx context.Context) error {
	c, err := e.newConsumer()
	if err != nil {
		return fmt.Errorf("views: view %q: kafka client: %w", e.v.name, err)
	}
	defer func() { e.closeConsumer(c, ctx.Err() != nil) }()
	topics := make([]string, 0, len(e.bySource))
	for t := range e.bySource {
		topics = append(topics, t)
	}
	c.cl.PauseFetchTopics(topics...)
	e.running.Store(true)
	defer e.running.Store(false)
	e.joined.Store(false)
	defer e.joined.Store(false)
	for {
		pctx, cancel := context.WithTimeout(ctx, frozenPoll)
		// A poll that ends by its deadline still blocks rebalances until AllowRebalance, so
		// the assignment callbacks never run while pending tasks are opened.
		fs := c.cl.PollRecords(pctx, 1)
		cancel()
		if fs.IsClientClosed() || ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				e.log.Warn("views: frozen version fetch", "topic", t, "partition", p, "err", err)
			}
		})
		if err := e.openPending(ctx); err != nil {
			return err
		}
		c.cl.AllowRebalance()
	}
}
