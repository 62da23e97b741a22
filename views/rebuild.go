package views

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tarnhq/tarn/internal/topic"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Sentinel errors of versions and rebuilds; use errors.Is.
var (
	// ErrRebuilding: a rebuild of the view is already running; wait for it or roll it back.
	ErrRebuilding = errors.New("views: a rebuild of the view is already running")
	// ErrNoRebuild: the version named is not rebuilding (it switched, failed or was replaced).
	ErrNoRebuild = errors.New("views: no such rebuild is running")
	// ErrNoRollback: no replaced version is kept to roll back to.
	ErrNoRollback = errors.New("views: nothing to roll back to")
	// ErrOutdated: this binary's definition of the view was replaced by a newer one; deploy
	// the binary with the newer definition.
	ErrOutdated = errors.New("views: this instance's definition of the view was replaced by a newer version")
	// ErrNotRunning: the runtime is not running (call Run first).
	ErrNotRunning = errors.New("views: the runtime is not running")
	// ErrNoVersion: the version asked for does not run on this instance (never, or not any
	// more: it was deleted).
	ErrNoVersion = errors.New("views: version not available on this instance")
	// ErrSwitched ends a [Subscription] when the view's serving version changes: positions of
	// one version mean nothing in another; subscribe again from the start.
	ErrSwitched = errors.New("views: the view switched to another version; subscribe again")
)

// RebuildConfig configures how views are rebuilt as new versions ([Runtime.Rebuild], or a
// changed definition at start).
type RebuildConfig struct {
	// RecordsPerSecond limits the input records one instance processes per second for a
	// rebuilding version (inputs and its repartition topics), so that the rebuild does not
	// starve the serving version. Default 0: no limit.
	RecordsPerSecond float64
	// SwitchLag: a rebuilding version takes over once its consumer group is at most SwitchLag
	// records behind on every partition of every source topic. Default 1000.
	SwitchLag int64
	// CheckInterval is how often progress is measured and the switch and deletions are
	// checked. Default 1s.
	CheckInterval time.Duration
	// LogInterval is how often a rebuild's progress is logged. Default 10s.
	LogInterval time.Duration
	// ShadowKeys is how many keys the shadow check compares before a switch; -1 compares
	// every key. Default 1000.
	ShadowKeys int
	// ShadowHold bounds how long the shadow check may hold the inputs of both versions at
	// one cut (input waits in its topics meanwhile); past it the check releases them and
	// compares the versions where they stand, saying so in [ShadowReport].Err. Default 30s.
	ShadowHold time.Duration
	// DeleteAfter is how long a replaced, failed or rolled-back version's stores, topics and
	// consumer group are kept (for reads pinned to it and for [Runtime.Rollback]) before they
	// are deleted. Default 1h.
	DeleteAfter time.Duration
}

func (c RebuildConfig) withDefaults() RebuildConfig {
	if c.SwitchLag == 0 {
		c.SwitchLag = 1000
	}
	if c.CheckInterval == 0 {
		c.CheckInterval = time.Second
	}
	if c.LogInterval == 0 {
		c.LogInterval = 10 * time.Second
	}
	if c.ShadowKeys == 0 {
		c.ShadowKeys = 1000
	}
	if c.ShadowHold == 0 {
		c.ShadowHold = 30 * time.Second
	}
	if c.DeleteAfter == 0 {
		c.DeleteAfter = time.Hour
	}
	return c
}

func (c RebuildConfig) validate() []string {
	var p []string
	if c.RecordsPerSecond < 0 || c.SwitchLag < 0 || c.CheckInterval < 0 || c.LogInterval < 0 || c.DeleteAfter < 0 || c.ShadowHold < 0 {
		p = append(p, "Rebuild.RecordsPerSecond, SwitchLag, CheckInterval, LogInterval, ShadowHold and DeleteAfter must not be negative")
	}
	if c.ShadowKeys < -1 {
		p = append(p, fmt.Sprintf("Rebuild.ShadowKeys is %d; use a positive count, or -1 for every key", c.ShadowKeys))
	}
	return p
}

