package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/tarnhq/tarn/cdc/internal/pgjson"
	"github.com/tarnhq/tarn/internal/topic"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Source replicates the configured tables into their table topics. Build it with New and call
// Run once at a time.
type Source struct {
	cfg       Config
	m         *metrics
	streaming atomic.Bool
}

// New copies cfg, fills its defaults and checks it; it connects to nothing.
func New(cfg Config) (*Source, error) {
	cfg.Tables = slices.Clone(cfg.Tables)
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer, cfg.Slot)
	if err != nil {
		return nil, err
	}
	return &Source{cfg: cfg, m: m}, nil
}

// Streaming reports whether a Run streams changes now (past its snapshot and
// START_REPLICATION): what tells a source that recovered from one that still fails.
func (s *Source) Streaming() bool { return s.streaming.Load() }

// Slot is the replication slot the source streams (Config.Slot or its default).
func (s *Source) Slot() string { return s.cfg.Slot }

// Run connects, takes the initial snapshot if the source has no position yet, and streams
// changes until ctx is cancelled (then it returns nil) or an error stops it. After an error it
// may be called again: it resumes from the last position durable in Kafka.
func (s *Source) Run(ctx context.Context) error {
	r := &runner{cfg: &s.cfg, log: s.cfg.Logger.With("slot", s.cfg.Slot), m: s.m, streaming: &s.streaming}
	err := r.run(ctx)
	r.close()
	s.streaming.Store(false)
	s.m.up.Set(0)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		s.m.errors.WithLabelValues(errorKind(err)).Inc()
	}
	return err
}

// runner holds what one Run opened.
type runner struct {
	cfg *Config
	log *slog.Logger
	m   *metrics
	// streaming is the Source's, set once START_REPLICATION succeeded.
	streaming *atomic.Bool
	catalog   *pgx.Conn
	types     *typeCache
	tables    []*table
	byName    map[string]*table
	repl      *pgconn.PgConn
	user      string // the role of repl, for messages
	sys       pglogrepl.IdentifySystemResult
	producer  *kgo.Client
	sink      *sink
	rows      *rowState
	pos       position
}

func (r *runner) run(ctx context.Context) error {
	if err := r.openPostgres(ctx); err != nil {
		return err
	}
	if err := r.openKafka(ctx); err != nil {
		return err
	}
	posTopic := topic.CDCPosition(r.cfg.App, r.cfg.Slot)
	pos, err := readPosition(ctx, r.cfg, r.producer, posTopic)
	if err != nil {
		return err
	}
	if err := r.openReplication(ctx); err != nil {
		return err
	}
	fresh, err := r.decide(ctx, pos)
	if err != nil {
		return err
	}
	if err := ensurePublication(ctx, r.catalog, r.cfg.Publication, r.tables, fresh); err != nil {
		return err
	}
	if err := os.MkdirAll(r.cfg.Dir, 0o755); err != nil {
		return fmt.Errorf("cdc: create Config.Dir: %w", err)
	}
	if r.rows, err = openRowState(r.cfg.Dir); err != nil {
		return err
	}
	if fresh {
		if err := r.snapshot(ctx); err != nil {
			return err
		}
	} else {
		r.pos = *pos
		if err := r.syncRowState(ctx); err != nil {
			return err
		}
	}
	return r.stream(ctx)
}

func (r *runner) close() {
	bg := context.Background()
	if r.sink != nil {
		if err := r.sink.abort(bg); err != nil {
			r.log.Warn("cdc: abort open Kafka transaction", "err", err)
		}
	}
	if r.producer != nil {
		r.producer.Close()
	}
	if r.repl != nil {
		r.repl.Close(bg)
	}
	if r.catalog != nil {
		r.catalog.Close(bg)
	}
	if r.rows != nil {
		if err := r.rows.close(); err != nil {
			r.log.Warn("cdc: close local row state", "err", err)
		}
	}
}

