package enrich

import (
	"context"
	"errors"
	"fmt"
	"time"

	json "github.com/goccy/go-json"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tarnhq/tarn/cdc"
	"github.com/tarnhq/tarn/views"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Fetcher looks the row of key up in an external store. found is false when there is no such
// row (a result, cached as a miss); an error is retried and, in the end, dead-lettered.
type Fetcher[T any] func(ctx context.Context, key string) (row T, found bool, err error)

// PostgresJSON fetches rows from Postgres with query, which takes the key as its one text
// parameter and returns one column holding the row as JSON, for example
//
//	SELECT row_to_json(u) FROM users u WHERE id = $1::text::bigint
//
// (row_to_json gives the same field names as the CDC topic's rows). No row is a miss.
func PostgresJSON[T any](pool *pgxpool.Pool, query string) Fetcher[T] {
	return func(ctx context.Context, key string) (T, bool, error) {
		var row T
		var raw []byte
		err := pool.QueryRow(ctx, query, key).Scan(&raw)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return row, false, nil
		case err != nil:
			return row, false, err
		case raw == nil:
			return row, false, nil
		}
		if err := json.Unmarshal(raw, &row); err != nil {
			return row, false, fmt.Errorf("enrich: decode looked-up row of key %q: %w", key, err)
		}
		return row, true, nil
	}
}

// Lookup is a join against an external store through a local cache (see [JoinLookup]).
type Lookup[V, T, W any] struct {
	// Fetch looks a row up. Required; see PostgresJSON.
	Fetch Fetcher[T]
	// Key gives the lookup key of a record. Required. With Changes, it must be written as the
	// change topic's keys are (a CDC topic: the primary key's text, e.g. "42").
	Key func(key string, v V) string
	// Mode is Inner (default: records whose row does not exist are not emitted) or Left
	// (emitted with a nil row). A lookup that fails is never a miss: see JoinLookup.
	Mode Mode
	// Join makes the output of a record and its row. Required.
	Join func(key string, v V, row *T) W
	// Changes, when set, is the table's change topic (its CDC topic): every change of a
	// key evicts it from every instance's cache before the next batch, so the next lookup
	// reads the new row. Default: none (results live for TTL).
	Changes *views.TableTopic
	// CacheSize bounds the cached results (rows and misses) per view and instance; the least
	// recently used go first. Default 10000.
	CacheSize int
	// TTL is how long a found row stays cached. Default 10 minutes; with Changes it only
	// bounds the effect of a change that never arrives.
	TTL time.Duration
	// NegativeTTL is how long a miss stays cached. Default 30 seconds.
	NegativeTTL time.Duration
	// Timeout bounds one attempt. Default 1 second.
	Timeout time.Duration
	// Attempts is how many times a failing lookup is tried before its record goes to the
	// dead-letter topic. Default 3.
	Attempts int
	// Backoff is the wait before the first retry, doubled before each next one. Default 20ms.
	Backoff time.Duration
	// Concurrency bounds the lookups in flight per view and instance. Default 16.
	Concurrency int
	// Registerer receives the lookup's metrics. Default: a private registry.
	Registerer prometheus.Registerer
}

func (l *Lookup[V, T, W]) withDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&l.TTL, 10*time.Minute)
	def(&l.NegativeTTL, 30*time.Second)
	def(&l.Timeout, time.Second)
	def(&l.Backoff, 20*time.Millisecond)
	if l.CacheSize == 0 {
		l.CacheSize = 10000
	}
	if l.Attempts == 0 {
		l.Attempts = 3
	}
	if l.Concurrency == 0 {
		l.Concurrency = 16
	}
	if l.Registerer == nil {
		l.Registerer = prometheus.NewRegistry()
	}
}

// Validate reports every problem of the lookup (after defaults) at once.
func (l *Lookup[V, T, W]) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrJoin}, args...)...))
	}
	if l.Fetch == nil || l.Key == nil || l.Join == nil {
		bad("a lookup needs Fetch, Key and Join functions")
	}
	if l.Mode != Inner && l.Mode != Left {
		bad("a lookup is Inner or Left, not %s", l.Mode)
	}
	if l.CacheSize < 1 || l.Attempts < 1 || l.Concurrency < 1 {
		bad("CacheSize %d, Attempts %d and Concurrency %d must be positive", l.CacheSize, l.Attempts, l.Concurrency)
	}
	if l.TTL < 0 || l.NegativeTTL < 0 || l.Timeout < 0 || l.Backoff < 0 {
		bad("TTL, NegativeTTL, Timeout and Backoff must not be negative")
	}
	return errors.Join(errs...)
}

