// Command bigvalues is the tarn program of integration/bigvalues_test.go: two views that serve
// whole rows, so that large values go through every topic tarn writes. "docs" serves the rows
// of the Postgres table public.docs (CDC table topic → table store and its changelog);
// "blobs" serves the latest record of each key of the Kafka topic "blobs".
package main

import (
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

// Blob is a record of the topic "blobs".
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
		views.TableSource(b, "blobs", views.JSON[Blob]()).Serve()
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	tarn.Main(tarn.Program{Views: []*views.View{docs, blobs}, CDCTables: []string{"public.docs"}})
}
