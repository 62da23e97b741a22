package views

import (
	"fmt"

	json "github.com/goccy/go-json"

	"github.com/tarnhq/tarn/cdc"
	"github.com/twmb/franz-go/pkg/kgo"
)

// change is one update of a table row: the value before (if the key had one) and after (unless
// the key was deleted).
type change[V any] struct {
	old, new       V
	hadOld, hasNew bool
}

// Table is a changing set of rows, one per key: a table source (such as a CDC table topic) or
// the result of an aggregation.
type Table[V any] struct {
	b    *Builder
	sub  *subtopology
	p    *port[change[V]]
	srcs []topicRef
	// store holds exactly this table's rows when the table is materialized as is.
	store *storeSpec
}

func (t *Table[V]) sourceTopics() []topicRef { return t.srcs }

func deriveTable[V, W any](t *Table[V]) *Table[W] {
	return &Table[W]{b: t.b, sub: t.sub, p: &port[change[W]]{}, srcs: t.srcs}
}

// TableSource reads topicName as a table: each record is the new row of its key, a record with
// a nil value (a tombstone) deletes the key, and a truncate marker ([cdc.IsTruncate]) deletes
// every key of the partition. The rows are kept in a store named
// after the source step, so the table can be served or aggregated.
func TableSource[V any](b *Builder, topicName string, codec Codec[V], opts ...SourceOption) *Table[V] {
	return tableFrom(b, topicRef{literal: topicName}, codec, opts)
}

// CDCTable reads the CDC table topic of schema.table (`<app>.cdc.<schema>.<table>`) as a table
// of JSON rows decoded into V. See [TableSource].
func CDCTable[V any](b *Builder, schema, table string, opts ...SourceOption) *Table[V] {
	opts = append([]SourceOption{Step("cdc-" + schema + "-" + table)}, opts...)
	return tableFrom(b, topicRef{cdcSchema: schema, cdcTable: table}, JSON[V](), opts)
}

func tableFrom[V any](b *Builder, ref topicRef, codec Codec[V], opts []SourceOption) *Table[V] {
	c := sourceConfigOf(ref.literal, opts)
	b.step("table", c.step)
	if ref.literal == "" && ref.cdcTable == "" {
		b.fail(c.step, "table topic is empty")
	}
	if codec == nil {
		b.fail(c.step, "codec is nil; use views.JSON[T]()")
		codec = JSON[V]()
	}
	b.describe("table %s %s codec=%s time=%s", c.step, ref, codec.Name(), c.clockName())
	sub := b.newSub()
	st := b.newStore(sub, c.step, false)
	t := &Table[V]{b: b, sub: sub, p: &port[change[V]]{}, srcs: []topicRef{ref}, store: st}
	when := timeOf[V](b, c.step, c)
	_, isJSON := codec.(jsonCodec[V])
	sub.sources = append(sub.sources, &sourceNode{step: c.step, topic: ref, handle: func(tk *task, r *kgo.Record) error {
		if cdc.IsTruncate(r) {
			return truncate(tk, st, t.p)
		}
		old, hadOld, err := loadJSON[V](tk.kv[st.index], r.Key)
		if err != nil {
			return err
		}
		ch := change[V]{old: old, hadOld: hadOld}
		ts := r.Timestamp.UnixMilli()
		if r.Value == nil {
			if err := tk.kv[st.index].Delete(r.Key); err != nil {
				return err
			}
		} else {
			v, err := codec.Decode(r.Value)
			if err != nil {
				tk.deadLetter(c.step, "decode", err.Error())
				return nil
			}
			raw := r.Value
			if !isJSON {
				if raw, err = json.Marshal(v); err != nil {
					return fmt.Errorf("views: step %q: %w", c.step, err)
				}
			}
			if err := tk.kv[st.index].Set(r.Key, raw); err != nil {
				return err
			}
			ch.new, ch.hasNew, ts = v, true, when(tk, v, r)
		}
		tk.wm.observe(r.Topic, ts, tk.wallNow())
		return t.p.emit(tk, string(r.Key), ch, ts)
	}})
	return t
}

// truncate deletes every row of the task's partition of st, emitting each deletion.
func truncate[V any](tk *task, st *storeSpec, p *port[change[V]]) error {
	type row struct {
		key string
		v   V
	}
	var rows []row
	err := tk.kv[st.index].Scan(func(k, val []byte) error {
		var v V
		if err := json.Unmarshal(val, &v); err != nil {
			return fmt.Errorf("views: store %q key %q: %w", st.name, k, err)
		}
		rows = append(rows, row{string(k), v})
		return nil
	})
	if err != nil {
		return err
	}
	ts := tk.cur.Timestamp.UnixMilli()
	for _, r := range rows {
		if err := tk.kv[st.index].Delete([]byte(r.key)); err != nil {
			return err
		}
		if err := p.emit(tk, r.key, change[V]{old: r.v, hadOld: true}, ts); err != nil {
			return err
		}
	}
	return nil
}