// RebuildInfo describes the newest version of a view that is not serving: rebuilding, or the
// last rebuild that failed or was rolled back.
type RebuildInfo struct {
	Version     int
	Fingerprint string
	State       VersionState
	// Reason says why it failed or was rolled back.
	Reason string
	Since  time.Time
	// Records are the input records this instance processed for it.
	Records int64
	// Owned are the partitions of its served store this instance rebuilds.
	Owned []int32
	// Lag is, per source "topic/partition" over all instances, the records it still has to
	// process; TotalLag their sum; Rate the records/s by which TotalLag shrinks; ETA the time
	// left at that rate (-1: unknown). Measured only where the rebuild runs.
	Lag      map[string]int64
	TotalLag int64
	Rate     float64
	ETA      time.Duration
}

// viewRun keeps the engines of one view's versions on this instance, following the view's
// record in the versions topic.
type viewRun struct {
	rt     *Runtime
	v      *View
	log    *slog.Logger
	events chan engineExit

	// Used by the supervisor goroutine only.
	adm      *kadm.Client
	dropped  map[int]bool
	lastLog  time.Time
	counted  int64 // rebuild records already added to the metric
	counting int   // the version counted

	mu struct {
		sync.Mutex
		engines  map[int]*running
		serving  int
		plan     plan
		rec      versionsRecord
		progress progress
	}
}

// running is an engine with its goroutine.
type running struct {
	e      *engine
	cancel context.CancelFunc
	done   chan struct{}
}

type engineExit struct {
	e   *engine
	err error
}

func newViewRun(r *Runtime, v *View) *viewRun {
	vr := &viewRun{rt: r, v: v, log: r.cfg.Logger.With("view", string(v.name)), events: make(chan engineExit),
		dropped: map[int]bool{}}
	vr.mu.engines = map[int]*running{}
	return vr
}

// run supervises the view until ctx ends: it decides from the versions record which versions
// run here, and measures, switches and deletes versions. It returns an error only when the
// serving version stopped with one.
func (vr *viewRun) run(ctx context.Context) error {
	vlog := vr.rt.vlog.Load()
	changed := vlog.watch(vr.v.name)
	cl, err := kgo.NewClient(vr.rt.base...)
	if err != nil {
		return fmt.Errorf("views: view %q: kafka client: %w", vr.v.name, err)
	}
	defer cl.Close()
	vr.adm = kadm.NewClient(cl)
	tick := time.NewTicker(vr.rt.cfg.Rebuild.CheckInterval)
	defer tick.Stop()
	defer vr.stopAll()
	for {
		vr.reconcile(ctx, vlog)
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-tick.C:
			vr.tick(ctx, vlog)
		case ex := <-vr.events:
			if err := vr.exited(ctx, vlog, ex); err != nil {
				return err
			}
		}
	}
}

// reconcile makes the engines running here match the record; errors writing the record are
// logged and retried at the next tick.
func (vr *viewRun) reconcile(ctx context.Context, vlog *versionLog) {
	cfg := vr.rt.cfg
	rec, ok := vlog.get(vr.v.name)
	if !ok {
		var err error
		rec, err = vlog.update(ctx, vr.v.name, func(cur versionsRecord, ok bool) (versionsRecord, bool, error) {
			if ok {
				return cur, false, nil
			}
			first := firstRecord(vr.v.finger, vr.v.version, cfg.Now())
			first.Serving.Served = specOf(vr.v, cfg.App, vr.v.version)
			return first, true, nil
		})
		if err != nil {
			vr.logWrite(ctx, "record the first version", err)
			return
		}
	}
	if decide(rec, vr.v.finger).start {
		next, n, err := vr.startRebuild(ctx, vlog, false)
		if err != nil {
			vr.logWrite(ctx, "start a rebuild of the changed definition", err)
			return
		}
		vr.log.Info("views: the definition changed; rebuilding it as a new version while the serving one answers queries",
			"serving", next.Serving.Version, "rebuild", n, "fingerprint", vr.v.finger[:12])
		rec = next
	}
	vr.apply(ctx, rec, decide(rec, vr.v.finger))
	vr.deleteDue(ctx, vlog, rec)
}

