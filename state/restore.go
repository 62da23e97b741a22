package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// RestoreConfig configures [DB.Restore]. Its memory use is bounded by about
// 2×FetchMaxBytes of fetched records plus BatchBytes of Pebble batch.
type RestoreConfig struct {
	// Client holds the options every restore client starts from: seed brokers and, if
	// needed, TLS and SASL. Required (at least kgo.SeedBrokers). Restore adds its own
	// consumer options (partitions, read_committed, fetch sizes) after these.
	Client []kgo.Opt
	// FetchMaxBytes caps one fetch response. Default 16 MiB.
	FetchMaxBytes int32
	// FetchMaxPartitionBytes caps one partition's share of a fetch response. Default 8 MiB.
	FetchMaxPartitionBytes int32
	// BatchBytes is the size at which a Pebble batch of restored records is committed (with
	// the offsets it reaches). Default: a quarter of a memtable, at most 16 MiB; batches over
	// half a memtable bypass the memtable in Pebble and cannot reuse their buffer.
	BatchBytes int
	// ProgressInterval is how often restore logs its progress. Default 10s.
	ProgressInterval time.Duration
}

func (c RestoreConfig) withDefaults(memTableSize uint64) RestoreConfig {
	if c.FetchMaxBytes == 0 {
		c.FetchMaxBytes = 16 << 20
	}
	if c.FetchMaxPartitionBytes == 0 {
		c.FetchMaxPartitionBytes = min(8<<20, c.FetchMaxBytes)
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = int(min(max(memTableSize/4, 1<<20), 16<<20))
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = 10 * time.Second
	}
	return c
}

