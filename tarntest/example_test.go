package tarntest_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/tarnhq/tarn/tarntest"
)

// Start tarn's image against a Kafka broker and a Postgres database on the host, then wait for
// an order inserted in Postgres to show in orders-per-customer. It runs only with a Docker engine
// and the tarn image (scripts/tarn-image.sh builds tarn:dev), hence no Output: it is compiled,
// and integration/tarn_container_test.go runs the same for real.
func ExampleRun() {
	ctx := context.Background()
	tc, err := tarntest.Run(ctx, "tarn:dev",
		tarntest.WithHostNetwork(), // the broker advertises 127.0.0.1
		tarntest.WithKafka("127.0.0.1:9092"),
		tarntest.WithPostgres("postgres://postgres@127.0.0.1:5432/shop?sslmode=disable"),
		tarntest.WithApp("shop-test"),
		tarntest.WithExactlyOnce(),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer tc.Terminate(ctx)

	views, err := tc.Client.Views(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(views), "views at", tc.URL)

	// ... INSERT INTO orders ... then poll until the view has applied it.
	var stats struct {
		Orders int     `json:"orders"`
		Total  float64 `json:"total"`
	}
	for {
		err := tc.Client.Get(ctx, "orders-per-customer", "7", &stats)
		if err == nil && stats.Orders > 0 {
			break
		}
		if err != nil && !errors.Is(err, tarntest.ErrNoKey) {
			log.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Printf("customer 7: %d orders, %.2f in total\n", stats.Orders, stats.Total)
}
