// Command tarn is a tarn program with example views from the field: the price range of each
// stock symbol, the top 10 trades of every minute, orders per customer read from Postgres
// through CDC, ad clicks enriched with their users (a CDC table) and counted per country, and
// an impressions–clicks windowed join as a funnel per campaign. `tarn demo` runs them with no setup; `tarn serve` runs them in production.
//
// Your own program looks the same: define views, then hand them to tarn.Main.
package main

import (
	"fmt"
	"os"

	"github.com/tarnhq/tarn"
)

func main() {
	vs, err := exampleViews()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tarn:", err)
		os.Exit(2)
	}
	tarn.Main(tarn.Program{
		Views:     vs,
		CDCTables: []string{"public.customers", "public.orders", "public.users"},
		Demo:      demo(),
	})
}
