package views

import (
	"errors"
	"time"

	json "github.com/goccy/go-json"

	"github.com/tarnhq/tarn/state"
)

// kvAdapter is a task's view of a state.KV partition: reads and writes go through the
// task's write set of the current batch, so reads see the batch's pending writes.
type kvAdapter struct {
	w   *writes
	kv  *state.KV
	rec *task // set for the served store: writes are recorded as changes
	// t, when set, is the task writing: a write whose changelog record is above the
	// changelog's size limit is dead-lettered by it instead (task.fits). Co-table catch-up
	// writes run outside any task's batch and have none.
	t *task
}

func (a kvAdapter) Get(k []byte) ([]byte, bool, error) { return a.kv.Get(a.w.tx(), k) }

func (a kvAdapter) Set(k, v []byte) error {
	if n := len(k) + len(v); a.t != nil && a.t.mayNotFit(n) && !a.t.fits(a.kv.ID().Store, a.kv.ID().Topic(), k, n) {
		return nil
	}
	a.record(k, v)
	return a.kv.Put(a.w.tx(), k, v)
}

func (a kvAdapter) Delete(k []byte) error {
	a.record(k, nil)
	return a.kv.Delete(a.w.tx(), k)
}

func (a kvAdapter) record(k, v []byte) {
	if a.rec != nil {
		a.rec.changes = append(a.rec.changes, Change{Partition: a.rec.partition, Key: string(k), Value: v})
	}
}

func (a kvAdapter) Scan(fn func(k, v []byte) error) error {
	it, err := a.kv.Range(a.w.tx(), nil, nil)
	if err != nil {
		return err
	}
	for it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			return errors.Join(err, it.Close())
		}
	}
	return errors.Join(it.Err(), it.Close())
}

// winAdapter is a task's view of a state.Window partition, like kvAdapter.
type winAdapter struct {
	ws  *writes
	w   *state.Window
	rec *task
	t   *task // as in kvAdapter
}

func (a winAdapter) Get(k []byte, start int64) ([]byte, bool, error) {
	return a.w.Get(a.ws.tx(), k, time.UnixMilli(start))
}

func (a winAdapter) Set(k []byte, start int64, v []byte) error {
	// A window's changelog key is the key and its 8-byte start.
	if n := len(k) + 8 + len(v); a.t != nil && a.t.mayNotFit(n) && !a.t.fits(a.w.ID().Store, a.w.ID().Topic(), k, n) {
		return nil
	}
	a.record(k, start, v)
	return a.w.Put(a.ws.tx(), k, time.UnixMilli(start), v)
}

func (a winAdapter) Delete(k []byte, start int64) error {
	a.record(k, start, nil)
	return a.w.Delete(a.ws.tx(), k, time.UnixMilli(start))
}

func (a winAdapter) record(k []byte, start int64, v []byte) {
	if a.rec != nil {
		w := a.ws.e.v.window(start, v)
		a.rec.changes = append(a.rec.changes, Change{Partition: a.rec.partition, Key: string(k), Window: &w, Value: v})
	}
}

func (a winAdapter) Fetch(k []byte, from, to int64, fn func(int64, []byte) error) error {
	it, err := a.w.Fetch(a.ws.tx(), k, time.UnixMilli(from), time.UnixMilli(to))
	if err != nil {
		return err
	}
	for it.Next() {
		if err := fn(it.Start().UnixMilli(), it.Value()); err != nil {
			return errors.Join(err, it.Close())
		}
	}
	return errors.Join(it.Err(), it.Close())
}

// window returns the bounds of the served window starting at start with stored value v:
// sessions store their end, sliding windows include their end instant.
func (v *View) window(start int64, value []byte) Window {
	w := v.windows
	end := start + w.size.Milliseconds()
	switch w.kind {
	case sliding:
		end++
	case session:
		var sv struct {
			End int64 `json:"end"`
		}
		end = start
		if json.Unmarshal(value, &sv) == nil && value != nil {
			end = sv.End
		}
	}
	return Window{Start: time.UnixMilli(start).UTC(), End: time.UnixMilli(end).UTC()}
}

// windowOptions are the state options of a windowed store.
func (st *storeSpec) windowOptions() state.WindowOptions {
	return state.WindowOptions{Size: max(st.span, time.Millisecond), Grace: st.grace, Retention: st.retention}
}
