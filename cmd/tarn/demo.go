package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn"
)

var symbols = []string{"ACME", "GLOBEX", "HOOLI", "INITECH", "UMBRELLA"}

var regions = []string{"emea", "amer", "apac"}

var countries = []string{"DE", "FR", "US", "BR", "JP", "IN"}

var campaigns = []string{"spring-sale", "new-shoes", "brand"}

// users is the number of demo users; clicks come from them, and from a few unknown ones.
const users = 20

// customers is the number of demo customers; orders go to them at random.
const customers = 20

func demo() *tarn.Demo {
	return &tarn.Demo{
		Topics:   []string{tradesTopic, clicksTopic, impressionsTopic, adClicksTopic},
		CDCViews: []string{"orders-per-customer", "clicks-by-country"},
		Seed:     seed,
		Generate: generate,
		Try: []string{
			"/v1/views/price-range/keys/ACME",
			"/v1/views/price-range?prefix=&limit=10",
			"/v1/views/top-trades/keys/all?from=" + time.Now().Add(-time.Hour).UTC().Format(time.RFC3339),
			"/v1/views/orders-per-customer/keys/7",
			"/v1/views/clicks-by-country?limit=10",
			"/v1/views/campaign-funnel/keys/spring-sale",
			"/v1/views/price-range/keys/ACME?watch=sse",
			"/v1/views/orders-per-customer/changes",
		},
	}
}

// seed loads the demo customers and users; orders and user changes arrive while the demo runs.
func seed(ctx context.Context, pg *pgxpool.Pool) error {
	for i := 1; i <= customers; i++ {
		_, err := pg.Exec(ctx, `INSERT INTO customers (id, name, region) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING`,
			i, fmt.Sprintf("customer %d", i), regions[i%len(regions)])
		if err != nil {
			return fmt.Errorf("seed customers: %w", err)
		}
	}
	for i := 1; i <= users; i++ {
		_, err := pg.Exec(ctx, `INSERT INTO users (id, name, email, country) VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING`,
			i, fmt.Sprintf("user %d", i), fmt.Sprintf("user%d@example.com", i), countries[i%len(countries)])
		if err != nil {
			return fmt.Errorf("seed users: %w", err)
		}
	}
	return nil
}

// generate writes about 200 trades a second and, with Postgres, an order every 200 ms and now
// and then a cancellation, until ctx ends.
func generate(ctx context.Context, cl *kgo.Client, pg *pgxpool.Pool) error {
	if pg != nil {
		if err := seed(ctx, pg); err != nil {
			return err
		}
	}
	prices := map[string]float64{}
	for i, s := range symbols {
		prices[s] = 50 + 25*float64(i)
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		s := symbols[rand.IntN(len(symbols))]
		prices[s] *= 1 + (rand.Float64()-0.5)/50
		t := Trade{ID: strconv.Itoa(n), Symbol: s, Price: float64(int(prices[s]*100)) / 100, Qty: 1 + rand.IntN(500), Time: time.Now().UTC()}
		value, _ := json.Marshal(t)
		cl.Produce(ctx, &kgo.Record{Topic: tradesTopic, Key: []byte(t.ID), Value: value}, nil)
		ads.tick(ctx, cl, n)
		if pg != nil && n%40 == 0 {
			if err := writeOrder(ctx, pg, n/40); err != nil {
				return err
			}
		}
		if pg != nil && n%400 == 0 {
			// A user moves: later clicks count under the new country.
			if _, err := pg.Exec(ctx, `UPDATE users SET country = $1 WHERE id = $2`,
				countries[rand.IntN(len(countries))], 1+rand.IntN(users)); err != nil {
				return fmt.Errorf("demo users: %w", err)
			}
		}
	}
}

// adEvents writes clicks by users, impressions, and clicks on a quarter of the impressions a
// few seconds after them.
type adEvents struct {
	pending []pendingClick
}

type pendingClick struct {
	id string
	at time.Time
}

var ads = &adEvents{}

func (a *adEvents) tick(ctx context.Context, cl *kgo.Client, n int) {
	now := time.Now().UTC()
	if n%5 == 0 {
		c := Click{ID: strconv.Itoa(n), UserID: int64(1 + rand.IntN(users+2)), Ad: campaigns[rand.IntN(len(campaigns))], Time: now}
		v, _ := json.Marshal(c)
		cl.Produce(ctx, &kgo.Record{Topic: clicksTopic, Key: []byte(c.ID), Value: v}, nil)
	}
	if n%2 == 0 {
		id := "imp-" + strconv.Itoa(n)
		v, _ := json.Marshal(Impression{Campaign: campaigns[rand.IntN(len(campaigns))], Time: now})
		cl.Produce(ctx, &kgo.Record{Topic: impressionsTopic, Key: []byte(id), Value: v}, nil)
		if rand.IntN(4) == 0 {
			a.pending = append(a.pending, pendingClick{id: id, at: now.Add(time.Duration(rand.IntN(5000)) * time.Millisecond)})
		}
	}
	for len(a.pending) > 0 && !a.pending[0].at.After(now) {
		v, _ := json.Marshal(AdClick{Time: now})
		cl.Produce(ctx, &kgo.Record{Topic: adClicksTopic, Key: []byte(a.pending[0].id), Value: v}, nil)
		a.pending = a.pending[1:]
	}
}

func writeOrder(ctx context.Context, pg *pgxpool.Pool, id int) error {
	_, err := pg.Exec(ctx, `INSERT INTO orders (id, customer_id, amount) VALUES ($1, $2, $3)`,
		id, 1+rand.IntN(customers), fmt.Sprintf("%d.%02d", 5+rand.IntN(200), rand.IntN(100)))
	if err == nil && id%10 == 0 {
		_, err = pg.Exec(ctx, `UPDATE orders SET status = 'cancelled', amount = 0 WHERE id = $1`, id-5)
	}
	if err != nil {
		return fmt.Errorf("demo orders: %w", err)
	}
	return nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