func (vr *viewRun) logWrite(ctx context.Context, what string, err error) {
	if ctx.Err() == nil {
		vr.log.Error("views: could not "+what+" in the versions topic; retrying", "err", err)
	}
}

// startRebuild writes a new version of this binary's definition. onDemand refuses while a
// rebuild runs; a start after a definition change supersedes one of another definition.
func (vr *viewRun) startRebuild(ctx context.Context, vlog *versionLog, onDemand bool) (versionsRecord, int, error) {
	cfg := vr.rt.cfg
	var n int
	rec, err := vlog.update(ctx, vr.v.name, func(cur versionsRecord, ok bool) (versionsRecord, bool, error) {
		if !ok {
			return cur, false, fmt.Errorf("%w: view %q has not started", ErrNotRunning, vr.v.name)
		}
		p := decide(cur, vr.v.finger)
		switch {
		case p.outdated:
			return cur, false, fmt.Errorf("%w: view %q", ErrOutdated, vr.v.name)
		case onDemand && cur.Rebuild != nil && cur.Rebuild.State == StateRebuilding:
			return cur, false, fmt.Errorf("%w: view %q version %d", ErrRebuilding, vr.v.name, cur.Rebuild.Version)
		case !onDemand && !p.start:
			return cur, false, nil
		}
		next, version := startVersion(cur, vr.v.finger, vr.v.version, cfg.Now(), cfg.Rebuild.DeleteAfter)
		next.Rebuild.Served = specOf(vr.v, cfg.App, version)
		n = version
		return next, true, nil
	})
	return rec, n, err
}

// apply starts and stops engines so that this instance runs what p says, keeps replaced
// versions' engines until their deletion, and moves serving.
func (vr *viewRun) apply(ctx context.Context, rec versionsRecord, p plan) {
	now := vr.rt.cfg.Now()
	want := map[int]bool{} // version → processes input
	if !p.outdated && (p.process || rec.Serving.Served != nil) {
		want[p.serving] = p.process
	}
	if p.rebuild != 0 {
		want[p.rebuild] = true
	}
	vr.mu.Lock()
	for _, o := range rec.Old {
		if r := vr.mu.engines[o.Version]; r != nil && o.State == StateRetired && !o.due(now) {
			want[o.Version] = !r.e.frozen
		}
	}
	var stop []*running
	for version, r := range vr.mu.engines {
		if process, ok := want[version]; !ok || process == r.e.frozen {
			stop = append(stop, r)
			delete(vr.mu.engines, version)
		}
	}
	vr.mu.rec, vr.mu.plan = rec, p
	vr.mu.Unlock()
	for _, r := range stop {
		vr.log.Info("views: stopping version", "version", r.e.v.version)
		r.e.feed.closeAll(ErrSwitched)
		r.cancel()
		<-r.done
	}
	for version, process := range want {
		vr.mu.Lock()
		have := vr.mu.engines[version] != nil
		vr.mu.Unlock()
		if !have {
			vr.start(ctx, rec, version, process, version == p.rebuild)
		}
	}
	vr.applyHold(rec.Hold)
	vr.moveServing(p)
}

// applyHold gives the shadow check's hold to the engines of the two versions it names and
// ends it for the others.
func (vr *viewRun) applyHold(h *shadowHold) {
	vr.mu.Lock()
	defer vr.mu.Unlock()
	for version, r := range vr.mu.engines {
		if h != nil && (version == h.Old || version == h.New) {
			r.e.setHold(h)
		} else {
			r.e.setHold(nil)
		}
	}
}

