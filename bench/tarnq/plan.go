package tarnq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/topic"
	"github.com/tarnhq/tarn/state"
	"github.com/tarnhq/tarn/views"
)

// Plan is how tarn runs one query: its views (run together in one runtime), the topics each
// view's consumer group reads, and the windowed stores among them.
type Plan struct {
	// Query is the query's name, q0 ... q20.
	Query string
	// Views are the query's views, upstream first.
	Views []*views.View
	// Inputs are the Nexmark topics the query reads.
	Inputs []string
	// Output is the topic the query writes, in bench/README.md's format.
	Output  string
	reads   map[*views.View][]source
	windows map[string]state.WindowOptions // by "<view>/<store>"
}

// source is a topic a view reads: a literal name, or a repartition step of the view.
type source struct {
	name, repartition string
}

func (s source) resolve(app string, v *views.View) string {
	if s.repartition != "" {
		return topic.Repartition(app, string(v.Name()), v.Version(), s.repartition)
	}
	return s.name
}

// add appends view v reading srcs to the plan.
func (p *Plan) add(v *views.View, srcs ...source) {
	p.Views = append(p.Views, v)
	if p.reads == nil {
		p.reads = map[*views.View][]source{}
	}
	p.reads[v] = srcs
}

// windowed declares store of view as windowed with options o, for [Plan.Restore].
func (p *Plan) windowed(view, store string, o state.WindowOptions) {
	if p.windows == nil {
		p.windows = map[string]state.WindowOptions{}
	}
	p.windows[view+"/"+store] = o
}

// Internal returns the topics the plan both writes and reads back under application app:
// its repartition topics.
func (p *Plan) Internal(app string) []string {
	var out []string
	for _, v := range p.Views {
		for _, s := range p.reads[v] {
			if s.repartition != "" {
				out = append(out, s.resolve(app, v))
			}
		}
	}
	return out
}

// Prepare creates the output topic, as the Kafka Streams peer creates its
// output: with the partition count of the first input and unlimited retention, because their
// record timestamps are event times, which may be older than any retention.
func (p *Plan) Prepare(ctx context.Context, adm *kadm.Client) error {
	td, err := adm.ListTopics(ctx, p.Inputs[0])
	if err != nil {
		return fmt.Errorf("tarnq: describe %s: %w", p.Inputs[0], err)
	}
	d, ok := td[p.Inputs[0]]
	if !ok || d.Err != nil || len(d.Partitions) == 0 {
		return fmt.Errorf("tarnq: input topic %s does not exist; run nexmark-gen first", p.Inputs[0])
	}
	unlimited := "-1"
	resp, err := adm.CreateTopic(ctx, int32(len(d.Partitions)), -1, map[string]*string{"retention.ms": &unlimited}, p.Output)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("tarnq: create %s: %w", p.Output, err)
	}
	return waitTopics(ctx, adm, []string{p.Output})
}

// waitTopics waits until every topic's partitions have leaders: a view reading a topic just
// created would otherwise find it missing.
func waitTopics(ctx context.Context, adm *kadm.Client, names []string) error {
	for {
		td, err := adm.ListTopics(ctx, names...)
		if err != nil {
			return fmt.Errorf("tarnq: describe %v: %w", names, err)
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
			return fmt.Errorf("tarnq: topics %v not ready: %w", names, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Topics returns every topic of the plan under application app that exists: the output,
// and the topics the runtime made (changelogs, repartitions, dead letters).
func (p *Plan) Topics(ctx context.Context, adm *kadm.Client, app string) ([]string, error) {
	list, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("tarnq: list topics: %w", err)
	}
	var out []string
	for _, name := range list.Names() {
		if name == p.Output || strings.HasPrefix(name, app+".") {
			out = append(out, name)
		}
	}
	return out, nil
}

// Restore restores every store of the plan's views under application app from its changelog
// into db, as an instance with an empty state directory does, and returns what it read and
// how many changelog partitions held records. Restore reads all partitions of all stores in
// one [state.DB.Restore]; client holds the Kafka options (at least the seed brokers).
func (p *Plan) Restore(ctx context.Context, adm *kadm.Client, db *state.DB, app string, client []kgo.Opt) (state.RestoreStats, int, error) {
	list, err := adm.ListTopics(ctx)
	if err != nil {
		return state.RestoreStats{}, 0, fmt.Errorf("tarnq: list topics: %w", err)
	}
	var stores []state.Store
	for _, v := range p.Views {
		for _, name := range list.Names() {
			store, ok := changelogStore(app, v, name)
			if !ok {
				continue
			}
			for _, part := range list[name].Partitions.Numbers() {
				s, err := p.open(db, state.ID{App: app, View: string(v.Name()), Version: v.Version(), Store: store, Partition: part})
				if err != nil {
					return state.RestoreStats{}, 0, err
				}
				stores = append(stores, s)
			}
		}
	}
	if len(stores) == 0 {
		return state.RestoreStats{}, 0, fmt.Errorf("tarnq: %s has no changelogs under app %q; run it first", p.Query, app)
	}
	stats, err := db.Restore(ctx, state.RestoreConfig{Client: client}, stores...)
	if err != nil {
		return stats, 0, fmt.Errorf("tarnq: restore %s: %w", p.Query, err)
	}
	filled := 0
	for _, pr := range stats.Partitions {
		if pr.Records > 0 {
			filled++
		}
	}
	return stats, filled, nil
}

// changelogStore returns the store whose changelog topic name is, if it is one of v's.
func changelogStore(app string, v *views.View, name string) (string, bool) {
	prefix := topic.ViewPrefix(app, string(v.Name()), v.Version())
	rest, ok := strings.CutPrefix(name, prefix)
	i := strings.LastIndexByte(rest, '.')
	if !ok || i <= 0 {
		return "", false
	}
	store := rest[:i]
	return store, topic.Changelog(app, string(v.Name()), v.Version(), store) == name
}

func (p *Plan) open(db *state.DB, id state.ID) (state.Store, error) {
	if o, ok := p.windows[id.View+"/"+id.Store]; ok {
		return db.Window(id, o)
	}
	return db.KV(id)
}