// JoinLookup joins every record of s with the row its Key names in an external store, read
// through a bounded cache per view and instance that keeps found rows (TTL) and misses
// (NegativeTTL), and that the table's change topic keeps fresh (Changes).
//
// Lookups run asynchronously, at most Concurrency at a time, while the batch goes on: a
// record whose row is cached is joined at once unless an earlier record of its key still
// waits, records that wait are joined at the end of the batch in their order per key (so the
// output keeps the input's order for each key; records of different keys may pass each
// other), and the batch commits only after all of them. One lookup per key and batch serves
// every record that needs it. An attempt that fails or takes longer than Timeout is retried
// after Backoff (doubling) up to Attempts times; then the record goes to the dead-letter
// topic with reason "lookup" and the error: a failed lookup is never taken for a missing row.
//
// Metrics: tarn_enrich_lookups_total{step,result} with result hit, negative_hit (a cached
// miss), miss (fetched) or coalesced (served by a lookup of the same key already in flight in
// the batch); hit rate = (hit+negative_hit)/all. tarn_enrich_lookup_failures_total{step} (failed
// attempts), tarn_enrich_lookup_dead_letters_total{step} and
// tarn_enrich_cache_evictions_total{step,reason} (change or capacity).
func JoinLookup[V, T, W any](s *views.Stream[V], step string, l Lookup[V, T, W]) *views.Stream[W] {
	b := s.Builder()
	l.withDefaults()
	if err := l.Validate(); err != nil {
		b.Fail(step, err)
	}
	m, err := newLookupMetrics(l.Registerer)
	if err != nil {
		b.Fail(step, fmt.Errorf("register lookup metrics: %w", err))
		m = nil
	}
	b.Describe("join-lookup %s mode=%s size=%d ttl=%s negative-ttl=%s", step, l.Mode, l.CacheSize, l.TTL, l.NegativeTTL)
	op := &lookupOp[V, T, W]{l: l, step: step, m: m}
	if l.Changes != nil {
		views.Follow(b, step+"-changes", *l.Changes, false, op.change)
	}
	return views.Process(s, step, views.Processor[V, W]{Record: op.record, Flush: op.flush})
}

type lookupOp[V, T, W any] struct {
	l    Lookup[V, T, W]
	step string
	m    *lookupMetrics
}

// lookupState is one view's lookups in one runtime, shared by its tasks (which may run at the
// same time: the cache locks, the semaphore is a channel).
type lookupState[V, T any] struct {
	cache *cache[T]
	sem   chan struct{}
}

// lookupBatch is what one task's current batch waits for (a [views.BatchLocal]).
type lookupBatch[V, T any] struct {
	flights map[string]*flight[T]      // by lookup key
	queues  map[string][]waiting[V, T] // by record key
	order   []string                   // record keys in the order their first record waited
}

type flight[T any] struct {
	done  chan struct{}
	row   T
	found bool
	err   error
}

type waiting[V, T any] struct {
	v  V
	ts time.Time
	in *views.InputRecord
	f  *flight[T]
}

func (o *lookupOp[V, T, W]) state(c views.Context) *lookupState[V, T] {
	return views.Local(c, "\x00lookup:"+o.step, func() *lookupState[V, T] {
		return &lookupState[V, T]{cache: newCache[T](o.l.CacheSize, o.l.TTL, o.l.NegativeTTL),
			sem: make(chan struct{}, o.l.Concurrency)}
	})
}

// batch is the lookups of the current batch of the task pc handles.
func (o *lookupOp[V, T, W]) batch(pc *views.ProcessContext[W]) *lookupBatch[V, T] {
	return views.BatchLocal(pc, "\x00lookup-batch:"+o.step, func() *lookupBatch[V, T] {
		return &lookupBatch[V, T]{flights: map[string]*flight[T]{}, queues: map[string][]waiting[V, T]{}}
	})
}

func (o *lookupOp[V, T, W]) record(pc *views.ProcessContext[W], key string, v V, ts time.Time) error {
	st := o.state(pc)
	lk := o.l.Key(key, v)
	b := o.batch(pc)
	row, found, hit := st.cache.get(lk, time.Now())
	coalesced := !hit && b.flights[lk] != nil
	o.m.lookup(o.step, resultOf(hit, found, coalesced))
	queued := b.queues[key] != nil
	if hit && !queued {
		return emitJoined(pc, o.l.Mode, key, v, row, found, ts, o.l.Join)
	}
	if !queued {
		b.order = append(b.order, key)
	}
	// A record whose key has an earlier record waiting waits behind it, with the cached
	// result if there is one, to keep the key's order.
	f := &flight[T]{row: row, found: found}
	if !hit {
		f = o.flight(st, b, lk)
	}
	b.queues[key] = append(b.queues[key], waiting[V, T]{v: v, ts: ts, in: pc.Input(), f: f})
	return nil
}

