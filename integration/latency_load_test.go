package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The loads of TestEventToQueryable: trades on Kafka read by price-range, orders in Postgres
// read by orders-per-customer. Each phase uses keys of its own (fresh symbols, fresh
// customers), so every count starts at zero.

const (
	latGoal    = "≤ 100ms (p99)"
	latRYWGoal = "≤ 250ms (p99)"
)

type kafkaLoad struct {
	t   *testing.T
	in  *instance
	cl  *kgo.Client
	app string
}

func (k *kafkaLoad) symbols(prefix string) []string {
	s := make([]string, latSymbols)
	for i := range s {
		s[i] = fmt.Sprintf("%s%s-%d", prefix, k.app, i)
	}
	return s
}

// produce hands a trade of sym to the producer; done runs with its acknowledgement. Trades
// are keyed by symbol so that each symbol's trades keep their order up to the view.
func (k *kafkaLoad) produce(ctx context.Context, sym string, i int, done func(*kgo.Record, error)) {
	v, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("%s-%d", sym, i), "symbol": sym, "price": 100 + i%50, "qty": 1, "time": time.Now().UTC()})
	k.cl.Produce(ctx, &kgo.Record{Topic: "trades", Key: []byte(sym), Value: v}, done)
}

// maxRate produces trades as fast as the producer takes them for latRampFor and returns the
// records per second price-range made visible: all of them over the time from the first
// produce to the last becoming visible.
func (k *kafkaLoad) maxRate(ctx context.Context) float64 {
	syms := k.symbols("R")
	var acked atomic.Int64
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, latRampFor)
	n := 0
	for ; rctx.Err() == nil; n++ {
		k.produce(ctx, syms[n%len(syms)], n, func(_ *kgo.Record, err error) {
			if err != nil {
				k.t.Errorf("produce: %v", err)
			}
			acked.Add(1)
		})
	}
	cancel()
	if err := k.cl.Flush(ctx); err != nil {
		k.t.Fatal(err)
	}
	at, got := waitVisible(ctx, n, func() int {
		sum := 0
		for _, s := range syms {
			c, _ := tradeCount(k.in, s)
			sum += c
		}
		return sum
	})
	if got < n {
		k.t.Logf("kafka ramp: %d of %d trades visible after %s; the rate is of those", got, n, latRampWait)
	}
	rate := float64(got) / at.Sub(start).Seconds()
	k.t.Logf("kafka ramp: %d trades produced in %s, visible after %s: %.0f/s", n, latRampFor, at.Sub(start).Round(time.Millisecond), rate)
	return rate
}

// measure loads price-range at rate trades/s for d with live watches on its symbols, and
// meanwhile reads one more symbol's trades back with min_offsets= one at a time. phase names
// the run's keys.
func (k *kafkaLoad) measure(ctx context.Context, phase string, rate float64, d time.Duration) []latRow {
	syms := k.symbols("L" + phase)
	arr := newArrivals()
	wctx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	count := func(v json.RawMessage) int {
		var m struct{ Count int }
		json.Unmarshal(v, &m)
		return m.Count
	}
	for _, s := range syms {
		go watchKey(wctx, k.t, k.in.base+"/v1/views/price-range/keys/"+s+"?watch=sse", count,
			func(c int, at time.Time) { arr.visible(s, c, at) })
	}
	time.Sleep(time.Second) // the watches connect

	lctx, stopRYW := context.WithCancel(ctx)
	ryw := make(chan []time.Duration)
	go func() { ryw <- k.readYourWrites(lctx, "W"+phase+k.app) }()
	calls := pace(ctx, rate, d, 1, func(_ context.Context, i int) bool {
		s, n := syms[i%len(syms)], i/len(syms)+1
		k.produce(ctx, s, i, func(_ *kgo.Record, err error) {
			if err != nil {
				k.t.Errorf("produce: %v", err)
				return
			}
			arr.acked(s, n, time.Now())
		})
		return true
	})
	stopRYW()
	waits := <-ryw
	k.cl.Flush(ctx)
	lat, by := settle(arr, calls)
	rowRate := float64(calls) / d.Seconds()
	return []latRow{
		{name: "kafka produce ack → watch", rate: rowRate, goal: latGoal, lat: lat, by: by},
		{name: "kafka read min_offsets wait", rate: rowRate, goal: latRYWGoal, lat: waits},
	}
}

