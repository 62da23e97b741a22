package tarn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/localpg"
	"github.com/tarnhq/tarn/migrations"
	"github.com/tarnhq/tarn/views"
)

// Demo is what `tarn demo` loads and generates around a program's views.
type Demo struct {
	// Topics are the event topics Generate writes; they are created with --partitions
	// partitions before the views start.
	Topics []string
	// CDCViews name the views that read Postgres tables; they are skipped, with a message,
	// when no Postgres is available.
	CDCViews []string
	// Seed loads the demo rows into Postgres after tarn's migrations ran.
	Seed func(ctx context.Context, pg *pgxpool.Pool) error
	// Generate writes a steady stream of events (and, when pg is not nil, row changes) until
	// ctx ends.
	Generate func(ctx context.Context, kafka *kgo.Client, pg *pgxpool.Pool) error
	// Try are the paths (with query) worth a curl, printed once the API listens.
	Try []string
}

// demoMemory is the store memory of `tarn demo` unless --memory says otherwise.
const demoMemory = "256MiB"

// runDemo starts everything on this machine with no setup: an in-process Kafka broker
// (franz-go's kfake) unless --kafka names one, a throwaway Postgres cluster from the machine's
// binaries unless --postgres names one, the migrations, the demo data and events, and the
// views with their HTTP API. Ctrl-C stops it all and removes what it created.
func runDemo(ctx context.Context, p Program, inv invocation) error {
	if p.Demo == nil {
		return errors.New("this program has no demo; run tarn serve")
	}
	cfg, log := inv.cfg, inv.log
	if cfg.Memory == "" {
		// A demo holds a few thousand keys: a quarter of the machine (serve's default) would
		// only take memory from whatever else runs beside it.
		cfg.Memory = demoMemory
	}
	if len(cfg.Kafka) == 0 {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return fmt.Errorf("in-process Kafka: %w", err)
		}
		defer cluster.Close()
		cfg.Kafka = cluster.ListenAddrs()
		// A fresh broker has none of the changelogs the old local stores came from.
		cfg.DataDir = filepath.Join(cfg.DataDir, "demo")
		if err := os.RemoveAll(cfg.DataDir); err != nil {
			return err
		}
		log.Info("demo: in-process Kafka broker (kfake) started", "brokers", strings.Join(cfg.Kafka, ","))
	}
	pg, stopPostgres, err := demoPostgres(ctx, &cfg, log)
	if err != nil {
		return err
	}
	defer stopPostgres()
	if pg == nil {
		p = withoutViews(p, p.Demo.CDCViews)
		p.CDCTables = nil
		log.Warn("demo: no Postgres (no --postgres and no server binaries found; apt-get install postgresql); skipping the CDC-fed views",
			"skipped", strings.Join(p.Demo.CDCViews, ","))
	} else {
		defer pg.Close()
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Kafka...), kgo.MetadataMinAge(time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := createTopics(ctx, kadm.NewClient(cl), p.Demo.Topics, int32(cfg.Partitions)); err != nil {
		return err
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		if err := p.Demo.Generate(ctx, cl, pg); err != nil && ctx.Err() == nil {
			cancel(fmt.Errorf("demo generator: %w", err))
		}
	}()
	err = runInstance(ctx, p, cfg, log, func(url string) { printTry(inv.stdout, url, p) })
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// demoPostgres connects to --postgres, or starts a throwaway cluster when the machine has the
// server binaries, applies the migrations and loads the demo rows. It returns a nil pool when
// neither is available.
func demoPostgres(ctx context.Context, cfg *Config, log *slog.Logger) (*pgxpool.Pool, func(), error) {
	stop := func() {}
	if cfg.Postgres == "" {
		base, err := os.MkdirTemp("", "tarn-demo-")
		if err != nil {
			return nil, stop, err
		}
		cluster, err := localpg.Start(ctx, base)
		if err != nil {
			os.RemoveAll(base)
			log.Info("demo: no throwaway Postgres", "reason", err.Error())
			return nil, stop, nil
		}
		stop = func() {
			if err := cluster.Stop(); err != nil {
				log.Error("demo: stopping Postgres", "err", err)
			}
			os.RemoveAll(base)
		}
		cfg.Postgres = cluster.URL
		log.Info("demo: throwaway Postgres started", "url", cluster.URL)
	}
	db, err := migrations.Open(cfg.Postgres)
	if err != nil {
		return nil, stop, err
	}
	v, err := migrations.Up(ctx, db)
	var demoV int64
	if err == nil {
		demoV, err = migrations.UpDemo(ctx, db)
	}
	db.Close()
	if err != nil {
		return nil, stop, err
	}
	log.Info("demo: migrations applied", "tarn_version", v, "demo_version", demoV)
	pg, err := pgxpool.New(ctx, cfg.Postgres)
	if err != nil {
		return nil, stop, err
	}
	return pg, stop, nil
}

func createTopics(ctx context.Context, adm *kadm.Client, topics []string, partitions int32) error {
	if len(topics) == 0 {
		return nil
	}
	res, err := adm.CreateTopics(ctx, partitions, -1, nil, topics...)
	if err != nil {
		return fmt.Errorf("create demo topics: %w", err)
	}
	for _, r := range res.Sorted() {
		if r.Err != nil && !strings.Contains(r.Err.Error(), "TOPIC_ALREADY_EXISTS") {
			return fmt.Errorf("create demo topic %s: %w", r.Topic, r.Err)
		}
	}
	return nil
}

func withoutViews(p Program, names []string) Program {
	var keep []*views.View
	for _, v := range p.Views {
		if !slices.Contains(names, string(v.Name())) {
			keep = append(keep, v)
		}
	}
	p.Views = keep
	return p
}

func printTry(w io.Writer, url string, p Program) {
	fmt.Fprintf(w, "\ntarn demo is up: %s (web page), %s/metrics, %s/v1/views\n\nTry:\n", url, url, url)
	for _, path := range p.Demo.Try {
		name := strings.TrimPrefix(path, "/v1/views/")
		name, _, _ = strings.Cut(name, "/")
		name, _, _ = strings.Cut(name, "?")
		if slices.ContainsFunc(p.Views, func(v *views.View) bool { return string(v.Name()) == name }) {
			fmt.Fprintf(w, "  curl -s '%s%s'\n", url, path)
		}
	}
	fmt.Fprintf(w, "\nStop with Ctrl-C.\n\n")
}
