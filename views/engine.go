package views

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tarnhq/tarn/internal/topic"
	"github.com/tarnhq/tarn/state"
	"github.com/twmb/franz-go/pkg/kgo"
)

// errRecreate ends one consumer session after a failure whose effects are unknown (a produce
// or transaction error): the engine drops its tasks, which restore from their changelogs, and
// joins again with a new client, the defence against indefinite errors.
var errRecreate = errors.New("views: recreate the client")

type taskID struct {
	sub  int
	part int32
}

// runTask is a task with its store handles.
type runTask struct {
	*task
	stores  []state.Store
	meta    *state.KV
	writeFP bool
	served  offsetStore // the served store's partition, if this task has it
}

// offsetStore is a store partition that knows the changelog offset it applied.
type offsetStore interface {
	state.Store
	Offset(r state.Reader) (int64, bool, error)
}

// engine runs one view: one consumer group member, one loop, the tasks of its partitions.
type engine struct {
	rt    *Runtime
	v     *View
	env   *env
	log   *slog.Logger
	group string
	feed  *feed

	// Set up by setup, read-only afterwards.
	parts    map[string]int32 // partition count of every topic the view reads or writes
	subParts []int32          // partition count of each sub-topology
	bySource map[string]*sourceNode
	subOf    map[string]*subtopology
	base     []kgo.Opt

	// Used by the loop goroutine only.
	txn     *state.Txn
	out     []*kgo.Record
	pending map[taskID]bool
	// wake ends a poll waiting for records when partitions are assigned: their tasks must
	// restore and serve even when no new input arrives for them.
	wake chan struct{}

	mu struct {
		sync.Mutex
		tasks     map[taskID]*runTask
		restoring map[taskID]bool
		lag       map[string]int64 // "topic/partition" → records behind
	}
	running atomic.Bool
	side    *sideReader // side inputs: co-tables and followed topics (sidereader.go)

	// Set by the view's supervisor (rebuild.go) before run.
	frozen   bool      // answer queries from the restored stores, process nothing
	throttle *throttle // limits a rebuilding version; nil: no limit
	// serving is true while queries read this engine's version.
	serving   atomic.Bool
	processed atomic.Int64 // input records processed
	setUp     atomic.Bool  // setup done: partition counts known
}

func newEngine(r *Runtime, v *View) *engine {
	e := &engine{rt: r, v: v, log: r.cfg.Logger.With("view", string(v.name), "version", v.version),
		group: topic.Group(r.cfg.App, string(v.name), v.version), feed: newFeed(),
		bySource: map[string]*sourceNode{}, subOf: map[string]*subtopology{}, pending: map[taskID]bool{},
		wake: make(chan struct{}, 1)}
	e.env = newEnv(r.cfg.App, v, r.cfg.Now, r.cfg.IdleTimeout, r.metrics)
	e.mu.tasks, e.mu.restoring, e.mu.lag = map[taskID]*runTask{}, map[taskID]bool{}, map[string]int64{}
	for _, s := range v.subs {
		for _, src := range s.sources {
			name := e.env.resolve(src.topic)
			e.bySource[name], e.subOf[name] = src, s
		}
	}
	return e
}

// produce and partitions make the engine the sink of its tasks.
func (e *engine) produce(r *kgo.Record)         { e.out = append(e.out, r) }
func (e *engine) partitions(topic string) int32 { return e.parts[topic] }

func (e *engine) run(ctx context.Context) error {
	setup, session := e.setup, e.session
	if e.frozen {
		setup, session = e.setupFrozen, e.frozenSession
	}
	if err := setup(ctx); err != nil {
		return err
	}
	e.setUp.Store(true)
	defer e.closeSides()
	for {
		err := session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if !errors.Is(err, errRecreate) {
			return err
		}
		e.log.Warn("views: recreating the Kafka client after an indefinite failure", "err", err)
		e.dropAll()
	}
}

// consumer is what the loop needs of a group client, plain or transactional.
type consumer struct {
	cl   *kgo.Client
	sess *kgo.GroupTransactSession
}

func (c consumer) poll(ctx context.Context, n int) kgo.Fetches {
	if c.sess != nil {
		return c.sess.PollRecords(ctx, n)
	}
	return c.cl.PollRecords(ctx, n)
}

func (c consumer) allowRebalance() {
	if c.sess != nil {
		c.sess.AllowRebalance()
		return
	}
	c.cl.AllowRebalance()
}

// close leaves the group; the last poll may still block rebalances, so it allows them.
func (c consumer) close() {
	if c.sess != nil {
		c.sess.CloseAllowingRebalance()
		return
	}
	c.cl.CloseAllowingRebalance()
}

