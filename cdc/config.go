package cdc

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tarnhq/tarn/internal/topic"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Config configures a Source. New copies it and fills the defaults stated on each field.
type Config struct {
	// PostgresURL is the database to replicate (required). The role needs the REPLICATION
	// attribute, SELECT on the tables, and ownership of them if the publication must be created.
	PostgresURL string
	// App prefixes every topic, `<App>.cdc.<schema>.<table>` (required).
	App string
	// Publication is the publication to read; it is created for Tables when missing.
	// Default: "tarn_<App>" (lowercased, '-' becomes '_').
	Publication string
	// Slot is the logical replication slot. Default: "tarn_<App>" (lowercased, '-' becomes '_').
	Slot string
	// Tables are the schema-qualified tables to replicate, e.g. "public.users" (required).
	Tables []string
	// Partitions is the partition count of each table topic. It must equal that of any stream
	// the table is joined with. Default: 3.
	Partitions int32
	// TablePartitions overrides Partitions for single tables, by schema-qualified name.
	TablePartitions map[string]int32
	// Brokers are Kafka seed brokers (required unless KafkaOptions sets kgo.SeedBrokers).
	Brokers []string
	// KafkaOptions are added to the options of every Kafka client the source makes (TLS, SASL,
	// metadata ages, ...).
	KafkaOptions []kgo.Opt
	// ReplicationFactor of the topics the source creates. Default: -1 (the broker's default).
	ReplicationFactor int16
	// Transactional writes each batch of Postgres transactions, with the source's position, in
	// one Kafka transaction: exactly-once. When false (the default) records are at-least-once:
	// after a crash the transactions after the last written position are written again, with
	// the same (lsn, seq) headers (see Position).
	Transactional bool
	// TransactionalID is the Kafka transactional id. Default: "tarn-cdc-<App>-<Slot>".
	TransactionalID string
	// TransactionTimeout bounds one Kafka transaction; it must exceed the time to write the
	// largest Postgres transaction and at most the broker's transaction.max.timeout.ms.
	// Default: 5m.
	TransactionTimeout time.Duration
	// Dir holds the local row state used to fill unchanged TOAST columns. Default:
	// "tarn-data/cdc/<Slot>".
	Dir string
	// SnapshotChunkRows is the number of rows fetched per round trip in the initial snapshot.
	// Default: 10000.
	SnapshotChunkRows int
	// BatchInterval and BatchRecords bound a batch: whole Postgres transactions written and
	// confirmed together. A batch closes at the first commit after either bound is reached.
	// Defaults: 50ms and 20000 (the interval is most of the time a committed row takes to
	// reach Kafka when writes are sparse, and so of a min_lsn read's wait).
	BatchInterval time.Duration
	BatchRecords  int
	// StatusInterval is how often the source reports its confirmed position to Postgres; it
	// must be well below the server's wal_sender_timeout (default 60s). Default: 10s.
	StatusInterval time.Duration
	// HeartbeatInterval is how often the source writes a logical message so that an idle
	// publication still moves the slot and lets the server recycle WAL; it also samples the
	// slot's lag. Default: 10s.
	HeartbeatInterval time.Duration
	// MaxRecordBytes is the largest record (one row change: key, value and headers) the
	// source writes. Table and dead-letter topics are created with a max.message.bytes to
	// match, and the producer's batches and the consumers' fetches are sized for it; an
	// existing topic with a smaller limit is named in a warning at start and keeps its
	// limit. A row change above its topic's limit goes to the dead-letter topic
	// (<App>.dlq) with its key, CDC headers, size and limit but no value, is counted in
	// tarn_cdc_dead_letters_total, and the source goes on: views keep the row's previous
	// value. Default: 16 MiB; at least 1 MiB, at most 64 MiB.
	MaxRecordBytes int32
	// ResnapshotOnInvalidSlot makes the source drop an invalidated or missing slot and start
	// over with a fresh snapshot (preceded by truncate markers) instead of failing with
	// ErrSlotInvalidated or ErrSlotMissing. Default: false.
	ResnapshotOnInvalidSlot bool
	// Logger receives progress and warnings. Default: slog.Default().
	Logger *slog.Logger
	// Registerer receives the source's metrics. Default: a private registry.
	Registerer prometheus.Registerer
}

func defaultName(app string) string {
	return "tarn_" + strings.ReplaceAll(strings.ToLower(app), "-", "_")
}

