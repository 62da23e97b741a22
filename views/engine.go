package views

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tarnhq/tarn/internal/topic"
	"github.com/tarnhq/tarn/state"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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
	w       *writes // the task's writes in the current batch
	stores  []state.Store
	meta    *state.KV
	writeFP bool
	served  offsetStore // the served store's partition, if this task has it
}

// writes collects one task's store writes in one batch, in a Txn begun on first use, and sends
// the records the task produces at once. Each task has its own, so that the tasks of one poll
// run in parallel; the engine applies each Txn when the batch commits.
type writes struct {
	e   *engine
	txn *state.Txn
}

func newWrites(e *engine) *writes { return &writes{e: e} }

// tx returns the batch's Txn, beginning it on first use.
func (w *writes) tx() *state.Txn {
	if w.txn == nil {
		w.txn = w.e.rt.cfg.State.NewTxn()
	}
	return w.txn
}

// produce and partitions make the writes the sink of their task.
func (w *writes) produce(r *kgo.Record)         { w.e.produce(r) }
func (w *writes) partitions(topic string) int32 { return w.e.parts[topic] }

// discard drops the batch's store writes unless they were applied.
func (w *writes) discard() {
	if w.txn != nil {
		w.txn.Discard()
		w.txn = nil
	}
}

// sender sends the records of one batch (outputs, repartition records, dead letters) as its
// tasks produce them, so that Kafka stores them while the batch is still being processed,
// and waits for their acknowledgements when the batch commits.
type sender struct {
	ctx  context.Context
	cl   *kgo.Client
	wg   sync.WaitGroup
	mu   sync.Mutex
	sent int
	errs []error
}

func (s *sender) send(r *kgo.Record) {
	s.mu.Lock()
	s.sent++
	s.mu.Unlock()
	s.wg.Add(1)
	s.cl.Produce(s.ctx, r, s.acked)
}

func (s *sender) acked(r *kgo.Record, err error) {
	defer s.wg.Done()
	if err != nil {
		s.mu.Lock()
		s.errs = append(s.errs, fmt.Errorf("produce to %s: %w", r.Topic, err))
		s.mu.Unlock()
	}
}

// wait returns when every record sent is acknowledged (or failed).
func (s *sender) wait() error {
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) > 0 {
		return fmt.Errorf("%d of %d output records failed, first: %w", len(s.errs), s.sent, s.errs[0])
	}
	return nil
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
	sender  *sender // of the batch in hand; its tasks use it too
	pending map[taskID]bool
	// wake ends a poll waiting for records when partitions are assigned (their tasks must
	// restore and serve even when no new input arrives for them) or a hold changes.
	wake chan struct{}
	// held are the source partitions paused for a hold, at the record they wait at (hold.go).
	held map[string]map[int32]kgo.EpochOffset

	mu struct {
		sync.Mutex
		tasks     map[taskID]*runTask
		restoring map[taskID]bool
		// applied are the input offsets after the last applied batch of this session, the
		// ones an at-least-once commit may name.
		applied map[string]map[int32]kgo.EpochOffset
		// consumed is, per input partition this session applied a batch of, the offset after
		// it: what a min_lsn read waits for (cdcwait.go).
		consumed map[string]map[int32]int64
		lag      map[string]int64 // "topic/partition" → records behind
	}
	running atomic.Bool
	// joined is true once the session's consumer joined its group (its first assignment,
	// possibly empty) and until that session ends or is lost.
	joined atomic.Bool
	// failed is why the engine is not processing while it retries; nil when it is.
	failed atomic.Pointer[failure]
	// stalled is set by the watchdog (measureLag) when it closes a stalled session's client.
	stalled atomic.Bool
	// waits holds the client min_lsn reads wait with (cdcwait.go).
	waits struct {
		sync.Mutex
		cl  *kgo.Client
		adm *kadm.Client
	}
	// publishMu orders a batch's publish-then-apply against a subscription's
	// register-then-read-positions (feed.go).
	publishMu sync.Mutex
	// commits paces at-least-once offset commits (sendCommit).
	commits struct {
		sync.Mutex
		inFlight bool
		owed     bool // offsets were applied while a commit was in flight
	}
	side *sideReader // side inputs: co-tables and followed topics (sidereader.go)

	// Set by the view's supervisor (rebuild.go) before run.
	frozen   bool      // answer queries from the restored stores, process nothing
	throttle *throttle // limits a rebuilding version; nil: no limit
	// serving is true while queries read this engine's version.
	serving   atomic.Bool
	processed atomic.Int64 // input records processed
	setUp     atomic.Bool  // setup done: partition counts known
	// hold stops the sources at a cut for the shadow check (hold.go); nil: none.
	hold atomic.Pointer[shadowHold]
	// Size limits (limits.go): the topics the view writes, and whether Kafka refused a
	// record for its size since the last batch that committed (loop goroutine only).
	written     []string
	sizeRefused bool
}

