package views

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tarnhq/tarn/internal/topic"
	"github.com/tarnhq/tarn/state"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
)

// Sentinel errors of the runtime; use errors.Is.
var (
	// ErrConfig is wrapped by every problem Config.Validate reports.
	ErrConfig = errors.New("views: bad runtime config")
	// ErrFingerprint: the stores hold state written by a different definition of the view.
	ErrFingerprint = errors.New("views: state was written by a different view definition")
	// ErrCoPartition: inputs that must be co-partitioned have different partition counts.
	ErrCoPartition = errors.New("views: inputs are not co-partitioned")
	// ErrUnknownView: no view of that name runs in this runtime.
	ErrUnknownView = errors.New("views: unknown view")
	// ErrNotFound: the key (or window) is not in the view.
	ErrNotFound = errors.New("views: not found")
	// ErrRestoring: the partition is still restoring its stores; retry or ask for stale reads.
	ErrRestoring = errors.New("views: partition is restoring")
	// ErrNotServed: the view has no queryable store of this kind.
	ErrNotServed = errors.New("views: view is not queryable this way")
)

// NotOwnerError says that another instance owns the partition of a key; Addr is its advertised
// HTTP address, empty when no instance owns it right now.
type NotOwnerError struct {
	View      Name
	Partition int32
	Addr      string
}

func (e *NotOwnerError) Error() string {
	if e.Addr == "" {
		return fmt.Sprintf("views: view %q partition %d has no owner right now", e.View, e.Partition)
	}
	return fmt.Sprintf("views: view %q partition %d is owned by %s", e.View, e.Partition, e.Addr)
}

// Config configures a [Runtime].
type Config struct {
	// App is the application id: the prefix of every topic and group. Required.
	App string
	// Brokers are the Kafka seed brokers. Required.
	Brokers []string
	// State is the process's store database. Required.
	State *state.DB
	// Views are the views this runtime maintains; names must be unique. Required.
	Views []*View
	// ExactlyOnce turns on Kafka transactions: changelog, repartition and output records and
	// input offsets commit atomically. Default false (at-least-once).
	ExactlyOnce bool
	// AdvertiseAddr is this instance's HTTP address, published in its Kafka client id so that
	// other instances can route a key to its owner. Default "" (not routable).
	AdvertiseAddr string
	// InstanceID makes this runtime a static member of every view's consumer group
	// (group.instance.id, KIP-345): a restarted instance with the same id takes its
	// partitions back at once, without waiting for its dead predecessor's session to expire,
	// and its exactly-once producer fences the predecessor's open transaction instead of
	// waiting for it to time out. It must be stable across restarts and unique among the
	// app's live instances (tarn keeps one in the data folder). On a stop the runtime leaves
	// the groups, so the others take over at once. Default "" (dynamic membership).
	InstanceID string
	// SessionTimeout is how long the group waits for a silent member before moving its
	// partitions: the time a SIGKILLed instance that does not come back stays unserved.
	// The broker bounds it (group.min.session.timeout.ms, 6s by default). Default 10s.
	SessionTimeout time.Duration
	// StallTimeout is how long a view may apply no batch while input waits for it (lag > 0,
	// nothing restoring) before its watchdog calls it stalled: it logs it, shows the view
	// failing, and makes a new Kafka client (a batch stuck on a broker that came back, a
	// transaction that never ends). Default 2m.
	StallTimeout time.Duration
	// IdleTimeout is how long an input partition may go without records before it stops
	// holding back its task's watermark. Default 30s.
	IdleTimeout time.Duration
	// MaxPollRecords bounds one batch. Default 50000: each batch waits once for Kafka to
	// acknowledge its changelog and output records, and folds its updates of one key into one
	// write, so larger batches cost less per record (on the Nexmark benchmark 50000 gave
	// 1.2–1.4× the records/s of 10000; 100000 no more). A batch is also the unit of a
	// query's freshness and of an exactly-once transaction.
	MaxPollRecords int
	// TaskParallelism is how many tasks (partitions) of one view process a batch at the same
	// time. State made with [Local] is shared by them. Default GOMAXPROCS.
	TaskParallelism int
	// Partitions is the partition count of topics the runtime creates (repartition, output
	// and dead-letter topics that do not exist). Default: the largest partition count among
	// each view's source topics.
	Partitions int32
	// ReplicationFactor of created topics; -1 is the broker default. Default -1.
	ReplicationFactor int16
	// TransactionTimeout is the Kafka transaction timeout in exactly-once mode: how long a
	// crashed instance's open transaction blocks readers. Default 30s.
	TransactionTimeout time.Duration
	// MaxRecordBytes is the largest record (key, value and headers) the runtime writes to
	// a changelog, repartition, output or dead-letter topic. The topics it creates get a
	// max.message.bytes to match and its clients' produce and fetch limits are sized for it;
	// an existing topic with a smaller limit is named in a warning at start and keeps its
	// smaller limit. A record above its topic's limit is not produced: the input record
	// that made it goes to the dead-letter topic with reason "too-large", its size and the
	// limit (without its value), it is counted, and the view goes on. Default 16 MiB; at
	// least 1 MiB, at most 64 MiB.
	MaxRecordBytes int32
	// ClientOpts are added to every Kafka client the runtime makes (TLS, SASL, tuning).
	ClientOpts []kgo.Opt
	// Logger receives the runtime's logs. Default slog.Default().
	Logger *slog.Logger
	// Registerer receives the runtime's metrics. Default: a private registry.
	Registerer prometheus.Registerer
	// Now is the wall clock (processing time, idle timeouts). Default time.Now.
	Now func() time.Time
	// Rebuild configures rebuilding views as new versions; see [RebuildConfig] for defaults.
	Rebuild RebuildConfig
}

