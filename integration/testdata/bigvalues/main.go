// Command bigvalues is the tarn program of integration/bigvalues_test.go: two views that serve
// whole rows, so that large values go through every topic tarn writes. "docs" serves the rows
// of the Postgres table public.docs (CDC table topic → table store and its changelog);
// "blobs" serves the latest record of each key of the Kafka topic named by $BIGVALUES_TOPIC
// (default "blobs"), so that each test has its own.
package main

import (
	"cmp"
	"fmt"
	"os"

	"github.com/tarnhq/tarn"
	"github.com/tarnhq/tarn/views"
)

// Doc is a row of public.docs.
type Doc struct {
	ID   string `json:"id"`
	Body string `json:"body"`
}

// Blob is a record of the blobs topic.
type Blob struct {
	ID   string `json:"id"`
	Data string `json:"data"`
}

func main() {
	docs, err := views.Define("docs", func(b *views.Builder) {
		views.CDCTable[Doc](b, "public", "docs").Serve()
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	blobs, err := views.Define("blobs", func(b *views.Builder) {
		views.TableSource(b, cmp.Or(os.Getenv("BIGVALUES_TOPIC"), "blobs"), views.JSON[Blob](), views.Step("source-blobs")).Serve()
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	tarn.Main(tarn.Program{Views: []*views.View{docs, blobs}, CDCTables: []string{"public.docs"}})
}