// start runs one version's engine in its own goroutine.
func (vr *viewRun) start(ctx context.Context, rec versionsRecord, version int, process, rebuild bool) {
	v := vr.v.at(version)
	if !process {
		v = rec.Serving.Served.view(vr.v.name, version, rec.Serving.Fingerprint)
	}
	e := newEngine(vr.rt, v)
	e.frozen = !process
	if rebuild && vr.rt.cfg.Rebuild.RecordsPerSecond > 0 {
		e.throttle = newThrottle(vr.rt.cfg.Rebuild.RecordsPerSecond)
	}
	ectx, cancel := context.WithCancel(ctx)
	r := &running{e: e, cancel: cancel, done: make(chan struct{})}
	vr.mu.Lock()
	vr.mu.engines[version] = r
	vr.mu.Unlock()
	vr.log.Info("views: starting version", "version", version, "processing", process, "rebuild", rebuild)
	go func() {
		err := runEngine(ectx, e)
		close(r.done)
		if ectx.Err() != nil {
			return // stopped on purpose, or the runtime is stopping
		}
		select {
		case vr.events <- engineExit{e: e, err: err}:
		case <-ctx.Done():
		}
	}()
}

// runEngine runs e and turns a panic of view code into an error, so that bad new code fails
// its rebuild instead of the process.
func runEngine(ctx context.Context, e *engine) (err error) {
	defer func() {
		if p := recover(); p != nil {
			e.rt.cfg.Logger.Error("views: view code panicked", "view", e.v.name, "version", e.v.version,
				"panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("views: view %q version %d panicked: %v", e.v.name, e.v.version, p)
		}
	}()
	if err := e.run(ctx); err != nil {
		return err
	}
	return fmt.Errorf("views: view %q version %d stopped", e.v.name, e.v.version)
}

// moveServing points queries at the serving version's engine; subscriptions to the version
// that stops serving end with ErrSwitched.
func (vr *viewRun) moveServing(p plan) {
	next := p.serving
	if p.outdated {
		next = 0
	}
	vr.mu.Lock()
	prev := vr.mu.serving
	vr.mu.serving = next
	old, cur := vr.mu.engines[prev], vr.mu.engines[next]
	vr.mu.Unlock()
	if cur != nil {
		cur.e.serving.Store(true)
	}
	if prev == next {
		return
	}
	if old != nil {
		old.e.serving.Store(false)
		old.e.feed.closeAll(ErrSwitched)
	}
	m := vr.rt.rmetrics
	m.serving.WithLabelValues(string(vr.v.name)).Set(float64(p.serving))
	if prev != 0 {
		m.switches.WithLabelValues(string(vr.v.name)).Inc()
		vr.log.Info("views: serving version switched", "from", prev, "to", p.serving)
	}
}

// exited handles an engine that stopped by itself.
func (vr *viewRun) exited(ctx context.Context, vlog *versionLog, ex engineExit) error {
	version := ex.e.v.version
	vr.mu.Lock()
	r := vr.mu.engines[version]
	current := r != nil && r.e == ex.e
	if current {
		delete(vr.mu.engines, version)
	}
	serving := vr.mu.serving
	vr.mu.Unlock()
	if !current || ctx.Err() != nil {
		return nil
	}
	rec, _ := vlog.get(vr.v.name)
	switch {
	case rec.Rebuild != nil && rec.Rebuild.Version == version && rec.Rebuild.State == StateRebuilding:
		vr.log.Error("views: rebuild failed; the serving version keeps serving", "version", version,
			"serving", rec.Serving.Version, "err", ex.err)
		vr.rt.rmetrics.failures.WithLabelValues(string(vr.v.name)).Inc()
		cfg := vr.rt.cfg
		_, err := vlog.update(ctx, vr.v.name, func(cur versionsRecord, _ bool) (versionsRecord, bool, error) {
			next, ok := failVersion(cur, version, ex.err.Error(), cfg.Now(), cfg.Rebuild.DeleteAfter)
			return next, ok, nil
		})
		if err != nil {
			vr.logWrite(ctx, "record the failed rebuild", err)
		}
		return nil
	case version == serving:
		return ex.err
	default:
		vr.log.Warn("views: a replaced version stopped", "version", version, "err", ex.err)
		return nil
	}
}

func (vr *viewRun) stopAll() {
	vr.mu.Lock()
	all := slices.Collect(func(yield func(*running) bool) {
		for _, r := range vr.mu.engines {
			if !yield(r) {
				return
			}
		}
	})
	clear(vr.mu.engines)
	vr.mu.Unlock()
	for _, r := range all {
		r.cancel()
		<-r.done
	}
}

// tick measures the rebuild running here, and switches to it when it caught up; the instance
// that holds the rebuild's first task decides, so one instance runs the shadow check.
func (vr *viewRun) tick(ctx context.Context, vlog *versionLog) {
	vr.mu.Lock()
	p, prev := vr.mu.plan, vr.mu.progress
	rb := vr.mu.engines[p.rebuild]
	vr.mu.Unlock()
	if p.rebuild == 0 || rb == nil || !rb.e.setUp.Load() {
		vr.rt.rmetrics.clear(vr.v.name)
		return
	}
	now := vr.rt.cfg.Now()
	prog, err := rb.e.measure(ctx, vr.adm, prev, now)
	if err != nil {
		vr.log.Warn("views: measure rebuild progress", "version", p.rebuild, "err", err)
		return
	}
	vr.mu.Lock()
	vr.mu.progress = prog
	vr.mu.Unlock()
	vr.countRecords(rb.e)
	vr.rt.rmetrics.observe(vr.v.name, prog)
	if now.Sub(vr.lastLog) >= vr.rt.cfg.Rebuild.LogInterval {
		vr.lastLog = now
		vr.log.Info("views: rebuild progress", "version", p.rebuild, "records", rb.e.processed.Load(),
			"lag", prog.total, "rate", int64(prog.rate), "eta", prog.eta.Round(time.Second), "lag_by_partition", prog.lag)
	}
	if prog.caughtUp(vr.rt.cfg.Rebuild.SwitchLag) && rb.e.holds(taskID{0, 0}) {
		vr.switchOver(ctx, vlog, rb.e)
	}
}

func (vr *viewRun) countRecords(e *engine) {
	if vr.counting != e.v.version {
		vr.counting, vr.counted = e.v.version, 0
	}
	n := e.processed.Load()
	vr.rt.rmetrics.records.WithLabelValues(string(vr.v.name)).Add(float64(n - vr.counted))
	vr.counted = n
}

// switchOver runs the shadow check and writes the switch; every instance follows it.
func (vr *viewRun) switchOver(ctx context.Context, vlog *versionLog, rb *engine) {
	cfg := vr.rt.cfg
	rec, _ := vlog.get(vr.v.name)
	shadow := vr.shadowCheck(ctx, vlog, rec, rb)
	vr.rt.rmetrics.differ.WithLabelValues(string(vr.v.name)).Set(float64(shadow.Differ))
	vr.rt.rmetrics.compared.WithLabelValues(string(vr.v.name)).Set(float64(shadow.Keys))
	vr.log.Info("views: shadow check before the switch", "old", shadow.Old, "new", shadow.New, "keys", shadow.Keys,
		"differ", shadow.Differ, "cut", shadow.Cut, "held", shadow.Held, "examples", strings.Join(shadow.Examples, ","), "err", shadow.Err)
	_, err := vlog.update(ctx, vr.v.name, func(cur versionsRecord, _ bool) (versionsRecord, bool, error) {
		next, err := switchTo(cur, rb.v.version, shadow, cfg.Now(), cfg.Rebuild.DeleteAfter)
		return next, err == nil, err
	})
	if err != nil {
		vr.logWrite(ctx, "write the switch", err)
	}
}

// deleteDue stops and drops the local data of versions whose time is up (every instance), and
// deletes their topics and group (the instance holding the serving version's first task, once
// the group is empty or a minute after the deadline).
func (vr *viewRun) deleteDue(ctx context.Context, vlog *versionLog, rec versionsRecord) {
	now := vr.rt.cfg.Now()
	vr.mu.Lock()
	s := vr.mu.engines[vr.mu.serving]
	vr.mu.Unlock()
	coordinator := s != nil && s.e.holds(taskID{0, 0})
	for _, o := range rec.entries() {
		if !o.due(now) && o.State != StateDeleted {
			continue
		}
		if !vr.dropped[o.Version] {
			if err := vr.rt.cfg.State.DropVersion(vr.rt.cfg.App, string(vr.v.name), o.Version); err != nil {
				vr.log.Error("views: drop the local stores of a deleted version", "version", o.Version, "err", err)
				continue
			}
			vr.dropped[o.Version] = true
		}
		if o.State == StateDeleted || !coordinator {
			continue
		}
		if err := vr.deleteVersion(ctx, vlog, o, now); err != nil && ctx.Err() == nil {
			vr.log.Warn("views: delete the topics of a replaced version; retrying", "version", o.Version, "err", err)
		}
	}
}

// deleteVersion deletes the topics and the group of one version and records it.
func (vr *viewRun) deleteVersion(ctx context.Context, vlog *versionLog, o versionEntry, now time.Time) error {
	app, name := vr.rt.cfg.App, string(vr.v.name)
	group := topic.Group(app, name, o.Version)
	groups, err := vr.adm.DescribeGroups(ctx, group)
	if err != nil {
		return err
	}
	if g := groups[group]; len(g.Members) > 0 && now.Before(o.DeleteAt.Add(time.Minute)) {
		return nil // instances are still leaving the version
	}
	all, err := vr.adm.ListTopics(ctx)
	if err != nil {
		return err
	}
	prefix := topic.ViewPrefix(app, name, o.Version)
	var names []string
	for _, t := range all.Names() {
		if strings.HasPrefix(t, prefix) {
			names = append(names, t)
		}
	}
	if len(names) > 0 {
		resp, err := vr.adm.DeleteTopics(ctx, names...)
		if err != nil {
			return err
		}
		for _, r := range resp.Sorted() {
			if r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
				return fmt.Errorf("delete topic %s: %w", r.Topic, r.Err)
			}
		}
	}
	if resp, err := vr.adm.DeleteGroups(ctx, group); err == nil {
		for _, r := range resp {
			if r.Err != nil && !errors.Is(r.Err, kerr.GroupIDNotFound) {
				vr.log.Warn("views: delete the group of a replaced version", "group", group, "err", r.Err)
			}
		}
	}
	vr.log.Info("views: deleted a replaced version", "version", o.Version, "topics", len(names), "state", o.State)
	_, err = vlog.update(ctx, vr.v.name, func(cur versionsRecord, _ bool) (versionsRecord, bool, error) {
		next, ok := markDeleted(cur, o.Version, vr.rt.cfg.Now())
		return next, ok, nil
	})
	return err
}