// loadJSON reads and decodes key from a store of JSON values.
func loadJSON[V any](s kvStore, key []byte) (V, bool, error) {
	var v V
	raw, ok, err := s.Get(key)
	if err != nil || !ok {
		return v, false, err
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, false, fmt.Errorf("views: stored value of key %q: %w", key, err)
	}
	return v, true, nil
}

// Filter keeps the rows for which keep returns true; a row that stops passing is deleted
// downstream.
func (t *Table[V]) Filter(step string, keep func(key string, v V) bool) *Table[V] {
	t.b.step("filter", step)
	t.b.describe("filter-table %s", step)
	out := deriveTable[V, V](t)
	t.p.to(func(tk *task, key string, c change[V], ts int64) error {
		c.hadOld = c.hadOld && keep(key, c.old)
		c.hasNew = c.hasNew && keep(key, c.new)
		if !c.hadOld && !c.hasNew {
			return nil
		}
		return out.p.emit(tk, key, c, ts)
	})
	return out
}

// MapTable turns each row's value into another, keeping the key.
func MapTable[V, W any](t *Table[V], step string, f func(key string, v V) W) *Table[W] {
	t.b.step("map", step)
	t.b.describe("map-table %s %s->%s", step, typeName[V](), typeName[W]())
	out := deriveTable[V, W](t)
	t.p.to(func(tk *task, key string, c change[V], ts int64) error {
		var d change[W]
		d.hadOld, d.hasNew = c.hadOld, c.hasNew
		if c.hadOld {
			d.old = f(key, c.old)
		}
		if c.hasNew {
			d.new = f(key, c.new)
		}
		return out.p.emit(tk, key, d, ts)
	})
	return out
}

// Serve makes t the view's queryable store: values are stored JSON-encoded and served as is.
// A table that is already held in a store (a table source or an aggregation) is served from
// it; otherwise a store named "view" is added.
func (t *Table[V]) Serve() {
	if t.store != nil {
		t.b.serve(t.store.name, t.store)
		return
	}
	const step = "view"
	t.b.step("serve", step)
	st := t.b.newStore(t.sub, step, false)
	t.b.serve(step, st)
	t.p.to(func(tk *task, key string, c change[V], _ int64) error {
		if !c.hasNew {
			return tk.kv[st.index].Delete([]byte(key))
		}
		raw, err := json.Marshal(c.new)
		if err != nil {
			return fmt.Errorf("views: view %q: encode served value: %w", tk.env.view.name, err)
		}
		return tk.kv[st.index].Set([]byte(key), raw)
	})
}

// To sends every change of t to topicName: the new value encoded with codec, or a tombstone
// when a key is deleted.
func (t *Table[V]) To(topicName string, codec Codec[V]) {
	b := t.b
	if topicName == "" || codec == nil {
		b.fail("", "To needs a topic and a codec")
		return
	}
	b.view.outputs = append(b.view.outputs, topicName)
	b.describe("to-table %s codec=%s", topicName, codec.Name())
	t.p.to(func(tk *task, key string, c change[V], ts int64) error {
		var val []byte
		if c.hasNew {
			var err error
			if val, err = codec.Encode(c.new); err != nil {
				tk.deadLetter("to-"+sanitize(topicName), "encode", err.Error())
				return nil
			}
		}
		tk.produceKeyed(topicName, key, val, ts)
		return nil
	})
}

// GroupedTable is a table re-keyed for aggregation: every change arrives as the retraction of
// the old row and the addition of the new one, in the task of their new keys.
type GroupedTable[V any] struct {
	b   *Builder
	sub *subtopology
	p   *port[signed[V]]
	src []topicRef
}

type signed[V any] struct {
	v        V
	subtract bool
}

const opHeader = "tarn.op"

// GroupTable re-keys the rows of t with f for [AggregateTable], repartitioning through step's
// topic.
func GroupTable[V any](t *Table[V], step string, f func(key string, v V) string) *GroupedTable[V] {
	b := t.b
	b.step("grouptable", step)
	ref := topicRef{repartition: step}
	b.describe("group-table %s", step)
	emit := func(tk *task, key string, v V, ts int64, op string) error {
		raw, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("views: view %q step %q: encode for repartition: %w", tk.env.view.name, step, err)
		}
		tk.produceKeyed(tk.env.resolve(ref), f(key, v), raw, ts, kgo.RecordHeader{Key: opHeader, Value: []byte(op)})
		return nil
	}
	t.p.to(func(tk *task, key string, c change[V], ts int64) error {
		if c.hadOld {
			if err := emit(tk, key, c.old, ts, "sub"); err != nil {
				return err
			}
		}
		if c.hasNew {
			return emit(tk, key, c.new, ts, "add")
		}
		return nil
	})
	sub := b.newSub()
	g := &GroupedTable[V]{b: b, sub: sub, p: &port[signed[V]]{}, src: []topicRef{ref}}
	sub.sources = append(sub.sources, &sourceNode{step: step, topic: ref, handle: func(tk *task, r *kgo.Record) error {
		var v V
		if err := json.Unmarshal(r.Value, &v); err != nil {
			tk.deadLetter(step, "decode", err.Error())
			return nil
		}
		ts := r.Timestamp.UnixMilli()
		tk.wm.observe(r.Topic, ts, tk.wallNow())
		return g.p.emit(tk, string(r.Key), signed[V]{v: v, subtract: headerIs(r, opHeader, "sub")}, ts)
	}})
	return g
}

