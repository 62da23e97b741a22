package cdc

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tarnhq/tarn/internal/topic"
)

// TestSnapshotAndStream preloads 50k rows, then runs inserts, updates and deletes while the
// snapshot is taken; the topic's final state must equal the table, row by row.
func TestSnapshotAndStream(t *testing.T) {
	e := newEnv(t)
	c := e.conn(t)
	mustExec(t, c, `CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, qty int, price numeric(12,2))`)
	mustExec(t, c, `INSERT INTO items SELECT g, 'item ' || g, g % 100, g * 1.25 FROM generate_series(1, 50000) g`)

	cfg := e.config(t, "public.items")
	cfg.SnapshotChunkRows = 2000
	var wg sync.WaitGroup
	ctx, stopLoad := context.WithCancel(context.Background())
	wg.Add(1)
	go func() {
		defer wg.Done()
		load(ctx, t, e, 50000)
	}()
	time.Sleep(100 * time.Millisecond) // let the load begin before the snapshot
	start(t, cfg)
	time.Sleep(2 * time.Second)
	stopLoad()
	wg.Wait()

	tp := topic.CDCTable(e.app, "public", "items")
	want := tableJSON(t, c, tp, "items", "id")
	eventually(t, 60*time.Second, func() string {
		rows, msg := stateOf(t, e.brokers, tp)
		if msg != "" {
			return msg
		}
		return diffStates(rows, want)
	})
}

// load changes random rows of items until ctx ends: inserts above max, updates and deletes.
func load(ctx context.Context, t *testing.T, e *env, max int) {
	c := e.conn(t)
	next := max + 1
	for i := 0; ctx.Err() == nil; i++ {
		id := rand.IntN(next) + 1
		var sql string
		switch i % 4 {
		case 0:
			sql = fmt.Sprintf("INSERT INTO items VALUES (%d, 'new %d', 1, 9.99)", next, next)
			next++
		case 1, 2:
			sql = fmt.Sprintf("UPDATE items SET qty = qty + 1, name = name || '+' WHERE id = %d", id)
		case 3:
			sql = fmt.Sprintf("DELETE FROM items WHERE id = %d", id)
		}
		if _, err := c.Exec(context.Background(), sql); err != nil {
			t.Errorf("%s: %v", sql, err)
			return
		}
	}
}
