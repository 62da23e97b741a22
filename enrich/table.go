package enrich

import (
	"errors"
	"fmt"
	"time"

	"github.com/tarnhq/tarn/views"
)

// ErrJoin is wrapped by every definition problem of a join; [views.Define] returns it (inside
// views.ErrDefinition); use errors.Is.
var ErrJoin = errors.New("enrich: bad join")

// Mode says which records a join emits.
type Mode int

const (
	// Inner emits only matches.
	Inner Mode = iota
	// Left also emits each left (stream) record that found no match, with a nil right side.
	Left
	// Outer also emits each record of either side that found no match (windowed joins only).
	Outer
)

func (m Mode) String() string {
	switch m {
	case Inner:
		return "inner"
	case Left:
		return "left"
	case Outer:
		return "outer"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Table is a table topic and the codec of its rows.
type Table[T any] struct {
	topic views.TableTopic
	codec views.Codec[T]
}

// TopicTable is the compacted topic topicName, keyed by the table's key, decoded with codec.
func TopicTable[T any](topicName string, codec views.Codec[T]) Table[T] {
	return Table[T]{topic: views.TopicTable(topicName), codec: codec}
}

// CDCTable is the CDC table topic of schema.table, `<app>.cdc.<schema>.<table>`, whose rows
// are JSON objects (cdc.DecodeRow's form) decoded into T.
func CDCTable[T any](schema, table string) Table[T] {
	return Table[T]{topic: views.CDCTableTopic(schema, table), codec: views.JSON[T]()}
}

// TableJoin is a stream–table join against a co-partitioned copy of the table (see
// [JoinTable]).
type TableJoin[V, T, W any] struct {
	// Table is the table joined. Required.
	Table Table[T]
	// Key gives the table key of a stream record. Default: the record's key. When given (or
	// when an earlier step changed the stream's keys), the stream is first repartitioned by
	// it through `<app>.<view>.v<N>.repartition.<step>-by-key`, with the table's partition
	// count; the join's output is then keyed by the table key.
	Key func(key string, v V) string
	// Mode is Inner (default: records without a row are not emitted) or Left (they are
	// emitted with a nil row).
	Mode Mode
	// Codec encodes stream records for the repartition topic. Default views.JSON[V]().
	Codec views.Codec[V]
	// Join makes the output of a record and its row (nil on a left-join miss). Required.
	Join func(key string, v V, row *T) W
}

// JoinTable joins every record of s with the row of its key in a local copy of the table:
// task p keeps partition p of the table topic in a changelogged store (step + "-table").
//
// Co-partitioning: without repartitioning, s's source topic must have the table topic's
// partition count; the view refuses to start otherwise (views.ErrCoPartition, naming both
// topics and counts).
//
// Time: a task's copy is caught up to the end the table topic had when the task started
// before its first record is joined (no false misses after a start, a restart or a
// rebalance). After that, a record sees every table change that was in the table topic when
// its batch was polled and whose timestamp is not later than the record's time; a change
// with a later timestamp is applied before the first later record (see views.CoTable for the
// bound on how far the table may run ahead of a lagging stream). A change that reaches the
// table topic after the record was polled is not seen by it, even with an earlier
// timestamp: Kafka cannot tell a late table change from one that will never come.
func JoinTable[V, T, W any](s *views.Stream[V], step string, j TableJoin[V, T, W]) *views.Stream[W] {
	b := s.Builder()
	if j.Join == nil {
		b.Fail(step, fmt.Errorf("%w: Join function is nil", ErrJoin))
	}
	if j.Mode != Inner && j.Mode != Left {
		b.Fail(step, fmt.Errorf("%w: a stream–table join is Inner or Left, not %s", ErrJoin, j.Mode))
	}
	if j.Codec == nil {
		j.Codec = views.JSON[V]()
	}
	b.Describe("join-table %s mode=%s table=%s", step, j.Mode, j.Table.topic)
	in := s
	if j.Key != nil {
		in = views.SelectKey(s, step+"-key", j.Key)
	}
	if in.KeyChanged() {
		in = views.CoPartition(in, step+"-by-key", j.Codec, j.Table.topic)
	} else {
		b.RequireCoPartitioned(in, j.Table.topic)
	}
	tbl := views.NewCoTable(in, step+"-table", j.Table.topic, j.Table.codec)
	return views.Process(in, step, views.Processor[V, W]{
		Record: func(pc *views.ProcessContext[W], key string, v V, ts time.Time) error {
			row, ok, err := tbl.Get(pc, key)
			if err != nil {
				return err
			}
			return emitJoined(pc, j.Mode, key, v, row, ok, ts, j.Join)
		},
	})
}

// emitJoined emits the join of v with row, or with nil on a left-join miss.
func emitJoined[V, T, W any](pc *views.ProcessContext[W], mode Mode, key string, v V, row T, ok bool, ts time.Time,
	join func(string, V, *T) W) error {
	switch {
	case ok:
		return pc.Emit(key, join(key, v, &row), ts)
	case mode == Left:
		return pc.Emit(key, join(key, v, nil), ts)
	}
	return nil
}

// GlobalJoin is a join against a global table (see [JoinGlobal]).
type GlobalJoin[V, T, W any] struct {
	// Table is the table joined. Required.
	Table Table[T]
	// Key gives the table key of a stream record. Required: a global table needs no
	// co-partitioning, so records keep their keys and partitions.
	Key func(key string, v V) string
	// Mode is Inner (default) or Left.
	Mode Mode
	// Join makes the output of a record and its row (nil on a left-join miss). Required.
	Join func(key string, v V, row *T) W
}

// JoinGlobal joins every record of s with a row of a table copied whole, in memory, to every
// instance ([views.GlobalTable]): for small dimension tables that records of any key need.
// The output keeps s's keys. The copy is loaded before the view's first batch and brought up
// to the table topic's end before each batch: it follows processing time, not the records'
// time.
func JoinGlobal[V, T, W any](s *views.Stream[V], step string, j GlobalJoin[V, T, W]) *views.Stream[W] {
	b := s.Builder()
	if j.Join == nil || j.Key == nil {
		b.Fail(step, fmt.Errorf("%w: a global join needs Key and Join functions", ErrJoin))
	}
	if j.Mode != Inner && j.Mode != Left {
		b.Fail(step, fmt.Errorf("%w: a global join is Inner or Left, not %s", ErrJoin, j.Mode))
	}
	b.Describe("join-global %s mode=%s table=%s", step, j.Mode, j.Table.topic)
	g := views.NewGlobalTable(b, step+"-table", j.Table.topic, j.Table.codec)
	return views.Process(s, step, views.Processor[V, W]{
		Record: func(pc *views.ProcessContext[W], key string, v V, ts time.Time) error {
			row, ok, err := g.Get(pc, j.Key(key, v))
			if err != nil {
				return err
			}
			return emitJoined(pc, j.Mode, key, v, row, ok, ts, j.Join)
		},
	})
}