// Validate reports every problem of the config (after defaults) at once.
func (c RestoreConfig) Validate() error {
	var errs []error
	if len(c.Client) == 0 {
		errs = append(errs, errors.New("restore Client options are empty; give at least kgo.SeedBrokers"))
	}
	if c.FetchMaxBytes < 1<<10 {
		errs = append(errs, fmt.Errorf("restore FetchMaxBytes %d is below 1 KiB", c.FetchMaxBytes))
	}
	if c.FetchMaxPartitionBytes < 1<<10 || c.FetchMaxPartitionBytes > c.FetchMaxBytes {
		errs = append(errs, fmt.Errorf("restore FetchMaxPartitionBytes %d is not in [1 KiB, FetchMaxBytes]", c.FetchMaxPartitionBytes))
	}
	if c.BatchBytes < 1 {
		errs = append(errs, fmt.Errorf("restore BatchBytes %d is not positive", c.BatchBytes))
	}
	if c.ProgressInterval < 0 {
		errs = append(errs, fmt.Errorf("restore ProgressInterval %v is negative", c.ProgressInterval))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return nil
}

// PartitionRestore reports what restore did for one store partition.
type PartitionRestore struct {
	ID ID
	// From is the first changelog offset read: the applied offset + 1, or the log start.
	From int64
	// End is the last stable offset when restore began; restore read up to End-1.
	End int64
	// Records and Bytes count the data records applied (control records excluded).
	Records, Bytes int64
	// Wiped is true when the local data was discarded first: there was none with an offset,
	// or its offset was outside the changelog (a recreated or truncated topic).
	Wiped bool
}

// RestoreStats reports a whole restore.
type RestoreStats struct {
	Partitions     []PartitionRestore
	Records, Bytes int64
	Elapsed        time.Duration
}

// restoring is the progress of one store partition.
type restoring struct {
	PartitionRestore
	p   *part
	win *Window
	// pos is the last changelog offset consumed (data or control record).
	pos           int64
	streamTime    int64
	hasStreamTime bool
	timeChanged   bool
	dirty         bool
	done          bool
	label         string // partition as a metric label
	// counted and countedBytes are what the metrics already count.
	counted, countedBytes int64
}

// Restore brings store partitions up to their changelogs: each reads its changelog from the
// applied offset + 1 (or from the beginning when there is no local data) to the last stable
// offset at the start, with read_committed, applying records in large Pebble batches that
// also record the offset they reach. Nothing may write to the partitions meanwhile. The
// changelog topics must exist ([EnsureChangelog]). A record that cannot be decoded stops
// restore with a [*MalformedError].
func (db *DB) Restore(ctx context.Context, cfg RestoreConfig, stores ...Store) (RestoreStats, error) {
	began := time.Now()
	cfg = cfg.withDefaults(db.memTableSize)
	if err := cfg.Validate(); err != nil {
		return RestoreStats{}, err
	}
	if len(stores) == 0 {
		return RestoreStats{}, nil
	}
	parts, err := db.planRestore(ctx, cfg, stores)
	if err != nil {
		return RestoreStats{}, err
	}
	r := &restorer{db: db, cfg: cfg, parts: parts, byTP: make(map[string]*restoring), began: began}
	err = r.run(ctx)
	return r.stats(), err
}

// planRestore reads applied offsets and the changelogs' start and end offsets, and wipes
// partitions whose local data cannot be caught up.
func (db *DB) planRestore(ctx context.Context, cfg RestoreConfig, stores []Store) ([]*restoring, error) {
	cl, err := kgo.NewClient(cfg.Client...)
	if err != nil {
		return nil, fmt.Errorf("state: restore client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var topics []string
	for _, s := range stores {
		topics = append(topics, s.handle().topic)
	}
	slices.Sort(topics)
	topics = slices.Compact(topics)
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("state: restore: list changelog start offsets: %w", err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("state: restore: list changelog end offsets: %w", err)
	}
	var parts []*restoring
	seen := make(map[string]bool)
	for _, s := range stores {
		p := s.handle()
		if seen[string(p.ns)] {
			return nil, fmt.Errorf("state: restore: %s given twice", p.id)
		}
		seen[string(p.ns)] = true
		rp, err := db.planPartition(s, starts, ends)
		if err != nil {
			return nil, err
		}
		parts = append(parts, rp)
	}
	return parts, nil
}

func (db *DB) planPartition(s Store, starts, ends kadm.ListedOffsets) (*restoring, error) {
	p := s.handle()
	start, err := lookupOffset(starts, p)
	if err != nil {
		return nil, err
	}
	end, err := lookupOffset(ends, p)
	if err != nil {
		return nil, err
	}
	rp := &restoring{PartitionRestore: PartitionRestore{ID: p.id, From: start, End: end}, p: p,
		label: strconv.FormatInt(int64(p.id.Partition), 10)}
	rp.win, _ = s.(*Window)
	applied, ok, err := p.offset(db.pdb)
	if err != nil {
		return nil, err
	}
	if ok && applied+1 >= start && applied+1 <= end {
		rp.From = applied + 1
	} else {
		if ok {
			db.log.Warn("state: local store is outside its changelog; discarding it and restoring from the start",
				"store", p.id.String(), "applied_offset", applied, "changelog_start", start, "changelog_end", end)
		}
		if err := db.pdb.DeleteRange(p.ns, prefixEnd(p.ns), pebble.NoSync); err != nil {
			return nil, fmt.Errorf("state: %s: wipe before restore: %w", p.id, err)
		}
		rp.Wiped = true
	}
	if rp.win != nil && !rp.Wiped {
		if rp.streamTime, rp.hasStreamTime, err = readStreamTime(db.pdb, p); err != nil {
			return nil, err
		}
	}
	rp.pos = rp.From - 1
	rp.done = rp.From >= rp.End
	return rp, nil
}

func lookupOffset(l kadm.ListedOffsets, p *part) (int64, error) {
	o, ok := l.Lookup(p.topic, p.id.Partition)
	if !ok {
		if t, ok := l.Lookup(p.topic, -1); ok && t.Err != nil {
			return 0, fmt.Errorf("state: restore %s: changelog topic: %w; create it with EnsureChangelog", p.id, t.Err)
		}
		return 0, fmt.Errorf("state: restore %s: changelog partition %d does not exist; check the store's partition count", p.id, p.id.Partition)
	}
	if o.Err != nil {
		return 0, fmt.Errorf("state: restore %s: list offsets: %w", p.id, o.Err)
	}
	return o.Offset, nil
}

// restorer consumes the changelogs of a set of partitions into Pebble.
type restorer struct {
	db    *DB
	cfg   RestoreConfig
	parts []*restoring
	byTP  map[string]*restoring
	began time.Time
	b     *pebble.Batch
	buf   []byte
	// progress since the last log line
	lastLog                time.Time
	lastRecords, lastBytes int64
	records, bytes         int64
}

func tpKey(topic string, partition int32) string {
	return topic + "/" + strconv.FormatInt(int64(partition), 10)
}

func (r *restorer) run(ctx context.Context) error {
	offsets := make(map[string]map[int32]kgo.Offset)
	for _, rp := range r.parts {
		r.setLag(rp)
		if rp.done {
			continue
		}
		r.byTP[tpKey(rp.p.topic, rp.p.id.Partition)] = rp
		if offsets[rp.p.topic] == nil {
			offsets[rp.p.topic] = make(map[int32]kgo.Offset)
		}
		offsets[rp.p.topic][rp.p.id.Partition] = kgo.NewOffset().At(rp.From)
	}
	if len(r.byTP) == 0 {
		r.logDone()
		return nil
	}
	opts := append(slices.Clone(r.cfg.Client),
		kgo.ConsumePartitions(offsets),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records are kept so that their offsets count as reached: a changelog
		// written transactionally ends with a commit marker, never returned otherwise.
		kgo.KeepControlRecords(),
		kgo.FetchMaxBytes(r.cfg.FetchMaxBytes),
		kgo.FetchMaxPartitionBytes(r.cfg.FetchMaxPartitionBytes),
		kgo.MaxConcurrentFetches(2),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("state: restore client: %w", err)
	}
	defer cl.Close()
	// Sized and retained for BatchBytes so that filling it never regrows (memmove) it.
	r.b = r.db.pdb.NewBatchWithSize(r.cfg.BatchBytes+64<<10, pebble.WithMaxRetainedSizeBytes(2*r.cfg.BatchBytes))
	defer func() { _ = r.b.Close() }()
	r.lastLog = time.Now()
	return r.consume(ctx, cl)
}

func (r *restorer) consume(ctx context.Context, cl *kgo.Client) error {
	remaining := len(r.byTP)
	for remaining > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fetchError(fetches); err != nil {
			return err
		}
		finished, err := r.applyFetches(fetches)
		if err != nil {
			return err
		}
		if len(finished) > 0 {
			cl.PauseFetchPartitions(finished)
			for _, ps := range finished {
				remaining -= len(ps)
			}
		}
		if r.b.Len() >= r.cfg.BatchBytes || remaining == 0 || len(finished) > 0 {
			if err := r.commit(); err != nil {
				return err
			}
		}
		r.maybeLog()
	}
	r.logDone()
	return nil
}

func fetchError(fetches kgo.Fetches) error {
	var errs []error
	fetches.EachError(func(t string, p int32, err error) {
		errs = append(errs, fmt.Errorf("changelog %s partition %d: %w", t, p, err))
	})
	if len(errs) > 0 {
		return fmt.Errorf("state: restore fetch: %w", errors.Join(errs...))
	}
	return nil
}

// applyFetches adds the fetched records to the batch and returns the partitions that
// reached their end offset.
func (r *restorer) applyFetches(fetches kgo.Fetches) (map[string][]int32, error) {
	var finished map[string][]int32
	var err error
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		rp := r.byTP[tpKey(fp.Topic, fp.Partition)]
		if err != nil || rp == nil || rp.done {
			return
		}
		if err = r.applyPartition(rp, fp.Records); err != nil || !rp.done {
			return
		}
		if finished == nil {
			finished = make(map[string][]int32)
		}
		finished[fp.Topic] = append(finished[fp.Topic], fp.Partition)
	})
	return finished, err
}