func resultOf(hit, found, coalesced bool) string {
	switch {
	case coalesced:
		return "coalesced"
	case !hit:
		return "miss"
	case found:
		return "hit"
	}
	return "negative_hit"
}

// flight returns the batch's lookup of lk, starting it if it is the first.
func (o *lookupOp[V, T, W]) flight(st *lookupState[V, T], b *lookupBatch[V, T], lk string) *flight[T] {
	if f := b.flights[lk]; f != nil {
		return f
	}
	f := &flight[T]{done: make(chan struct{})}
	b.flights[lk] = f
	go func() {
		defer close(f.done)
		st.sem <- struct{}{}
		defer func() { <-st.sem }()
		f.row, f.found, f.err = o.fetch(lk)
		if f.err == nil && st.cache.put(lk, f.row, f.found, time.Now()) {
			o.m.evicted(o.step, "capacity")
		}
	}()
	return f
}

// fetch tries the lookup up to Attempts times, each bounded by Timeout, backing off between.
func (o *lookupOp[V, T, W]) fetch(lk string) (T, bool, error) {
	delay := o.l.Backoff
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), o.l.Timeout)
		row, found, err := o.l.Fetch(ctx, lk)
		cancel()
		if err == nil {
			return row, found, nil
		}
		o.m.failed(o.step)
		if attempt >= o.l.Attempts {
			return row, false, fmt.Errorf("lookup of key %q failed %d times, last: %w", lk, attempt, err)
		}
		time.Sleep(delay)
		delay *= 2
	}
}

// flush joins the records that waited, key by key in order, once their lookups are done.
func (o *lookupOp[V, T, W]) flush(pc *views.ProcessContext[W]) error {
	b := o.batch(pc)
	// Flush runs until nothing more is emitted: what it handles now is no longer waiting.
	order, queues := b.order, b.queues
	b.order, b.queues, b.flights = nil, map[string][]waiting[V, T]{}, map[string]*flight[T]{}
	for _, key := range order {
		for _, w := range queues[key] {
			if w.f.done != nil {
				<-w.f.done
			}
			if w.f.err != nil {
				o.m.deadLetter(o.step)
				pc.DeadLetterInput(w.in, "lookup", w.f.err.Error())
				continue
			}
			if err := emitJoined(pc, o.l.Mode, key, w.v, w.f.row, w.f.found, w.ts, o.l.Join); err != nil {
				return err
			}
		}
	}
	return nil
}

// change evicts the key of a change record (a truncate evicts everything).
func (o *lookupOp[V, T, W]) change(c *views.FollowContext, r *kgo.Record) error {
	st := o.state(c)
	if cdc.IsTruncate(r) {
		n := st.cache.clear()
		for range n {
			o.m.evicted(o.step, "change")
		}
		return nil
	}
	if st.cache.evict(string(r.Key)) {
		o.m.evicted(o.step, "change")
	}
	return nil
}

// lookupMetrics are a lookup's collectors; lookups of several steps share them by label.
type lookupMetrics struct {
	lookups, failures, deadLetters, evictions *prometheus.CounterVec
}

func newLookupMetrics(reg prometheus.Registerer) (*lookupMetrics, error) {
	m := &lookupMetrics{
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tarn_enrich_lookups_total", Help: "Lookups by result: hit, negative_hit (a cached miss), miss (fetched) or coalesced (joined a lookup in flight).",
		}, []string{"step", "result"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tarn_enrich_lookup_failures_total", Help: "Lookup attempts that failed or timed out.",
		}, []string{"step"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tarn_enrich_lookup_dead_letters_total", Help: "Records sent to the dead-letter topic after their lookup failed every attempt.",
		}, []string{"step"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tarn_enrich_cache_evictions_total", Help: "Cached lookup results evicted, by reason: change or capacity.",
		}, []string{"step", "reason"}),
	}
	for _, c := range []**prometheus.CounterVec{&m.lookups, &m.failures, &m.deadLetters, &m.evictions} {
		if err := reg.Register(*c); err != nil {
			// A second lookup on the same registry shares the collectors already there.
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
			existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
			if !ok {
				return nil, err
			}
			*c = existing
		}
	}
	return m, nil
}

func (m *lookupMetrics) lookup(step, result string) {
	if m != nil {
		m.lookups.WithLabelValues(step, result).Inc()
	}
}

func (m *lookupMetrics) failed(step string) {
	if m != nil {
		m.failures.WithLabelValues(step).Inc()
	}
}

func (m *lookupMetrics) deadLetter(step string) {
	if m != nil {
		m.deadLetters.WithLabelValues(step).Inc()
	}
}

func (m *lookupMetrics) evicted(step, reason string) {
	if m != nil {
		m.evictions.WithLabelValues(step, reason).Inc()
	}
}