func newEngine(r *Runtime, v *View) *engine {
	e := &engine{rt: r, v: v, log: r.cfg.Logger.With("view", string(v.name), "version", v.version),
		group: topic.Group(r.cfg.App, string(v.name), v.version), feed: newFeed(),
		bySource: map[string]*sourceNode{}, subOf: map[string]*subtopology{}, pending: map[taskID]bool{},
		wake: make(chan struct{}, 1)}
	e.env = newEnv(r.cfg.App, v, r.cfg.Now, r.cfg.IdleTimeout, r.metrics)
	e.env.limits = topic.NewLimits(r.cfg.MaxRecordBytes)
	e.mu.tasks, e.mu.restoring, e.mu.lag = map[taskID]*runTask{}, map[taskID]bool{}, map[string]int64{}
	for _, s := range v.subs {
		for _, src := range s.sources {
			name := e.env.resolve(src.topic)
			e.bySource[name], e.subOf[name] = src, s
		}
	}
	return e
}

// produce and partitions make the engine the sink of its tasks and of followed topics' dead
// letters: records go to Kafka at once.
func (e *engine) produce(r *kgo.Record)         { e.sender.send(r) }
func (e *engine) partitions(topic string) int32 { return e.parts[topic] }

func (e *engine) run(ctx context.Context) error {
	setup, session := e.setup, e.session
	if e.frozen {
		setup, session = e.setupFrozen, e.frozenSession
	}
	for attempt := 0; ; attempt++ {
		err := setup(ctx)
		if err == nil {
			break
		}
		e.closeSides()
		if ctx.Err() != nil {
			return nil
		}
		if !transient(err) {
			return err
		}
		if !e.retry(ctx, "setup", attempt, err) {
			return nil
		}
	}
	e.setUp.Store(true)
	defer e.closeSides()
	defer e.closeWaitClient()
	for attempt := 0; ; attempt++ {
		began := time.Now()
		err := session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if !transient(err) {
			return err
		}
		if time.Since(began) > retryReset {
			attempt = 0
		}
		e.dropAll()
		if !e.retry(ctx, "consuming (a new Kafka client follows)", attempt, err) {
			return nil
		}
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

// close closes the client; the last poll may still block rebalances, so it allows them. A
// dynamic member leaves the group as it closes; a static one (Config.InstanceID) stays, so
// that a new client of this process, or the process restarted, takes the same partitions
// back without a rebalance, unless leave asks it to go (a stop: the others take over at once).
func (e *engine) closeConsumer(c consumer, leave bool) {
	if c.sess != nil {
		c.sess.CloseAllowingRebalance()
	} else {
		c.cl.CloseAllowingRebalance()
	}
	id := e.rt.cfg.InstanceID
	if !leave || id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(e.base...)
	if err == nil {
		defer cl.Close()
		var res kadm.LeaveGroupResponses
		if res, err = kadm.NewClient(cl).LeaveGroup(ctx, kadm.LeaveGroup(e.group).InstanceIDs(id).Reason("tarn instance stopping")); err == nil {
			err = res.Error()
		}
	}
	if err != nil && !errors.Is(err, kerr.UnknownMemberID) {
		e.log.Warn("views: could not leave the group; the others take over once its session times out",
			"group", e.group, "instance_id", id, "session_timeout", e.rt.cfg.SessionTimeout, "err", err)
	}
}

func (e *engine) newConsumer() (consumer, error) {
	cfg := e.rt.cfg
	topics := make([]string, 0, len(e.bySource))
	for t := range e.bySource {
		topics = append(topics, t)
	}
	// The loop waits for a batch's records once they are all produced, so lingering for more
	// (franz-go's default is 10 ms) would only delay every batch. Records are not compressed
	// (franz-go's default is snappy, Kafka's is none): outputs, changelogs and repartition
	// records are usually read back at once, and compressing costs CPU here and on the
	// broker that validates them. ClientOpts may override both, and the group timings: a
	// member learns of a rebalance at its next heartbeat, so a heartbeat a second (franz-go's
	// default is 3s) lets the others take over a stopping instance's partitions in about one.
	opts := append(append([]kgo.Opt{kgo.ProducerLinger(0), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.SessionTimeout(cfg.SessionTimeout), kgo.HeartbeatInterval(min(time.Second, cfg.SessionTimeout/3))}, e.base...),
		kgo.ConsumerGroup(e.group),
		kgo.ConsumeTopics(topics...),
		kgo.Balancers(e.balancer()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records (transaction markers) are polled, and skipped by processTask, so
		// that the offsets committed after a batch are past the markers that end it: the
		// group's committed offsets then reach a transactional topic's end, which is how a
		// min_lsn read knows the view got there (cdcwait.go).
		kgo.KeepControlRecords(),
		kgo.ClientID(clientIDPrefix+cfg.AdvertiseAddr),
		kgo.OnPartitionsAssigned(e.assigned),
		kgo.OnPartitionsRevoked(e.revoked),
		kgo.OnPartitionsLost(e.sessionLost),
	)
	if cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(cfg.InstanceID))
	}
	if !e.transactional() {
		cl, err := kgo.NewClient(opts...)
		return consumer{cl: cl}, err
	}
	// A static member's transactional id is stable, so that its restart fences the open
	// transaction of the process it replaces at once (InitProducerID aborts it) rather than
	// the group's offset fetch waiting for that transaction to time out.
	txnID := e.group + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if cfg.InstanceID != "" {
		txnID = e.group + "-" + cfg.InstanceID
	}
	opts = append(opts,
		kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(cfg.TransactionTimeout),
		kgo.RequireStableFetchOffsets(),
	)
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return consumer{}, err
	}
	return consumer{cl: sess.Client(), sess: sess}, nil
}