func (r *restorer) applyPartition(rp *restoring, recs []*kgo.Record) error {
	for _, rec := range recs {
		if rec.Offset >= rp.End {
			rp.done = true
			return nil
		}
		if rec.Offset <= rp.pos {
			continue
		}
		if !rec.Attrs.IsControl() {
			if err := r.applyRecord(rp, rec); err != nil {
				return &MalformedError{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Reason: err}
			}
		}
		rp.pos, rp.dirty = rec.Offset, true
		if rp.pos >= rp.End-1 {
			rp.done = true
			return nil
		}
	}
	return nil
}

func (r *restorer) applyRecord(rp *restoring, rec *kgo.Record) error {
	if rec.Key == nil {
		return errors.New("record has a null key")
	}
	r.buf = r.buf[:0]
	if rp.win == nil {
		r.buf = append(append(r.buf, rp.p.data...), rec.Key...)
	} else {
		key, start, err := decodeWindowChangelogKey(rec.Key)
		if err != nil {
			return err
		}
		r.buf = rp.win.storeKey(r.buf, key, start)
		if rec.Value != nil && (!rp.hasStreamTime || start > rp.streamTime) {
			rp.streamTime, rp.hasStreamTime, rp.timeChanged = start, true, true
		}
	}
	var err error
	if rec.Value == nil {
		err = r.b.Delete(r.buf, nil)
	} else {
		rp.p.filter.add(r.buf) // before the batch commits
		err = r.b.Set(r.buf, rec.Value, nil)
	}
	if err != nil {
		return fmt.Errorf("stage in pebble batch: %w", err)
	}
	n := int64(len(rec.Key) + len(rec.Value))
	rp.Records++
	rp.Bytes += n
	r.records++
	r.bytes += n
	return nil
}