// settle waits up to 10s for every write to be seen and returns the latencies and their
// timeline.
func settle(arr *arrivals, writes int) ([]time.Duration, []time.Duration) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		lat, at, unseen := arr.latenciesAt()
		if (unseen == 0 && len(lat) >= writes) || time.Now().After(deadline) {
			if unseen > 0 || len(lat) < writes {
				fmt.Printf("warning: %d of %d writes were not seen on the watches (left out)\n", writes-len(lat), writes)
			}
			return lat, timeline(lat, at)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readYourWrites produces one trade at a time on a symbol of its own and reads it back at
// once with min_offsets=trades:partition:offset&wait=5s, until ctx ends: the reads' durations.
func (k *kafkaLoad) readYourWrites(ctx context.Context, sym string) []time.Duration {
	var waits []time.Duration
	for i := 1; ctx.Err() == nil; i++ {
		done := make(chan *kgo.Record, 1)
		k.produce(ctx, sym, i, func(r *kgo.Record, err error) {
			if err != nil {
				r = nil
			}
			done <- r
		})
		r := <-done
		if r == nil {
			return waits
		}
		began := time.Now()
		code, body := get(fmt.Sprintf("%s/v1/views/price-range/keys/%s?min_offsets=%s:%d:%d&wait=5s",
			k.in.base, sym, r.Topic, r.Partition, r.Offset))
		took := time.Since(began)
		var got struct{ Value struct{ Count int } }
		json.Unmarshal([]byte(body), &got)
		if code != http.StatusOK || got.Value.Count != i {
			fmt.Printf("warning: kafka read-your-writes %d answered %d with count %d: %.200s\n", i, code, got.Value.Count, body)
			continue
		}
		waits = append(waits, took)
		time.Sleep(10 * time.Millisecond)
	}
	return waits
}

type pgLoad struct {
	t    *testing.T
	in   *instance
	pool *pgxpool.Pool
	base int64 // customers base+0… are this run's
	next atomic.Int64
}

// Customers of each phase: the ramp's base+0…, then phase i's load base+100·(i+1)… and its
// read-your-writes customer base+100·(i+1)+50.
const (
	latRampCustomers = 0
	latPhases        = 2
	latRYWCustomer   = 50
)

func (p *pgLoad) createCustomers(ctx context.Context) {
	for ph := range int64(latPhases + 1) {
		for i := range int64(latSymbols) {
			p.exec(ctx, `INSERT INTO customers (id, name, region) VALUES ($1, 'c', 'eu')`, p.base+100*ph+i)
		}
		p.exec(ctx, `INSERT INTO customers (id, name, region) VALUES ($1, 'c', 'eu')`, p.base+100*ph+latRYWCustomer)
	}
}

func (p *pgLoad) exec(ctx context.Context, sql string, args ...any) {
	if _, err := p.pool.Exec(ctx, sql, args...); err != nil && ctx.Err() == nil {
		p.t.Fatal(err)
	}
}

// insert commits one order (one transaction) of customer with amount.
func (p *pgLoad) insert(ctx context.Context, customer int64, amount int) error {
	_, err := p.pool.Exec(ctx, `INSERT INTO orders (id, customer_id, amount) VALUES ($1, $2, $3)`,
		p.base*10+p.next.Add(1), customer, amount)
	return err
}

// orders reads orders-per-customer's count of customer's orders.
func (p *pgLoad) orders(customer int64) int {
	code, body := get(fmt.Sprintf("%s/v1/views/orders-per-customer/keys/%d", p.in.base, customer))
	if code != http.StatusOK {
		return 0
	}
	var got struct{ Value struct{ Orders int } }
	json.Unmarshal([]byte(body), &got)
	return got.Value.Orders
}

const latPGWorkers = 4 // latSymbols is a multiple: each customer's orders come from one worker, in turn

// maxRate commits orders as fast as latPGWorkers connections can for latRampFor and returns
// the transactions per second orders-per-customer made visible.
func (p *pgLoad) maxRate(ctx context.Context) float64 {
	start := time.Now()
	n := pace(ctx, 1e9, latRampFor, latPGWorkers, func(ctx context.Context, i int) bool {
		err := p.insert(ctx, p.base+latRampCustomers+int64(i%latSymbols), 1)
		if err != nil && ctx.Err() == nil {
			p.t.Errorf("insert: %v", err)
		}
		return err == nil
	})
	at, got := waitVisible(ctx, n, func() int {
		sum := 0
		for i := range int64(latSymbols) {
			sum += p.orders(p.base + latRampCustomers + i)
		}
		return sum
	})
	if got < n {
		p.t.Logf("postgres ramp: %d of about %d orders visible after %s; the rate is of those", got, n, latRampWait)
	}
	rate := float64(got) / at.Sub(start).Seconds()
	p.t.Logf("postgres ramp: about %d orders committed in %s, visible after %s: %.0f/s", n, latRampFor, at.Sub(start).Round(time.Millisecond), rate)
	return rate
}

// measure commits orders at rate per second for latLoadFor with live watches on their
// customers, and meanwhile reads one more customer's orders back with min_lsn= one at a time.
//
// A customer's orders are different rows, so they reach the view through different
// partitions and can be applied out of order. The n-th order has amount n: a value whose
// total is 1+…+count holds exactly the first count orders, and only such a value marks them
// visible (a later one does, if not: the figure can only be too high, never too low).
//
// phase (1…latPhases) picks the run's customers.
func (p *pgLoad) measure(ctx context.Context, phase int, rate float64, d time.Duration) []latRow {
	first := p.base + 100*int64(phase)
	arr := newArrivals()
	wctx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	prefix := func(v json.RawMessage) int {
		var m struct {
			Orders int
			Total  float64
		}
		json.Unmarshal(v, &m)
		if m.Total != float64(m.Orders*(m.Orders+1)/2) {
			return 0
		}
		return m.Orders
	}
	key := func(i int) string { return fmt.Sprint(first + int64(i)) }
	for i := range latSymbols {
		go watchKey(wctx, p.t, p.in.base+"/v1/views/orders-per-customer/keys/"+key(i)+"?watch=sse", prefix,
			func(c int, at time.Time) { arr.visible(key(i), c, at) })
	}
	time.Sleep(time.Second)

	lctx, stopRYW := context.WithCancel(ctx)
	ryw := make(chan []time.Duration)
	go func() { ryw <- p.readYourWrites(lctx, first+latRYWCustomer) }()
	calls := pace(ctx, rate, d, latPGWorkers, func(ctx context.Context, i int) bool {
		c, n := i%latSymbols, i/latSymbols+1
		if err := p.insert(ctx, first+int64(c), n); err != nil {
			if ctx.Err() == nil {
				p.t.Errorf("insert: %v", err)
			}
			return false
		}
		arr.acked(key(c), n, time.Now())
		return true
	})
	stopRYW()
	waits := <-ryw
	lat, by := settle(arr, calls)
	rowRate := float64(calls) / d.Seconds()
	return []latRow{
		{name: "postgres commit → watch", rate: rowRate, goal: latGoal, lat: lat, by: by},
		{name: "postgres read min_lsn wait", rate: rowRate, goal: latRYWGoal, lat: waits},
	}
}

// readYourWrites commits one order at a time of a customer of its own, reads
// pg_current_wal_insert_lsn() on the same connection (see insertOrder) and reads the count back
// at once with min_lsn=&wait=5s, until ctx ends: the reads' durations.
func (p *pgLoad) readYourWrites(ctx context.Context, customer int64) []time.Duration {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return nil
	}
	defer conn.Release()
	var waits []time.Duration
	for i := 1; ctx.Err() == nil; i++ {
		var lsn string
		_, err := conn.Exec(ctx, `INSERT INTO orders (id, customer_id, amount) VALUES ($1, $2, 1)`, p.base*10+p.next.Add(1), customer)
		if err == nil {
			err = conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn)
		}
		if err != nil {
			return waits
		}
		began := time.Now()
		code, n, body := ordersAt(p.in, customer, lsn, "5s")
		took := time.Since(began)
		if code != http.StatusOK || n != i {
			fmt.Printf("warning: postgres read-your-writes %d answered %d with %d orders: %.200s\n", i, code, n, body)
			continue
		}
		waits = append(waits, took)
		time.Sleep(10 * time.Millisecond)
	}
	return waits
}