func (c Config) withDefaults() Config {
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 30 * time.Second
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = 2 * time.Minute
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 10 * time.Second
	}
	if c.MaxPollRecords == 0 {
		c.MaxPollRecords = 50000
	}
	if c.TaskParallelism == 0 {
		c.TaskParallelism = runtime.GOMAXPROCS(0)
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = -1
	}
	if c.TransactionTimeout == 0 {
		c.TransactionTimeout = 30 * time.Second
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
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Rebuild = c.Rebuild.withDefaults()
	return c
}

// Validate reports every problem of the config at once.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...)))
	}
	if err := topic.ValidateName("app", c.App); err != nil {
		add("App: %v", err)
	}
	if len(c.Brokers) == 0 {
		add("Brokers is empty; give the Kafka seed brokers")
	}
	if c.State == nil {
		add("State is nil; open one with state.Open")
	}
	if len(c.Views) == 0 {
		add("Views is empty; define at least one view")
	}
	seen := map[Name]bool{}
	for i, v := range c.Views {
		switch {
		case v == nil:
			add("Views[%d] is nil", i)
		case seen[v.name]:
			add("two views are named %q; view names must be unique in an app", v.name)
		default:
			seen[v.name] = true
		}
	}
	if c.InstanceID != "" {
		if err := topic.ValidateName("InstanceID", c.InstanceID); err != nil {
			add("InstanceID: %v", err)
		}
	}
	if c.IdleTimeout < 0 || c.SessionTimeout < 0 || c.MaxPollRecords < 0 || c.Partitions < 0 || c.TransactionTimeout < 0 || c.TaskParallelism < 0 {
		add("IdleTimeout, SessionTimeout, MaxPollRecords, Partitions, TransactionTimeout and TaskParallelism must not be negative")
	}
	if err := topic.ValidateMaxRecordBytes(c.MaxRecordBytes); err != nil {
		add("%v", err)
	}
	for _, p := range c.Rebuild.validate() {
		add("%s", p)
	}
	return errors.Join(errs...)
}

// Runtime maintains views: it consumes their inputs as a member of each view's consumer group,
// runs the tasks of the partitions it is assigned and answers queries about them. Each view
// runs at the versions its record in the versions topic names (rebuild.go): the serving one,
// and one being rebuilt.
type Runtime struct {
	cfg      Config
	metrics  *metrics
	rmetrics *rebuildMetrics
	base     []kgo.Opt // seed brokers, manual partitioner, Config.ClientOpts
	runs     map[Name]*viewRun
	order    []*viewRun
	vlog     atomic.Pointer[versionLog] // set while Run runs
}

// NewRuntime checks cfg and prepares the views; [Runtime.Run] starts them.
func NewRuntime(cfg Config) (*Runtime, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("views: register metrics: %w", err)
	}
	rm, err := newRebuildMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("views: register metrics: %w", err)
	}
	base := append(append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner())},
		topic.FetchOpts(cfg.MaxRecordBytes)...), cfg.ClientOpts...)
	r := &Runtime{cfg: cfg, metrics: m, rmetrics: rm, base: base, runs: map[Name]*viewRun{}}
	for _, v := range cfg.Views {
		vr := newViewRun(r, v)
		r.runs[v.name] = vr
		r.order = append(r.order, vr)
	}
	return r, nil
}

// Run maintains every view until ctx is cancelled, then finishes the batch in hand, commits,
// flushes and leaves the groups; it returns nil after a cancellation and the first error that
// stopped a view otherwise (stopping the others).
//
// It first reads the versions topic (creating it if needed) to decide which versions of each
// view run here, then follows it so that every instance switches versions together.
func (r *Runtime) Run(ctx context.Context) error {
	vlog, err := openVersionLog(ctx, r.base, topic.Versions(r.cfg.App), r.cfg.ReplicationFactor, r.cfg.Logger)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer vlog.close()
	r.vlog.Store(vlog)
	defer r.vlog.Store(nil)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return vlog.run(ctx) })
	for _, vr := range r.order {
		g.Go(func() error { return vr.run(ctx) })
	}
	return g.Wait()
}

// engine returns the engine of view's serving version.
func (r *Runtime) engine(view Name) (*engine, error) { return r.engineAt(view, 0) }