// commit writes the batch with the offsets (and stream times) it reaches, in one Pebble
// batch, so that a crash never records an offset ahead of its data.
func (r *restorer) commit() error {
	for _, rp := range r.parts {
		if !rp.dirty {
			continue
		}
		if err := rp.p.setOffset(r.b, rp.pos); err != nil {
			return fmt.Errorf("state: %s: restore offset: %w", rp.p.id, err)
		}
		if rp.timeChanged {
			if err := setStreamTime(r.b, rp.p, rp.streamTime); err != nil {
				return err
			}
		}
	}
	if err := r.b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("state: restore commit: %w", err)
	}
	r.b.Reset()
	for _, rp := range r.parts {
		if rp.dirty {
			r.db.metrics.restoredRecords.WithLabelValues(rp.p.topic, rp.label).Add(float64(rp.Records - rp.counted))
			r.db.metrics.restoredBytes.WithLabelValues(rp.p.topic, rp.label).Add(float64(rp.Bytes - rp.countedBytes))
			rp.counted, rp.countedBytes = rp.Records, rp.Bytes
			r.setLag(rp)
		}
		rp.dirty, rp.timeChanged = false, false
	}
	return nil
}

// remaining is the number of changelog offsets the partition still has to read.
func (rp *restoring) remaining() int64 {
	if rp.done {
		return 0
	}
	return max(rp.End-1-rp.pos, 0)
}

func (r *restorer) setLag(rp *restoring) {
	r.db.metrics.restoreLag.WithLabelValues(rp.p.topic, rp.label).Set(float64(rp.remaining()))
}

func (r *restorer) remaining() int64 {
	var n int64
	for _, rp := range r.parts {
		n += rp.remaining()
	}
	return n
}

// maybeLog logs progress once per ProgressInterval: records and bytes so far, the recent
// rate, and the offsets still to read.
func (r *restorer) maybeLog() {
	now := time.Now()
	since := now.Sub(r.lastLog)
	if since < r.cfg.ProgressInterval {
		return
	}
	r.db.log.Info("state: restoring", "partitions", len(r.parts), "records", r.records, "bytes", r.bytes,
		"records_per_sec", int64(float64(r.records-r.lastRecords)/since.Seconds()),
		"mb_per_sec", float64(r.bytes-r.lastBytes)/since.Seconds()/1e6,
		"remaining_offsets", r.remaining())
	r.lastLog, r.lastRecords, r.lastBytes = now, r.records, r.bytes
}

func (r *restorer) logDone() {
	elapsed := time.Since(r.began)
	secs := max(elapsed.Seconds(), 1e-9)
	r.db.log.Info("state: restored", "partitions", len(r.parts), "records", r.records, "bytes", r.bytes,
		"elapsed", elapsed.Round(time.Millisecond), "records_per_sec", int64(float64(r.records)/secs),
		"mb_per_sec", float64(r.bytes)/secs/1e6)
}

func (r *restorer) stats() RestoreStats {
	st := RestoreStats{Records: r.records, Bytes: r.bytes, Elapsed: time.Since(r.began)}
	for _, rp := range r.parts {
		st.Partitions = append(st.Partitions, rp.PartitionRestore)
	}
	return st
}
