package tarn

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/tarnhq/tarn/cdc"
	"github.com/tarnhq/tarn/internal/servebackend"
	"github.com/tarnhq/tarn/serve"
	"github.com/tarnhq/tarn/state"
	"github.com/tarnhq/tarn/views"
)

//go:embed web/index.html
var homePage []byte

func runServe(ctx context.Context, p Program, inv invocation) error {
	if len(inv.cfg.Kafka) == 0 {
		return errors.New("--kafka is required: the Kafka seed brokers (tarn demo runs an in-process broker instead)")
	}
	if len(p.CDCTables) > 0 && inv.cfg.Postgres == "" {
		return fmt.Errorf("--postgres is required: views read the tables %s through CDC", strings.Join(p.CDCTables, ", "))
	}
	return runInstance(ctx, p, inv.cfg, inv.log, nil)
}

// runInstance runs one tarn instance until ctx ends: the CDC source (when there are tables to
// replicate), the views runtime and the HTTP API. ready, when set, is called with the HTTP base
// URL once the API listens.
func runInstance(ctx context.Context, p Program, cfg Config, log *slog.Logger, ready func(url string)) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	var memory int64
	if cfg.Memory != "" {
		memory, _ = parseBytes(cfg.Memory) // Validate checked it
	}
	db, err := state.Open(state.Config{Dir: cfg.DataDir, MemoryBytes: memory, Logger: log, Registerer: reg})
	if err != nil {
		return err
	}
	abandoned := false // a stop that timed out leaves goroutines using db
	defer func() {
		if !abandoned {
			db.Close()
		}
	}()

	ln, err := net.Listen("tcp", cfg.HTTP)
	if err != nil {
		return fmt.Errorf("http: listen on %s: %w", cfg.HTTP, err)
	}
	advertise := cfg.Advertise
	if advertise == "" {
		advertise = "http://" + ln.Addr().String()
	}

	instance, err := instanceID(cfg)
	if err != nil {
		ln.Close()
		return err
	}
	cfg.InstanceID = instance            // the CDC election's group too
	maxRecord, _ := cfg.maxRecordBytes() // Validate checked it
	rt, err := views.NewRuntime(views.Config{App: cfg.App, Brokers: cfg.Kafka, State: db, Views: p.Views,
		ExactlyOnce: cfg.ExactlyOnce, AdvertiseAddr: advertise, InstanceID: instance, SessionTimeout: cfg.Session,
		MaxRecordBytes: maxRecord, Logger: log, Registerer: reg})
	if err != nil {
		ln.Close()
		return err
	}
	var src *cdc.Source
	if len(p.CDCTables) > 0 && cfg.Postgres != "" {
		src, err = cdc.New(cdc.Config{PostgresURL: cfg.Postgres, App: cfg.App, Tables: p.CDCTables,
			Partitions: int32(cfg.Partitions), Brokers: cfg.Kafka, Transactional: cfg.ExactlyOnce,
			Dir: filepath.Join(cfg.DataDir, "cdc"), MaxRecordBytes: maxRecord, Logger: log, Registerer: reg})
		if err != nil {
			ln.Close()
			return err
		}
	}
	health := &cdcHealth{src: src}
	beCfg := servebackend.Config{Runtime: rt, Brokers: cfg.Kafka, App: cfg.App, CDCProblem: health.problem, Logger: log}
	if src != nil {
		beCfg.CDCSlot, beCfg.CDCTopics = src.Slot(), cdcTableTopics(cfg.App, p.CDCTables)
	}
	be, err := servebackend.New(beCfg)
	if err != nil {
		ln.Close()
		return err
	}
	srv, err := serve.New(serve.Config{Backend: be, Addr: cfg.HTTP, TokenFile: cfg.TokenFile,
		Home: http.HandlerFunc(home), Logger: log, Registerer: reg})
	if err != nil {
		ln.Close()
		return err
	}

	g, gctx := errgroup.WithContext(ctx)
	// On a stop the HTTP API outlives the views: an instance answers reads of its partitions
	// until the runtime has committed, left the groups and handed them over, and only then
	// closes its port, so that no read fails during a handover.
	httpCtx, stopHTTP := context.WithCancel(context.WithoutCancel(gctx))
	defer stopHTTP()
	if src != nil {
		g.Go(func() error { return runCDCLeader(gctx, cfg, src, health, log) })
	}
	// Run ends the backend's live streams with instance-stopping and their position once
	// gctx ends; reads go on until the HTTP API closes.
	g.Go(func() error { return be.Run(gctx) })
	g.Go(func() error {
		defer stopHTTP()
		// The views refuse to start on missing source topics; the CDC source creates the
		// table topics, maybe a moment after this starts.
		if err := waitForTableTopics(gctx, cfg, p.CDCTables, log); err != nil {
			return err
		}
		return rt.Run(gctx)
	})
	g.Go(func() error { return srv.Serve(httpCtx, ln) })
	log.Info("tarn: serving", "http", advertise, "views", len(p.Views), "kafka", strings.Join(cfg.Kafka, ","),
		"exactly_once", cfg.ExactlyOnce, "instance_id", instance)
	if ready != nil {
		ready(advertise)
	}
	done := make(chan error, 1)
	go func() { done <- g.Wait() }()
	select {
	case err := <-done:
		return err
	case <-gctx.Done():
	}
	if ctx.Err() != nil {
		log.Info("tarn: stopping: handing partitions over, then closing the HTTP API", "timeout", cfg.Shutdown)
	}
	shutdown := cfg.Shutdown
	if shutdown <= 0 {
		shutdown = 30 * time.Second
	}
	select {
	case err := <-done:
		if ctx.Err() != nil && err == nil {
			log.Info("tarn: stopped")
		}
		return err
	case <-time.After(shutdown):
		abandoned = true
		return fmt.Errorf("tarn: did not stop within --shutdown-timeout %s; exiting without a clean stop (the next start restores what it must)", shutdown)
	}
}

func home(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(homePage)
}

// waitForTableTopics waits until the table topics of a CDC source exist (the source creates
// them when it starts), logging what it waits for now and then.
func waitForTableTopics(ctx context.Context, cfg Config, tables []string, log *slog.Logger) error {
	if len(tables) == 0 || cfg.Postgres == "" {
		return nil
	}
	names := cdcTableTopics(cfg.App, tables)
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Kafka...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for attempt := 0; ; attempt++ {
		details, err := adm.ListTopics(ctx, names...)
		if err == nil && len(details.TopicsSet()) == len(names) && details.Error() == nil {
			return nil
		}
		if attempt%20 == 19 {
			if err != nil { // not a topic missing (that is the normal wait): Kafka unreachable
				log.Warn("tarn: the views wait for the CDC source's table topics; Kafka cannot list them", "topics", strings.Join(names, ","), "err", err)
			} else {
				log.Info("tarn: the views wait for the CDC source to create its table topics", "topics", strings.Join(names, ","))
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(250 * time.Millisecond):
		}
	}
}