// info describes the view as this instance runs it.
func (vr *viewRun) info() Info {
	vr.mu.Lock()
	s := vr.mu.engines[vr.mu.serving]
	rec, p, prog := vr.mu.rec, vr.mu.plan, vr.mu.progress
	rb := vr.mu.engines[p.rebuild]
	vr.mu.Unlock()
	in := Info{Name: vr.v.name, Version: rec.Serving.Version, Fingerprint: rec.Serving.Fingerprint,
		Windowed: vr.v.Windowed(), Queryable: vr.v.Queryable()}
	if s != nil {
		in = s.e.info()
		in.Frozen = s.e.frozen
	}
	in.Shadow = rec.Serving.Shadow
	if p.outdated {
		in.Problem = fmt.Sprintf("this instance's definition (fingerprint %.12s) was replaced by version %d (%.12s); deploy the newer definition",
			vr.v.finger, rec.Serving.Version, rec.Serving.Fingerprint)
	}
	if r := rec.Rebuild; r != nil {
		in.Rebuild = &RebuildInfo{Version: r.Version, Fingerprint: r.Fingerprint, State: r.State, Reason: r.Reason,
			Since: r.Since, ETA: -1}
		if rb != nil && rb.e.v.version == r.Version {
			ri := rb.e.info()
			in.Rebuild.Records, in.Rebuild.Owned = rb.e.processed.Load(), ri.Owned
			in.Rebuild.Lag, in.Rebuild.TotalLag, in.Rebuild.Rate, in.Rebuild.ETA = prog.lag, prog.total, prog.rate, prog.eta
		}
	}
	return in
}

