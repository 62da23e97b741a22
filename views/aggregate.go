package views

import (
	"cmp"
	"slices"
)

// Aggregator folds the values of one key (or one window of a key) into an accumulator A. The
// accumulator is stored JSON-encoded and is the value the view serves, so A should marshal to
// what clients want to read.
type Aggregator[V, A any] struct {
	// Name identifies the aggregation in the view's fingerprint.
	Name string
	// Init returns the accumulator of a key that has no values yet. Required.
	Init func() A
	// Add folds one value in. Required.
	Add func(acc A, v V) A
	// Subtract takes one value out again; table aggregations need it because a changed or
	// deleted row retracts its old value. Optional for stream aggregations.
	Subtract func(acc A, v V) A
	// Merge combines two accumulators; session windows need it to merge sessions. Optional.
	Merge func(a, b A) A
}

// validate reports what the aggregator lacks for its use.
func (a Aggregator[V, A]) validate(b *Builder, step string, needSubtract, needMerge bool) {
	if a.Init == nil || a.Add == nil {
		b.fail(step, "aggregator %q needs Init and Add", a.Name)
	}
	if needSubtract && a.Subtract == nil {
		b.fail(step, "aggregator %q has no Subtract; aggregating a table retracts old rows and needs one", a.Name)
	}
	if needMerge && a.Merge == nil {
		b.fail(step, "aggregator %q has no Merge; session windows merge sessions and need one", a.Name)
	}
}

// CountOf counts values.
func CountOf[V any]() Aggregator[V, int64] {
	return Aggregator[V, int64]{
		Name:     "count",
		Init:     func() int64 { return 0 },
		Add:      func(n int64, _ V) int64 { return n + 1 },
		Subtract: func(n int64, _ V) int64 { return n - 1 },
		Merge:    func(a, b int64) int64 { return a + b },
	}
}

// SumOf sums f over the values.
func SumOf[V any](f func(V) float64) Aggregator[V, float64] {
	return Aggregator[V, float64]{
		Name:     "sum",
		Init:     func() float64 { return 0 },
		Add:      func(s float64, v V) float64 { return s + f(v) },
		Subtract: func(s float64, v V) float64 { return s - f(v) },
		Merge:    func(a, b float64) float64 { return a + b },
	}
}

// MinOf keeps the smallest f over the values; it serves as a bare JSON value (null before
// the first value). It cannot subtract.
func MinOf[V any, N cmp.Ordered](f func(V) N) Aggregator[V, *N] {
	return extreme("min", f, func(a, b N) bool { return a < b })
}

// MaxOf keeps the largest f over the values, like [MinOf].
func MaxOf[V any, N cmp.Ordered](f func(V) N) Aggregator[V, *N] {
	return extreme("max", f, func(a, b N) bool { return a > b })
}

func extreme[V any, N cmp.Ordered](name string, f func(V) N, better func(a, b N) bool) Aggregator[V, *N] {
	pick := func(acc *N, n N) *N {
		if acc == nil || better(n, *acc) {
			return &n
		}
		return acc
	}
	return Aggregator[V, *N]{
		Name: name,
		Init: func() *N { return nil },
		Add:  func(acc *N, v V) *N { return pick(acc, f(v)) },
		Merge: func(a, b *N) *N {
			if b == nil {
				return a
			}
			return pick(a, *b)
		},
	}
}

// MinMax is the accumulator of [MinMaxOf].
type MinMax[N cmp.Ordered] struct {
	Min   N     `json:"min"`
	Max   N     `json:"max"`
	Count int64 `json:"count"`
}

// MinMaxOf keeps the smallest and largest f over the values and their count.
func MinMaxOf[V any, N cmp.Ordered](f func(V) N) Aggregator[V, MinMax[N]] {
	merge := func(a, b MinMax[N]) MinMax[N] {
		switch {
		case a.Count == 0:
			return b
		case b.Count == 0:
			return a
		}
		return MinMax[N]{Min: min(a.Min, b.Min), Max: max(a.Max, b.Max), Count: a.Count + b.Count}
	}
	return Aggregator[V, MinMax[N]]{
		Name: "minmax",
		Init: func() MinMax[N] { return MinMax[N]{} },
		Add: func(acc MinMax[N], v V) MinMax[N] {
			n := f(v)
			return merge(acc, MinMax[N]{Min: n, Max: n, Count: 1})
		},
		Merge: merge,
	}
}

// Avg is the accumulator of [AvgOf].
type Avg struct {
	Count int64   `json:"count"`
	Sum   float64 `json:"sum"`
	Mean  float64 `json:"mean"`
}

func (a Avg) with(count int64, sum float64) Avg {
	a.Count, a.Sum, a.Mean = count, sum, 0
	if count != 0 {
		a.Mean = sum / float64(count)
	}
	return a
}

// AvgOf averages f over the values.
func AvgOf[V any](f func(V) float64) Aggregator[V, Avg] {
	return Aggregator[V, Avg]{
		Name:     "avg",
		Init:     func() Avg { return Avg{} },
		Add:      func(a Avg, v V) Avg { return a.with(a.Count+1, a.Sum+f(v)) },
		Subtract: func(a Avg, v V) Avg { return a.with(a.Count-1, a.Sum-f(v)) },
		Merge:    func(a, b Avg) Avg { return a.with(a.Count+b.Count, a.Sum+b.Sum) },
	}
}

// TopN keeps the n best values, best first, where better(a, b) says a ranks above b; ties
// keep the earlier value first. It cannot subtract.
func TopN[V any](n int, better func(a, b V) bool) Aggregator[V, []V] {
	trim := func(vs []V) []V {
		slices.SortStableFunc(vs, func(a, b V) int {
			switch {
			case better(a, b):
				return -1
			case better(b, a):
				return 1
			}
			return 0
		})
		if len(vs) > n {
			vs = vs[:n]
		}
		return vs
	}
	return Aggregator[V, []V]{
		Name:  "top",
		Init:  func() []V { return nil },
		Add:   func(vs []V, v V) []V { return trim(append(vs, v)) },
		Merge: func(a, b []V) []V { return trim(append(slices.Clip(a), b...)) },
	}
}