func (e *engine) newConsumer() (consumer, error) {
	cfg := e.rt.cfg
	topics := make([]string, 0, len(e.bySource))
	for t := range e.bySource {
		topics = append(topics, t)
	}
	opts := append(append([]kgo.Opt{}, e.base...),
		kgo.ConsumerGroup(e.group),
		kgo.ConsumeTopics(topics...),
		kgo.Balancers(e.balancer()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ClientID(clientIDPrefix+cfg.AdvertiseAddr),
		kgo.OnPartitionsAssigned(e.assigned),
		kgo.OnPartitionsRevoked(e.revoked),
		kgo.OnPartitionsLost(e.revoked),
	)
	if !cfg.ExactlyOnce || e.frozen {
		cl, err := kgo.NewClient(opts...)
		return consumer{cl: cl}, err
	}
	opts = append(opts,
		kgo.TransactionalID(e.group+"-"+strconv.FormatInt(time.Now().UnixNano(), 36)),
		kgo.TransactionTimeout(cfg.TransactionTimeout),
		kgo.RequireStableFetchOffsets(),
	)
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return consumer{}, err
	}
	return consumer{cl: sess.Client(), sess: sess}, nil
}

// clientIDPrefix marks tarn members in a group; the rest of the client id is the member's
// advertised HTTP address.
const clientIDPrefix = "tarn@"

// session consumes with one client until ctx is cancelled or a failure needs a new client.
func (e *engine) session(ctx context.Context) error {
	c, err := e.newConsumer()
	if err != nil {
		return fmt.Errorf("views: view %q: kafka client: %w", e.v.name, err)
	}
	defer c.close()
	e.running.Store(true)
	defer e.running.Store(false)
	for {
		fs := e.poll(ctx, c)
		if fs.IsClientClosed() || ctx.Err() != nil {
			return nil
		}
		if err := e.fetchErrors(fs); err != nil {
			return err
		}
		// The batch in hand is finished even if ctx is cancelled meanwhile: a graceful stop.
		bctx := context.WithoutCancel(ctx)
		if err := e.openPending(ctx); err != nil {
			return err
		}
		if fs.NumRecords() > 0 {
			began := time.Now()
			if err := e.batch(bctx, c, fs); err != nil {
				return err
			}
			e.rt.metrics.batches.WithLabelValues(string(e.v.name)).Observe(time.Since(began).Seconds())
		}
		c.allowRebalance()
		if !e.serving.Load() {
			e.throttle.wait(ctx, e.processed.Load())
		}
	}
}

// poll waits for records, or until assigned wakes it: the fetch it then returns holds only a
// context.Canceled error, which fetchErrors ignores.
func (e *engine) poll(ctx context.Context, c consumer) kgo.Fetches {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-e.wake:
			cancel()
		case <-pctx.Done():
		}
	}()
	return c.poll(pctx, e.rt.cfg.MaxPollRecords)
}

func (e *engine) fetchErrors(fs kgo.Fetches) error {
	var fatal error
	fs.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.Canceled) {
			return
		}
		e.log.Error("views: fetch", "topic", t, "partition", p, "err", err)
		var de *kgo.ErrDataLoss
		if !errors.As(err, &de) && !kgoRetriable(err) {
			fatal = fmt.Errorf("views: view %q: fetch %s/%d: %w", e.v.name, t, p, err)
		}
	})
	return fatal
}

// kgoRetriable reports fetch errors the client recovers from by itself.
func kgoRetriable(err error) bool {
	var re interface{ IsRetriable() bool }
	return errors.As(err, &re) && re.IsRetriable()
}

// batch processes one poll and commits it.
func (e *engine) batch(ctx context.Context, c consumer, fs kgo.Fetches) error {
	e.txn = e.rt.cfg.State.NewTxn()
	e.out = e.out[:0]
	touched, n, err := e.process(ctx, fs)
	if err != nil {
		e.txn.Discard()
		e.sidesDiscarded()
		return err
	}
	e.rt.metrics.records.WithLabelValues(string(e.v.name)).Add(float64(n))
	e.processed.Add(int64(n))
	committed, err := e.commit(ctx, c)
	if err != nil || !committed {
		e.txn.Discard()
		e.sidesDiscarded()
		for _, t := range touched {
			t.changes = t.changes[:0]
		}
		return err
	}
	e.publish(touched)
	e.sidesCommitted()
	return nil
}

// process runs the polled records through their tasks and flushes the tasks' caches into the
// write set.
func (e *engine) process(ctx context.Context, fs kgo.Fetches) ([]*runTask, int, error) {
	var (
		touched []*runTask
		seen    = map[*runTask]bool{}
		n       int
		err     error
	)
	if err := e.syncSides(ctx, fs); err != nil {
		return nil, 0, err
	}
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if err != nil || len(p.Records) == 0 {
			return
		}
		src, sub := e.bySource[p.Topic], e.subOf[p.Topic]
		var t *runTask
		if t, err = e.task(ctx, taskID{sub.id, p.Partition}); err != nil {
			return
		}
		if !seen[t] {
			seen[t] = true
			touched = append(touched, t)
		}
		for _, r := range p.Records {
			if err = t.process(src, r); err != nil {
				return
			}
		}
		n += len(p.Records)
		e.noteLag(p)
	})
	if err != nil {
		return nil, 0, err
	}
	for _, t := range touched {
		if err := t.flush(); err != nil {
			return nil, 0, err
		}
		if t.writeFP {
			if err := t.meta.Put(e.txn, []byte(fingerprintKey), []byte(e.v.finger)); err != nil {
				return nil, 0, err
			}
			t.writeFP = false
		}
	}
	return touched, n, nil
}

