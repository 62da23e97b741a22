package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Helpers for the tests that run cmd/tarn's example views through `tarn serve`.

// waitReady waits until in's /readyz answers 200.
func waitReady(t *testing.T, in *instance, limit time.Duration, what string) {
	t.Helper()
	waitServe(t, in, limit, what, func() bool { code, _ := get(in.base + "/readyz"); return code == http.StatusOK })
}

// priceRangeParts is what in says of price-range in /v1/views: the partitions it owns and
// the view's partition count.
func priceRangeParts(in *instance) (owned []int32, partitions int32) {
	var body struct {
		Views []struct {
			Name       string
			Owned      []int32
			Partitions int32
		}
	}
	_, raw := get(in.base + "/v1/views")
	json.Unmarshal([]byte(raw), &body)
	for _, v := range body.Views {
		if v.Name == "price-range" {
			return v.Owned, v.Partitions
		}
	}
	return nil, 0
}

// tradeCount reads price-range's count of trades of sym through in; false unless it answers 200.
func tradeCount(in *instance, sym string) (int, bool) {
	code, body := get(in.base + "/v1/views/price-range/keys/" + sym)
	if code != http.StatusOK {
		return 0, false
	}
	var got struct{ Value struct{ Count int } }
	json.Unmarshal([]byte(body), &got)
	return got.Value.Count, true
}

// insertOrder writes an order of customer and returns pg_current_wal_insert_lsn() after its
// commit: an LSN at or after the commit whatever synchronous_commit is (with it off,
// pg_current_wal_lsn() can trail the commit).
func insertOrder(ctx context.Context, t *testing.T, conn *pgx.Conn, id, customer int64) string {
	t.Helper()
	var lsn string
	_, err := conn.Exec(ctx, `INSERT INTO orders (id, customer_id, amount) VALUES ($1, $2, 1)`, id, customer)
	if err == nil {
		err = conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn)
	}
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

// ordersAt reads orders-per-customer's count of customer's orders through in, waiting (up to
// wait) for lsn: the status, the count and the body.
func ordersAt(in *instance, customer int64, lsn, wait string) (int, int, string) {
	code, body := get(fmt.Sprintf("%s/v1/views/orders-per-customer/keys/%d?min_lsn=%s&wait=%s", in.base, customer, lsn, wait))
	var got struct{ Value struct{ Orders int } }
	json.Unmarshal([]byte(body), &got)
	return code, got.Value.Orders, body
}