// transactional reports whether the engine's consumer is a GroupTransactSession: exactly
// once, unless the version is frozen (it writes nothing).
func (e *engine) transactional() bool { return e.rt.cfg.ExactlyOnce && !e.frozen }

// clientIDPrefix marks tarn members in a group; the rest of the client id is the member's
// advertised HTTP address.
const clientIDPrefix = "tarn@"

// session consumes with one client until ctx is cancelled or a failure needs a new client.
func (e *engine) session(ctx context.Context) error {
	if err := e.relearnLimits(ctx); err != nil {
		return err
	}
	c, err := e.newConsumer()
	if err != nil {
		return fmt.Errorf("views: view %q: kafka client: %w", e.v.name, err)
	}
	e.mu.Lock()
	e.mu.applied, e.mu.consumed = nil, map[string]map[int32]int64{}
	e.mu.Unlock()
	e.commits.Lock()
	e.commits.inFlight, e.commits.owed = false, false // a closed client's commit may never report
	e.commits.Unlock()
	defer func() {
		if c.sess == nil {
			// The last asynchronous commit lands before the group is left, even on a stop.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			e.commitApplied(cctx, c.cl)
			cancel()
		}
		e.closeConsumer(c, ctx.Err() != nil)
	}()
	e.running.Store(true)
	defer e.running.Store(false)
	e.joined.Store(false)
	defer e.joined.Store(false)
	e.stalled.Store(false)
	lagCtx, stopLag := context.WithCancel(ctx)
	defer stopLag()
	go e.measureLag(lagCtx, c.cl)
	e.held = nil // a new client pauses nothing
	for {
		e.releaseHeld(c.cl)
		fs := e.poll(ctx, c)
		if e.stalled.Swap(false) && ctx.Err() == nil {
			return errStalled
		}
		if fs.IsClientClosed() || ctx.Err() != nil {
			return nil
		}
		if err := e.fetchErrors(fs); err != nil {
			return err
		}
		e.holdBack(c.cl, fs)
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

// batch processes one poll and commits it. Exactly once, the transaction begins first: the
// records the tasks produce are sent as they come, inside it.
func (e *engine) batch(ctx context.Context, c consumer, fs kgo.Fetches) error {
	defer e.discardWrites()
	if c.sess != nil {
		if err := c.sess.Begin(); err != nil {
			return fmt.Errorf("%w: begin transaction: %w", errRecreate, err)
		}
	}
	e.sender = &sender{ctx: ctx, cl: c.cl}
	touched, n, err := e.process(ctx, fs)
	if err != nil {
		e.sidesDiscarded()
		e.abandon(ctx, c)
		return err
	}
	e.rt.metrics.records.WithLabelValues(string(e.v.name)).Add(float64(n))
	e.processed.Add(int64(n))
	committed, err := e.commit(ctx, c, touched)
	if err != nil || !committed {
		e.sidesDiscarded()
		for _, t := range touched {
			t.changes = t.changes[:0]
		}
		if err == nil {
			e.resumeHeld(c.cl) // the abort rewound them below where they wait
		}
		return err
	}
	e.sidesCommitted()
	e.sizeRefused = false
	e.recovered()
	return nil
}

// abandon ends a batch that failed before its commit: its records are waited for and, exactly
// once, its transaction aborted. At least once, the records sent stay (the batch is redone).
func (e *engine) abandon(ctx context.Context, c consumer) {
	_ = e.sender.wait()
	if c.sess != nil {
		if _, err := c.sess.End(ctx, kgo.TryAbort); err != nil {
			e.log.Warn("views: abort the transaction of a failed batch", "err", err)
		}
	}
}

// batchWrites returns the writes of every task that wrote in the batch.
func (e *engine) batchWrites() []*writes {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ws []*writes
	for _, t := range e.mu.tasks {
		if t.w.txn != nil {
			ws = append(ws, t.w)
		}
	}
	return ws
}

// discardWrites drops the store writes of the batch that were not applied.
func (e *engine) discardWrites() {
	for _, w := range e.batchWrites() {
		w.discard()
	}
}

// process runs the polled records through their tasks, the tasks in parallel, and flushes the
// tasks' caches into their write sets. A task's records keep the order of the poll.
func (e *engine) process(ctx context.Context, fs kgo.Fetches) ([]*runTask, int, error) {
	if err := e.syncSides(ctx, fs); err != nil {
		return nil, 0, err
	}
	var (
		touched []*runTask
		inputs  = map[*runTask][]kgo.FetchTopicPartition{}
		n       int
		err     error
	)
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if err != nil || len(p.Records) == 0 {
			return
		}
		var t *runTask
		if t, err = e.task(ctx, taskID{e.subOf[p.Topic].id, p.Partition}); err != nil {
			return
		}
		if inputs[t] == nil {
			touched = append(touched, t)
		}
		inputs[t] = append(inputs[t], p)
		n += len(p.Records)
	})
	if err != nil {
		return nil, 0, err
	}
	errs := make([]error, len(touched))
	parallel(len(touched), e.rt.cfg.TaskParallelism, func(i int) { errs[i] = e.processTask(touched[i], inputs[touched[i]]) })
	if err := errors.Join(errs...); err != nil {
		return nil, 0, err
	}
	return touched, n, nil
}