func (r *runner) openPostgres(ctx context.Context) error {
	var err error
	if r.catalog, err = connect(ctx, r.cfg.PostgresURL); err != nil {
		return err
	}
	if err := checkWalLevel(ctx, r.catalog); err != nil {
		return err
	}
	r.types = newTypeCache(r.catalog)
	r.byName = map[string]*table{}
	var errs []error
	for _, name := range r.cfg.Tables {
		t, err := loadTable(ctx, r.catalog, r.types, r.cfg.App, name, r.cfg.partitionsOf(name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r.tables = append(r.tables, t)
		r.byName[name] = t
	}
	return errors.Join(errs...)
}

func (r *runner) openKafka(ctx context.Context) error {
	var err error
	limits := topic.NewLimits(r.cfg.MaxRecordBytes)
	if r.producer, err = newProducer(r.cfg, limits); err != nil {
		return err
	}
	posTopic := topic.CDCPosition(r.cfg.App, r.cfg.Slot)
	dlqParts, err := ensureTopics(ctx, kadm.NewClient(r.producer), r.cfg, r.tables, posTopic, limits)
	if err != nil {
		return err
	}
	r.sink = &sink{cl: r.producer, txn: r.cfg.Transactional, posTopic: posTopic, slot: r.cfg.Slot,
		tooLarge: r.tooLarge(limits, dlqParts)}
	return nil
}

func (r *runner) openReplication(ctx context.Context) error {
	cfg, err := pgconn.ParseConfig(r.cfg.PostgresURL)
	if err != nil {
		return fmt.Errorf("%w: PostgresURL: %w", ErrConfig, err)
	}
	for k, v := range pgjson.SessionParams {
		cfg.RuntimeParams[k] = v
	}
	cfg.RuntimeParams["replication"] = "database"
	if r.repl, err = pgconn.ConnectConfig(ctx, cfg); err != nil {
		return classifyConnect(err, cfg.User, true)
	}
	r.user = cfg.User
	if r.sys, err = pglogrepl.IdentifySystem(ctx, r.repl); err != nil {
		return fmt.Errorf("cdc: IDENTIFY_SYSTEM: %w", err)
	}
	return nil
}

// decide reports whether the source starts over with a snapshot, and checks that the slot can
// resume from pos otherwise.
func (r *runner) decide(ctx context.Context, pos *position) (bool, error) {
	slot, err := readSlot(ctx, r.catalog, r.cfg.Slot)
	if err != nil {
		return false, err
	}
	if pos == nil {
		if slot.exists {
			r.log.Info("cdc: dropping a slot without a durable position (left by an unfinished snapshot)")
			return true, r.dropSlot(ctx)
		}
		return true, nil
	}
	if pos.SystemID != r.sys.SystemID || pos.Timeline != r.sys.Timeline {
		return false, fmt.Errorf("%w: position was taken on system %s timeline %d, server is system %s timeline %d; start over with a new slot and topics",
			ErrServerChanged, pos.SystemID, pos.Timeline, r.sys.SystemID, r.sys.Timeline)
	}
	switch {
	case !slot.exists && r.cfg.ResnapshotOnInvalidSlot:
		r.log.Warn("cdc: slot is missing; starting over with a fresh snapshot")
		return true, nil
	case !slot.exists:
		return false, fmt.Errorf("%w: %s", ErrSlotMissing, r.cfg.Slot)
	case slot.walStatus == "lost" && r.cfg.ResnapshotOnInvalidSlot:
		r.log.Warn("cdc: slot is invalidated; dropping it and starting over with a fresh snapshot")
		return true, r.dropSlot(ctx)
	case slot.walStatus == "lost":
		return false, fmt.Errorf("%w: %s (raise max_slot_wal_keep_size to keep this from recurring)", ErrSlotInvalidated, r.cfg.Slot)
	case slot.confirmed > pos.Resume:
		return false, fmt.Errorf("%w: slot %s confirmed %s, durable position %s", ErrSlotAhead, r.cfg.Slot, slot.confirmed, pos.Resume)
	}
	return false, nil
}

func (r *runner) dropSlot(ctx context.Context) error {
	if err := r.waitSlotInactive(ctx); err != nil {
		return err
	}
	return dropSlot(ctx, r.catalog, r.cfg.Slot)
}

// waitSlotInactive waits for the server to notice that a previous incarnation is gone: after
// a crash its walsender holds the slot until the server sees the connection closed.
func (r *runner) waitSlotInactive(ctx context.Context) error {
	const limit = 60 * time.Second
	deadline := time.Now().Add(limit)
	for {
		var active bool
		err := r.catalog.QueryRow(ctx, "SELECT coalesce((SELECT active FROM pg_replication_slots WHERE slot_name = $1), false)", r.cfg.Slot).Scan(&active)
		if err != nil {
			return fmt.Errorf("cdc: read slot %s: %w", r.cfg.Slot, err)
		}
		if !active {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: slot %s still active after %s", ErrSlotBusy, r.cfg.Slot, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// syncRowState rebuilds the local row state from the table topics unless it is exactly at
// the source's position.
func (r *runner) syncRowState(ctx context.Context) error {
	rec, err := r.rows.recorded()
	if err != nil {
		return err
	}
	if rec != nil && *rec == r.pos {
		return nil
	}
	start := time.Now()
	r.log.Info("cdc: rebuilding the local row state from the table topics", "position", r.pos.Resume)
	r.m.rowStateBuild.Inc()
	if err := r.rows.reset(); err != nil {
		return err
	}
	byTopic := map[string]*table{}
	topics := make([]string, 0, len(r.tables))
	for _, t := range r.tables {
		byTopic[t.topic] = t
		topics = append(topics, t.topic)
	}
	type tp struct {
		topic     string
		partition int32
	}
	last := map[tp]Position{}
	n := 0
	err = readToEnd(ctx, r.cfg.kafkaOpts(), topics, func(rec *kgo.Record) error {
		p, err := RecordPosition(rec)
		if err != nil {
			return fmt.Errorf("cdc: rebuild from %s/%d@%d: %w", rec.Topic, rec.Partition, rec.Offset, err)
		}
		k := tp{rec.Topic, rec.Partition}
		if prev, seen := last[k]; p.LSN > r.pos.Commit || seen && !prev.Less(p) {
			return nil // not covered by the position, or written twice (at-least-once)
		}
		last[k] = p
		n++
		t := byTopic[rec.Topic]
		switch {
		case IsTruncate(rec):
			return r.rows.truncate(t.qualified)
		case rec.Value == nil:
			return r.rows.del(t.qualified, rec.Key)
		}
		return r.rows.set(t.qualified, rec.Key, rec.Value)
	})
	if err != nil {
		return err
	}
	if err := r.rows.commit(&r.pos); err != nil {
		return err
	}
	r.log.Info("cdc: rebuilt the local row state", "records", n, "took", time.Since(start).Round(time.Millisecond))
	return nil
}