// Rebuild starts a new version of view with this runtime's definition: it reprocesses every
// input from the beginning beside the serving version, which keeps serving (and processing:
// the definition is the same) until the new one caught up and takes over. It returns the new
// version; [ErrRebuilding] if one runs already.
func (r *Runtime) Rebuild(ctx context.Context, view Name) (int, error) {
	vr, vlog, err := r.running(view)
	if err != nil {
		return 0, err
	}
	_, n, err := vr.startRebuild(ctx, vlog, true)
	if err != nil {
		return 0, err
	}
	vr.log.Info("views: rebuild started on demand", "version", n)
	return n, nil
}

// Rollback makes the version that the serving one replaced serve again, if it is still kept
// ([RebuildConfig].DeleteAfter), on every instance; the version rolled back from is deleted
// after DeleteAfter. After a code change the version rolled back to answers queries without
// processing until a binary with its definition runs. It returns the serving version.
func (r *Runtime) Rollback(ctx context.Context, view Name) (int, error) {
	_, vlog, err := r.running(view)
	if err != nil {
		return 0, err
	}
	cfg := r.cfg
	rec, err := vlog.update(ctx, view, func(cur versionsRecord, ok bool) (versionsRecord, bool, error) {
		if !ok {
			return cur, false, fmt.Errorf("%w: view %q has not started", ErrNotRunning, view)
		}
		next, err := rollBack(cur, cfg.Now(), cfg.Rebuild.DeleteAfter)
		return next, err == nil, err
	})
	if err != nil {
		return 0, fmt.Errorf("views: roll back view %q: %w", view, err)
	}
	r.cfg.Logger.Info("views: rolled back", "view", string(view), "serving", rec.Serving.Version)
	return rec.Serving.Version, nil
}