// processTask runs one task's records of a poll and flushes its caches. It runs on a worker
// goroutine, so a panic of view code is turned into an error here, as runEngine does for the
// loop, rather than ending the process.
func (e *engine) processTask(t *runTask, inputs []kgo.FetchTopicPartition) (err error) {
	defer func() {
		if p := recover(); p != nil {
			e.rt.cfg.Logger.Error("views: view code panicked", "view", e.v.name, "version", e.v.version,
				"partition", t.partition, "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("views: view %q version %d partition %d panicked: %v", e.v.name, e.v.version, t.partition, p)
		}
	}()
	t.batchNow = e.rt.cfg.Now()
	for _, p := range inputs {
		src := e.bySource[p.Topic]
		for _, r := range p.Records {
			if r.Attrs.IsControl() {
				continue // kept only so that the committed offsets pass transaction markers
			}
			if err := t.process(src, r); err != nil {
				return err
			}
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	if t.writeFP {
		if err := t.meta.Put(t.w.tx(), []byte(fingerprintKey), []byte(e.v.finger)); err != nil {
			return err
		}
		t.writeFP = false
	}
	return nil
}

// parallel calls fn(0) … fn(n-1) on at most workers goroutines and waits for them.
func parallel(n, workers int, fn func(i int)) {
	if n == 1 || workers <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range min(n, workers) {
		wg.Go(func() {
			for i := range next {
				fn(i)
			}
		})
	}
	wg.Wait()
}

// commit makes the batch durable: outputs and changelog records acknowledged (and, exactly
// once, the transaction with the input offsets committed), then each task's write set applied
// to Pebble, then (at least once) the input offsets committed without waiting (commitAsync).
// It reports false when an exactly-once transaction aborted: the session rewound the inputs
// and the batch is redone.
func (e *engine) commit(ctx context.Context, c consumer, touched []*runTask) (bool, error) {
	polled := c.cl.UncommittedOffsets() // the batch's input: every record polled is in it
	ws := e.batchWrites()
	perr := e.waitProduced(ctx, c.cl, ws)
	if c.sess != nil {
		end := kgo.TryCommit
		if perr != nil {
			end = kgo.TryAbort
		}
		committed, err := c.sess.End(ctx, end)
		switch {
		case topic.IsTooLarge(perr):
			// Whatever End says, the refusal decides what happens next (produceFailed).
			if err != nil {
				e.log.Warn("views: end the transaction of a batch Kafka refused for size", "err", err)
			}
			return false, e.produceFailed(perr)
		case err != nil:
			return false, fmt.Errorf("%w: end transaction: %w", errRecreate, errors.Join(perr, err))
		case perr != nil:
			return false, e.produceFailed(perr)
		case !committed:
			e.rt.metrics.aborts.WithLabelValues(string(e.v.name)).Inc()
			e.log.Info("views: transaction aborted (rebalance); redoing the batch")
			return false, nil
		}
	} else if perr != nil {
		return false, e.produceFailed(perr)
	}
	// The changes go to watchers before the stores are applied, so that no position a reader
	// sees (an applied store's offset) is past a change not yet handed to them; publishMu
	// keeps a new subscription from falling between the two (subscribe).
	e.publishMu.Lock()
	e.publish(touched)
	for _, w := range ws {
		if err := w.txn.Apply(); err != nil {
			e.publishMu.Unlock()
			return false, fmt.Errorf("views: view %q: apply batch: %w", e.v.name, err)
		}
		w.txn = nil
	}
	e.publishMu.Unlock()
	e.mu.Lock()
	for t, ps := range polled {
		if e.mu.consumed[t] == nil {
			e.mu.consumed[t] = map[int32]int64{}
		}
		for p, o := range ps {
			e.mu.consumed[t][p] = max(e.mu.consumed[t][p], o.Offset)
		}
	}
	e.mu.Unlock()
	if c.sess == nil {
		e.commitAsync(ctx, c.cl)
	}
	return true, nil
}

// waitProduced sends the batch's changelog records and waits for every acknowledgement: of
// those and of the records the tasks produced.
func (e *engine) waitProduced(ctx context.Context, cl *kgo.Client, ws []*writes) error {
	// Each Txn waits for its own changelog acknowledgements; they all run at once.
	errs := make([]error, len(ws)+1)
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() { errs[i] = w.txn.Produce(ctx, cl) })
	}
	errs[len(ws)] = e.sender.wait()
	wg.Wait()
	return errors.Join(errs...)
}

// commitAsync commits the offsets of the batch just applied without waiting for the broker,
// so that the next batch starts at once; franz-go keeps commits in order. A failed commit
// loses nothing: the next one covers it, and until then a restart repeats the records (at
// least once). The revoke callback commits synchronously before partitions move.
func (e *engine) commitAsync(ctx context.Context, cl *kgo.Client) {
	offsets := cl.UncommittedOffsets() // every record polled is in the batch just applied
	e.mu.Lock()
	e.mu.applied = offsets
	e.mu.Unlock()
	e.sendCommit(ctx, cl)
}

// sendCommit commits the newest applied offsets unless a commit is in flight; then that
// commit's completion sends them. franz-go orders commits by queueing each behind the one
// before, so one commit per batch fell behind under load (the committed offsets trailed the
// applied ones by seconds of input, all of it processed again after a crash). With at most
// one commit in flight, always of the newest offsets, the committed position trails the
// applied one by about one commit round trip.
func (e *engine) sendCommit(ctx context.Context, cl *kgo.Client) {
	e.commits.Lock()
	if e.commits.inFlight {
		e.commits.owed = true
		e.commits.Unlock()
		return
	}
	e.mu.Lock()
	offsets := e.mu.applied
	e.mu.Unlock()
	if len(offsets) == 0 {
		e.commits.Unlock()
		return
	}
	e.commits.inFlight = true
	e.commits.Unlock()
	// Not under the lock: CommitOffsets may call its callback before it returns.
	cl.CommitOffsets(ctx, offsets, func(cl *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		e.committed(cl, req, resp, err)
		e.commits.Lock()
		e.commits.inFlight = false
		owed := e.commits.owed
		e.commits.owed = false
		e.commits.Unlock()
		if owed && ctx.Err() == nil {
			// Not from the callback itself: franz-go forbids committing there.
			go e.sendCommit(ctx, cl)
		}
	})
}

// commitApplied commits the offsets of the last applied batch and waits for every commit in
// flight. It never commits records of a batch that failed: those are polled but not applied.
func (e *engine) commitApplied(ctx context.Context, cl *kgo.Client) {
	e.mu.Lock()
	offsets := e.mu.applied
	e.mu.Unlock()
	cl.CommitOffsetsSync(ctx, offsets, e.committed)
}

// committed logs a failed offset commit and updates the committed lag.
func (e *engine) committed(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
	if err == nil && req != nil {
		e.noteCommitLag(req)
	}
	if err == nil && resp != nil {
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil && err == nil {
					err = fmt.Errorf("%s/%d: %w", t.Topic, p.Partition, perr)
				}
			}
		}
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		e.log.Warn("views: commit input offsets; the next commit covers them", "err", err)
	}
}