func (e *engine) noteLag(p kgo.FetchTopicPartition) {
	last := p.Records[len(p.Records)-1].Offset
	lag := max(p.HighWatermark-last-1, 0)
	e.mu.Lock()
	e.mu.lag[p.Topic+"/"+strconv.Itoa(int(p.Partition))] = lag
	e.mu.Unlock()
	if e.serving.Load() { // a rebuilding version's lag is measured over all instances (progress.go)
		e.rt.metrics.lag.WithLabelValues(string(e.v.name), p.Topic, strconv.Itoa(int(p.Partition))).Set(float64(lag))
	}
}

// commit makes the batch durable: outputs and changelog records acknowledged (and, exactly
// once, the transaction with the input offsets committed), then the write set applied to
// Pebble, then (at least once) the input offsets committed. It reports false when an
// exactly-once transaction aborted: the session rewound the inputs and the batch is redone.
func (e *engine) commit(ctx context.Context, c consumer) (bool, error) {
	if c.sess != nil {
		if err := c.sess.Begin(); err != nil {
			return false, fmt.Errorf("%w: begin transaction: %w", errRecreate, err)
		}
	}
	perr := e.produceAll(ctx, c.cl)
	if c.sess != nil {
		end := kgo.TryCommit
		if perr != nil {
			end = kgo.TryAbort
		}
		committed, err := c.sess.End(ctx, end)
		switch {
		case err != nil:
			return false, fmt.Errorf("%w: end transaction: %w", errRecreate, errors.Join(perr, err))
		case perr != nil:
			return false, fmt.Errorf("%w: %w", errRecreate, perr)
		case !committed:
			e.rt.metrics.aborts.WithLabelValues(string(e.v.name)).Inc()
			e.log.Info("views: transaction aborted (rebalance); redoing the batch")
			return false, nil
		}
	} else if perr != nil {
		return false, fmt.Errorf("%w: %w", errRecreate, perr)
	}
	if err := e.txn.Apply(); err != nil {
		return false, fmt.Errorf("views: view %q: apply batch: %w", e.v.name, err)
	}
	if c.sess == nil {
		if err := c.cl.CommitUncommittedOffsets(ctx); err != nil {
			return true, fmt.Errorf("%w: commit offsets: %w", errRecreate, err)
		}
	}
	return true, nil
}

// produceAll sends the batch's outputs, repartition records and dead letters, and its
// changelog records, and waits for every acknowledgement.
func (e *engine) produceAll(ctx context.Context, cl *kgo.Client) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, r := range e.out {
		wg.Add(1)
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("produce to %s: %w", r.Topic, err))
				mu.Unlock()
			}
		})
	}
	cerr := e.txn.Produce(ctx, cl)
	wg.Wait()
	if len(errs) > 0 {
		cerr = errors.Join(cerr, fmt.Errorf("%d of %d output records failed, first: %w", len(errs), len(e.out), errs[0]))
	}
	return cerr
}

// assigned notes new partitions and wakes the loop, which restores their tasks before it
// processes more.
func (e *engine) assigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	for t, ps := range m {
		sub := e.subOf[t]
		for _, p := range ps {
			e.pending[taskID{sub.id, p}] = true
		}
	}
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// revoked closes the tasks of revoked or lost partitions. With BlockRebalanceOnPoll it runs
// between batches, after the last one committed.
func (e *engine) revoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for t, ps := range m {
		sub := e.subOf[t]
		for _, p := range ps {
			id := taskID{sub.id, p}
			delete(e.pending, id)
			delete(e.mu.tasks, id)
			e.forgetSide(id)
		}
	}
}

func (e *engine) dropAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	clear(e.mu.tasks)
	clear(e.pending)
	e.forgetSides()
}

func (e *engine) openPending(ctx context.Context) error {
	for id := range e.pending {
		if _, err := e.task(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// holds reports whether this instance runs the task of id.
func (e *engine) holds(id taskID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mu.tasks[id] != nil
}

// task returns the task of id, restoring it first if it is new.
func (e *engine) task(ctx context.Context, id taskID) (*runTask, error) {
	e.mu.Lock()
	t := e.mu.tasks[id]
	e.mu.Unlock()
	if t != nil {
		return t, nil
	}
	t, err := e.open(ctx, id)
	if err != nil {
		return nil, err
	}
	delete(e.pending, id)
	e.mu.Lock()
	e.mu.tasks[id] = t
	e.mu.Unlock()
	return t, nil
}