func (c *Config) setDefaults() {
	if c.Publication == "" {
		c.Publication = defaultName(c.App)
	}
	if c.Slot == "" {
		c.Slot = defaultName(c.App)
	}
	if c.Partitions == 0 {
		c.Partitions = 3
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = -1
	}
	if c.TransactionalID == "" {
		c.TransactionalID = "tarn-cdc-" + c.App + "-" + c.Slot
	}
	if c.TransactionTimeout == 0 {
		c.TransactionTimeout = 5 * time.Minute
	}
	if c.Dir == "" {
		c.Dir = filepath.Join("tarn-data", "cdc", c.Slot)
	}
	if c.SnapshotChunkRows == 0 {
		c.SnapshotChunkRows = 10000
	}
	if c.BatchInterval == 0 {
		c.BatchInterval = 50 * time.Millisecond
	}
	if c.BatchRecords == 0 {
		c.BatchRecords = 20000
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = 10 * time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 10 * time.Second
	}
	if c.MaxRecordBytes == 0 {
		c.MaxRecordBytes = topic.DefaultMaxRecordBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
}

// ErrConfig wraps every configuration problem; use errors.Is.
var ErrConfig = errors.New("cdc: invalid config")

// Validate reports every problem of the configuration at once.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...))
	}
	if c.PostgresURL == "" {
		bad("PostgresURL is empty")
	}
	if err := topic.ValidateName("app", c.App); err != nil {
		bad("App: %v", err)
	}
	if err := validIdent(c.Slot); err != nil {
		bad("Slot: %v", err)
	}
	if err := validIdent(c.Publication); err != nil {
		bad("Publication: %v", err)
	}
	if len(c.Tables) == 0 {
		bad("Tables is empty; name at least one schema-qualified table")
	}
	seen := map[string]bool{}
	for _, t := range c.Tables {
		if _, _, err := splitTable(t); err != nil {
			bad("Tables: %v", err)
		}
		if seen[t] {
			bad("Tables: %q is listed twice", t)
		}
		seen[t] = true
	}
	if c.Partitions < 1 {
		bad("Partitions is %d; it must be positive", c.Partitions)
	}
	for t, n := range c.TablePartitions {
		if !seen[t] {
			bad("TablePartitions names %q, which is not in Tables", t)
		}
		if n < 1 {
			bad("TablePartitions[%q] is %d; it must be positive", t, n)
		}
	}
	if len(c.Brokers) == 0 && len(c.KafkaOptions) == 0 {
		bad("Brokers is empty and no KafkaOptions are given")
	}
	if c.StatusInterval < 0 || c.HeartbeatInterval < 0 || c.BatchInterval < 0 || c.BatchRecords < 0 || c.SnapshotChunkRows < 0 {
		bad("intervals and sizes must not be negative")
	}
	if err := topic.ValidateMaxRecordBytes(c.MaxRecordBytes); err != nil {
		bad("%v", err)
	}
	return errors.Join(errs...)
}

// validIdent accepts the identifiers the source puts in SQL and replication commands
// unquoted: the replication protocol folds slot names to lower case, so only lower case is
// accepted, and Postgres limits names to 63 bytes.
func validIdent(s string) error {
	if s == "" || len(s) > 63 {
		return fmt.Errorf("%q must have 1 to 63 characters", s)
	}
	for i, r := range s {
		ok := r >= 'a' && r <= 'z' || r == '_' || i > 0 && r >= '0' && r <= '9'
		if !ok {
			return fmt.Errorf("%q may contain only lower-case letters, digits and '_' (not first)", s)
		}
	}
	return nil
}

// splitTable splits "schema.table"; both parts become parts of a topic name.
func splitTable(qualified string) (schema, table string, err error) {
	schema, table, ok := strings.Cut(qualified, ".")
	if !ok {
		return "", "", fmt.Errorf("table %q is not schema-qualified (want e.g. public.%s)", qualified, qualified)
	}
	if err := topic.ValidateName("schema", schema); err != nil {
		return "", "", err
	}
	if err := topic.ValidateName("table", table); err != nil {
		return "", "", err
	}
	return schema, table, nil
}

func (c *Config) partitionsOf(table string) int32 {
	if n, ok := c.TablePartitions[table]; ok {
		return n
	}
	return c.Partitions
}