// noteCommitLag sets the records applied here but not yet committed (what at-least-once
// would process again after a crash) from a commit that succeeded.
func (e *engine) noteCommitLag(req *kmsg.OffsetCommitRequest) {
	e.mu.Lock()
	var lag int64
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			if applied, ok := e.mu.applied[t.Topic][p.Partition]; ok && applied.Offset > p.Offset {
				lag += applied.Offset - p.Offset
			}
		}
	}
	e.mu.Unlock()
	e.rt.metrics.commitLag.WithLabelValues(string(e.v.name)).Set(float64(lag))
}

// assigned notes new partitions and wakes the loop, which restores their tasks before it
// processes more.
func (e *engine) assigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	e.mu.Lock()
	for t, ps := range m {
		sub := e.subOf[t]
		for _, p := range ps {
			id := taskID{sub.id, p}
			e.pending[id] = true
			// Restoring until the loop opens it, so that readiness and reads never see an
			// assigned partition as someone else's.
			e.mu.restoring[id] = true
		}
	}
	e.mu.Unlock()
	e.joined.Store(true)
	e.recovered()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// revoked commits the consumed offsets and closes the tasks of revoked partitions. With
// BlockRebalanceOnPoll it runs between batches, after the last one was applied.
func (e *engine) revoked(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
	if !e.transactional() {
		// At least once, commits are asynchronous (commitAsync): the last batch's must land
		// before its partitions move. A sync commit waits for those in flight.
		e.commitApplied(ctx, cl)
	}
	e.lost(ctx, cl, m)
}

