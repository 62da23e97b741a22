// Command tarn-testenv starts one real Postgres and one real Kafka for a whole test run, writes
// their addresses as shell exports to the file named by -env, and stops both when it receives
// SIGINT or SIGTERM. scripts/test.sh runs it around `go test ./...`, so every package shares
// the two servers instead of starting its own.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tarnhq/tarn/internal/localpg"
	"github.com/tarnhq/tarn/internal/testenv"
)

func main() {
	envFile := flag.String("env", "", "file to write the shell exports to (required)")
	flag.Parse()
	if *envFile == "" {
		log.Fatal("tarn-testenv: -env FILE is required")
	}
	if err := run(*envFile); err != nil {
		log.Fatal(err)
	}
}

func run(envFile string) error {
	base, err := os.MkdirTemp("", "tarn-testenv-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(base)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	begin := time.Now()
	var pg *localpg.Cluster
	var kafka *testenv.KafkaProcess
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) { pg, err = localpg.Start(gctx, base); return err })
	g.Go(func() (err error) { kafka, err = testenv.StartKafka(gctx, base); return err })
	err = g.Wait()
	defer func() {
		if kafka != nil {
			kafka.Stop()
		}
		if pg != nil {
			pg.Stop()
		}
	}()
	if err != nil {
		return err
	}
	log.Printf("tarn-testenv: Postgres at %s, Kafka at %s, started in %s",
		pg.URL, strings.Join(kafka.Brokers, ","), time.Since(begin).Round(10*time.Millisecond))

	exports := fmt.Sprintf("export %s=%q\nexport %s=%q\nexport %s=%q\nexport %s=%q\n",
		testenv.EnvPostgresURL, pg.URL, testenv.EnvKafkaBrokers, strings.Join(kafka.Brokers, ","),
		testenv.EnvPostgresLog, pg.LogPath(), testenv.EnvKafkaLog, kafka.LogPath())
	// Written under a temporary name and renamed, so the script never reads half a file.
	if err := os.WriteFile(envFile+".tmp", []byte(exports), 0o644); err != nil {
		return err
	}
	if err := os.Rename(envFile+".tmp", envFile); err != nil {
		return err
	}
	<-ctx.Done()
	if errors.Is(context.Cause(ctx), context.Canceled) {
		log.Print("tarn-testenv: stopping Postgres and Kafka")
	}
	return nil
}