func headerIs(r *kgo.Record, key, value string) bool {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value) == value
		}
	}
	return false
}

// AggregateTable aggregates a grouped table; agg must have Subtract, since a changed or deleted
// row takes its old value out.
func AggregateTable[V, A any](g *GroupedTable[V], step string, agg Aggregator[V, A]) *Table[A] {
	b := g.b
	b.step("aggregate", step)
	agg.validate(b, step, true, false)
	b.describe("aggregate-table %s agg=%s %s->%s", step, agg.Name, typeName[V](), typeName[A]())
	st := b.newStore(g.sub, step, false)
	out := &Table[A]{b: b, sub: g.sub, p: &port[change[A]]{}, srcs: g.src, store: st}
	if agg.Subtract == nil {
		return out
	}
	g.p.to(func(tk *task, key string, s signed[V], ts int64) error {
		e, err := kvCacheOf(tk, st, out.p).load(key, agg.Init)
		if err != nil {
			return err
		}
		if s.subtract {
			e.val = agg.Subtract(e.val, s.v)
		} else {
			e.val = agg.Add(e.val, s.v)
		}
		e.touch(ts)
		return nil
	})
	return out
}

// Aggregate folds the values of each key of g with agg into a table kept in a store named
// step.
func Aggregate[V, A any](g *Grouped[V], step string, agg Aggregator[V, A]) *Table[A] {
	s := g.s
	b := s.b
	b.step("aggregate", step)
	agg.validate(b, step, false, false)
	b.describe("aggregate %s agg=%s %s->%s", step, agg.Name, typeName[V](), typeName[A]())
	st := b.newStore(s.sub, step, false)
	out := &Table[A]{b: b, sub: s.sub, p: &port[change[A]]{}, srcs: s.srcs, store: st}
	if agg.Init == nil || agg.Add == nil {
		return out
	}
	s.p.to(func(tk *task, key string, v V, ts int64) error {
		e, err := kvCacheOf(tk, st, out.p).load(key, agg.Init)
		if err != nil {
			return err
		}
		e.val = agg.Add(e.val, v)
		e.touch(ts)
		return nil
	})
	return out
}

// Count counts the records of each key of g.
func Count[V any](g *Grouped[V], step string) *Table[int64] {
	return Aggregate(g, step, CountOf[V]())
}

// kvCache holds an aggregation's accumulators for one batch of one task, decoded once and
// encoded once per key per batch; flush writes them to the store and emits one change per key.
type kvCache[A any] struct {
	tk      *task
	st      *storeSpec
	out     *port[change[A]]
	entries map[string]*cacheEntry[A]
	order   []string
}

type cacheEntry[A any] struct {
	old, val A
	existed  bool
	dirty    bool
	ts       int64
}

func (e *cacheEntry[A]) touch(ts int64) {
	e.dirty = true
	e.ts = max(e.ts, ts)
}

func kvCacheOf[A any](tk *task, st *storeSpec, out *port[change[A]]) *kvCache[A] {
	return taskState(tk, st.name, func() *kvCache[A] {
		c := &kvCache[A]{tk: tk, st: st, out: out, entries: map[string]*cacheEntry[A]{}}
		tk.flushers = append(tk.flushers, c.flush)
		return c
	})
}

func (c *kvCache[A]) load(key string, init func() A) (*cacheEntry[A], error) {
	if e, ok := c.entries[key]; ok {
		return e, nil
	}
	old, ok, err := loadJSON[A](c.tk.kv[c.st.index], []byte(key))
	if err != nil {
		return nil, fmt.Errorf("views: view %q store %q: %w", c.tk.env.view.name, c.st.name, err)
	}
	e := &cacheEntry[A]{old: old, val: old, existed: ok}
	if !ok {
		e.val = init()
	}
	c.entries[key] = e
	c.order = append(c.order, key)
	return e, nil
}

func (c *kvCache[A]) flush() error {
	for _, key := range c.order {
		e := c.entries[key]
		if !e.dirty {
			continue
		}
		raw, err := json.Marshal(e.val)
		if err != nil {
			return fmt.Errorf("views: view %q store %q: encode: %w", c.tk.env.view.name, c.st.name, err)
		}
		if err := c.tk.kv[c.st.index].Set([]byte(key), raw); err != nil {
			return err
		}
		ch := change[A]{old: e.old, hadOld: e.existed, new: e.val, hasNew: true}
		if err := c.out.emit(c.tk, key, ch, e.ts); err != nil {
			return err
		}
	}
	clear(c.entries)
	c.order = c.order[:0]
	return nil
}