// sessionLost closes the tasks of a group session that ended without a revoke (the member
// was fenced or its session expired): until it rejoins, the view is not running here.
func (e *engine) sessionLost(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
	e.joined.Store(false)
	e.lost(ctx, cl, m)
}

// lost closes the tasks of partitions that were revoked or lost (where committing is too late).
func (e *engine) lost(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for t, ps := range m {
		sub := e.subOf[t]
		for _, p := range ps {
			id := taskID{sub.id, p}
			delete(e.pending, id)
			delete(e.mu.tasks, id)
			delete(e.mu.restoring, id)
			e.forgetSide(id)
		}
	}
}

func (e *engine) dropAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	clear(e.mu.tasks)
	clear(e.mu.restoring)
	clear(e.pending)
	e.forgetSides()
}

func (e *engine) openPending(ctx context.Context) error {
	if len(e.pending) == 0 {
		return nil
	}
	starts, err := e.startOffsets(ctx)
	if err != nil {
		return err
	}
	for id := range e.pending {
		if _, err := e.task(ctx, id); err != nil {
			return err
		}
		e.mu.Lock()
		if e.mu.consumed == nil { // a frozen version's session never consumed
			e.mu.consumed = map[string]map[int32]int64{}
		}
		for t, sub := range e.subOf {
			if o, ok := starts.Lookup(t, id.part); ok && sub.id == id.sub && o.At > e.mu.consumed[t][id.part] {
				if e.mu.consumed[t] == nil {
					e.mu.consumed[t] = map[int32]int64{}
				}
				e.mu.consumed[t][id.part] = o.At
			}
		}
		e.mu.Unlock()
	}
	return nil
}

// startOffsets are the group's committed offsets, where the consumer starts each newly
// assigned partition: a task opened there has applied everything below them (its store is
// restored from a changelog that holds every committed batch's effects), so they count as
// consumed. Without that, a partition that receives nothing new after a restart (or a
// reconnection after a broker outage) would stay below a min_lsn read's target for ever,
// its last transaction marker consumed only by the previous session.
func (e *engine) startOffsets(ctx context.Context) (kadm.OffsetResponses, error) {
	adm, err := e.waitClient()
	if err != nil {
		return nil, err
	}
	offs, err := adm.FetchOffsets(ctx, e.group)
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("views: view %q: fetch the group's offsets of the assigned partitions: %w", e.v.name, err)
	}
	return offs, nil
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
	delete(e.mu.restoring, id)
	e.mu.Unlock()
	return t, nil
}
