package views

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tarnhq/tarn/internal/partition"
	"github.com/twmb/franz-go/pkg/kgo"
)

// memKV is an in-memory kvStore for semantics tests.
type memKV struct{ m map[string][]byte }

func (s *memKV) Get(k []byte) ([]byte, bool, error) { v, ok := s.m[string(k)]; return v, ok, nil }
func (s *memKV) Set(k, v []byte) error              { s.m[string(k)] = v; return nil }
func (s *memKV) Delete(k []byte) error              { delete(s.m, string(k)); return nil }
func (s *memKV) Scan(fn func(k, v []byte) error) error {
	for _, k := range slices.Sorted(maps.Keys(s.m)) {
		if err := fn([]byte(k), s.m[k]); err != nil {
			return err
		}
	}
	return nil
}

// memWin is an in-memory windowStore for semantics tests.
type memWin struct{ m map[string]map[int64][]byte }

func (s *memWin) Get(k []byte, start int64) ([]byte, bool, error) {
	v, ok := s.m[string(k)][start]
	return v, ok, nil
}
func (s *memWin) Set(k []byte, start int64, v []byte) error {
	if s.m[string(k)] == nil {
		s.m[string(k)] = map[int64][]byte{}
	}
	s.m[string(k)][start] = v
	return nil
}
func (s *memWin) Delete(k []byte, start int64) error { delete(s.m[string(k)], start); return nil }
func (s *memWin) Fetch(k []byte, from, to int64, fn func(int64, []byte) error) error {
	w := s.m[string(k)]
	for _, start := range slices.Sorted(maps.Keys(w)) {
		if start >= from && start <= to {
			if err := fn(start, w[start]); err != nil {
				return err
			}
		}
	}
	return nil
}

// driver runs a view without Kafka: records go to the tasks of their partitions, repartition
// records are fed back until nothing is left, and everything else produced is collected.
type driver struct {
	v       *View
	env     *env
	parts   int32
	tasks   map[[2]int]*task
	kv      map[[2]int]*memKV // by store index, partition
	win     map[[2]int]*memWin
	offsets map[string]int64
	queue   []*kgo.Record
	out     []*kgo.Record
	now     time.Time
}

func newDriver(v *View, parts int32) *driver {
	d := &driver{v: v, parts: parts, tasks: map[[2]int]*task{}, kv: map[[2]int]*memKV{},
		win: map[[2]int]*memWin{}, offsets: map[string]int64{}, now: time.UnixMilli(0)}
	d.env = newEnv("app", v, func() time.Time { return d.now }, time.Minute, nil)
	return d
}

func (d *driver) produce(r *kgo.Record)   { d.queue = append(d.queue, r) }
func (d *driver) partitions(string) int32 { return d.parts }
func (d *driver) source(topic string) (*subtopology, *sourceNode) {
	for _, s := range d.v.subs {
		for _, src := range s.sources {
			if d.env.resolve(src.topic) == topic {
				return s, src
			}
		}
	}
	return nil, nil
}

func (d *driver) task(s *subtopology, p int32) *task {
	id := [2]int{s.id, int(p)}
	if t := d.tasks[id]; t != nil {
		return t
	}
	t := newTask(d.env, s, p, d)
	for _, st := range s.stores {
		sid := [2]int{st.index, int(p)}
		if st.windowed {
			d.win[sid] = &memWin{m: map[string]map[int64][]byte{}}
			t.win[st.index] = d.win[sid]
		} else {
			d.kv[sid] = &memKV{m: map[string][]byte{}}
			t.kv[st.index] = d.kv[sid]
		}
	}
	d.tasks[id] = t
	return t
}

// input feeds one record; partition -1 means by key.
func (d *driver) input(r *kgo.Record) error {
	if r.Partition < 0 {
		r.Partition = partition.For(r.Key, d.parts)
	}
	tp := r.Topic + "/" + strconv.Itoa(int(r.Partition))
	r.Offset = d.offsets[tp]
	d.offsets[tp]++
	s, src := d.source(r.Topic)
	if s == nil {
		d.out = append(d.out, r)
		return nil
	}
	return d.task(s, r.Partition).process(src, r)
}

// flush ends a batch: caches flush, then produced records are routed until none is left.
func (d *driver) flush() error {
	for {
		for _, id := range slices.SortedFunc(maps.Keys(d.tasks), func(a, b [2]int) int {
			return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
		}) {
			if err := d.tasks[id].flush(); err != nil {
				return err
			}
		}
		if len(d.queue) == 0 {
			return nil
		}
		q := d.queue
		d.queue = nil
		for _, r := range q {
			if err := d.input(r); err != nil {
				return err
			}
		}
	}
}

// dump renders the served store, then outputs in order, then dead letters.
func (d *driver) dump() string {
	var b strings.Builder
	st := d.v.served
	if st != nil {
		for p := int32(0); p < d.parts; p++ {
			sid := [2]int{st.index, int(p)}
			if kv := d.kv[sid]; kv != nil {
				for _, k := range slices.Sorted(maps.Keys(kv.m)) {
					b.WriteString("view " + k + " " + string(kv.m[k]) + "\n")
				}
			}
			if w := d.win[sid]; w != nil {
				for _, k := range slices.Sorted(maps.Keys(w.m)) {
					for _, s := range slices.Sorted(maps.Keys(w.m[k])) {
						b.WriteString("window " + k + " @" + strconv.FormatInt(s, 10) + " " + string(w.m[k][s]) + "\n")
					}
				}
			}
		}
	}
	for _, r := range d.out {
		if r.Topic == d.env.dlqTopic() {
			continue
		}
		v := string(r.Value)
		if r.Value == nil {
			v = "<tombstone>"
		}
		b.WriteString("out " + r.Topic + " " + string(r.Key) + " " + v + "\n")
	}
	for _, r := range d.out {
		if r.Topic != d.env.dlqTopic() {
			continue
		}
		h := map[string]string{}
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		b.WriteString("dlq " + h["tarn.reason"] + " step=" + h["tarn.step"] + " " + h["tarn.topic"] + "/" + h["tarn.partition"] +
			"@" + h["tarn.offset"] + " key=" + string(r.Key) + ": " + h["tarn.detail"] + "\n")
	}
	return b.String()
}