// Serving returns the version of view that queries read on this instance.
func (r *Runtime) Serving(view Name) (int, error) {
	vr, _, err := r.running(view)
	if err != nil {
		return 0, err
	}
	vr.mu.Lock()
	defer vr.mu.Unlock()
	if vr.mu.serving == 0 {
		return 0, fmt.Errorf("%w: view %q has not started", ErrRestoring, view)
	}
	return vr.mu.serving, nil
}

func (r *Runtime) running(view Name) (*viewRun, *versionLog, error) {
	vr := r.runs[view]
	if vr == nil {
		return nil, nil, fmt.Errorf("%w: %q", ErrUnknownView, view)
	}
	vlog := r.vlog.Load()
	if vlog == nil {
		return nil, nil, ErrNotRunning
	}
	return vr, vlog, nil
}

// engineAt returns the engine of one version of view (0: the serving one).
func (r *Runtime) engineAt(view Name, version int) (*engine, error) {
	vr := r.runs[view]
	if vr == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownView, view)
	}
	vr.mu.Lock()
	defer vr.mu.Unlock()
	if version == 0 {
		if vr.mu.plan.outdated {
			return nil, fmt.Errorf("%w: view %q", ErrOutdated, view)
		}
		version = vr.mu.serving
	}
	run := vr.mu.engines[version]
	switch {
	case run != nil:
		return run.e, nil
	case vr.mu.serving == 0 || version == vr.mu.serving:
		return nil, fmt.Errorf("%w: view %q has not started", ErrRestoring, view)
	}
	return nil, fmt.Errorf("%w: view %q version %d", ErrNoVersion, view, version)
}
