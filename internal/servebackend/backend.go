package servebackend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tarnhq/tarn/serve"
	"github.com/tarnhq/tarn/views"
)

// Backend adapts a views.Runtime to what serve answers HTTP requests from: it is the
// [serve.Backend] of a tarn instance. Make it with [New] and keep [Backend.Run] running while
// it serves.
//
// Positions differ by one between the two: views reports the last changelog offset a partition
// has applied, serve the next one to apply (so that a zero position means "nothing yet").
type Backend struct {
	rt *views.Runtime
	// cdcProblem says why the CDC source does not run here ("" when it does or there is none).
	cdcProblem func() string
	// cdcTopics are the table topics the CDC source writes.
	cdcTopics map[string]bool
	owners    *ownerCache
	// cdcPos follows the CDC source's position for min_lsn reads; nil without a CDC source.
	cdcPos *cdcPosition
	// lsns knows the LSN each CDC-fed view has applied, for the positions of answers; nil
	// without a CDC source.
	lsns *appliedLSN
	// stopping is closed when Run ends (the instance starts to stop): live subscriptions end
	// with serve.ErrStopping, so that their clients resume elsewhere.
	stopping chan struct{}
}

// New makes the backend of cfg.Runtime; with a CDC source (cfg.CDCSlot) it connects to Kafka
// to follow the source's position, which [Backend.Run] then reads.
func New(cfg Config) (*Backend, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &Backend{rt: cfg.Runtime, cdcProblem: cfg.CDCProblem, cdcTopics: map[string]bool{},
		stopping: make(chan struct{}), owners: &ownerCache{rt: cfg.Runtime, ttl: time.Second, byView: map[views.Name]ownerEntry{}}}
	for _, name := range cfg.CDCTopics {
		b.cdcTopics[name] = true
	}
	if cfg.CDCSlot != "" {
		pos, err := newCDCPosition(cfg.Brokers, cfg.App, cfg.CDCSlot, cfg.Logger)
		if err != nil {
			return nil, err
		}
		b.cdcPos, b.lsns = pos, newAppliedLSN(pos, cfg.Runtime, cfg.Logger)
	}
	return b, nil
}

// Run follows the CDC source's position (for min_lsn and the LSNs of answers) until ctx
// ends, and returns nil then. Before it returns it ends the live subscriptions with
// serve.ErrStopping and stops following the views' LSNs (answers then carry the last LSN
// known): the instance stops, and its clients should resume elsewhere. Reads keep working
// after Run returns, so that an instance can answer while it hands its partitions over.
func (b *Backend) Run(ctx context.Context) error {
	// The subscriptions end as soon as ctx does, not when the CDC follower has returned: the
	// views start handing their partitions over at that moment too, and a subscription must
	// end saying the instance stops, not that a partition moved.
	stop := sync.OnceFunc(func() { close(b.stopping) })
	context.AfterFunc(ctx, stop)
	var err error
	if b.cdcPos != nil {
		err = b.cdcPos.run(ctx)
	} else {
		<-ctx.Done()
	}
	stop()
	b.lsns.close()
	return err
}

// isStopping reports whether Run has begun to stop.
func (b *Backend) isStopping() bool {
	select {
	case <-b.stopping:
		return true
	default:
		return false
	}
}

func (b *Backend) Views() []serve.ViewInfo {
	var out []serve.ViewInfo
	for _, in := range b.rt.Views() {
		if in.Queryable {
			out = append(out, b.viewInfo(in))
		}
	}
	slices.SortFunc(out, func(a, b serve.ViewInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (b *Backend) View(name string) (serve.View, error) {
	for _, in := range b.rt.Views() {
		if string(in.Name) == name && in.Queryable {
			return &view{b: b, name: in.Name}, nil
		}
	}
	return nil, fmt.Errorf("%w: %q", serve.ErrUnknownView, name)
}

func (b *Backend) Ready() error {
	var waiting []string
	if p := b.cdcProblem(); p != "" {
		waiting = append(waiting, p)
	}
	for _, in := range b.rt.Views() {
		switch {
		case in.Failing != "":
			waiting = append(waiting, fmt.Sprintf("%s: failing since %s: %s", in.Name, in.FailingSince.Format(time.RFC3339), in.Failing))
		case !in.Running:
			waiting = append(waiting, fmt.Sprintf("%s: not yet running", in.Name))
		case len(in.Restoring) > 0:
			waiting = append(waiting, fmt.Sprintf("%s: restoring partitions %v", in.Name, in.Restoring))
		}
	}
	if len(waiting) > 0 {
		return errors.New(strings.Join(waiting, "; "))
	}
	return nil
}

// viewInfo describes a view, failing while the CDC source it reads cannot run.
func (b *Backend) viewInfo(in views.Info) serve.ViewInfo {
	info := viewInfo(in)
	if p := b.cdcProblem(); p != "" && info.Problem == "" && b.feeds(in) {
		info.State, info.Problem = serve.StateFailing, p
	}
	return info
}

// feeds reports whether the view reads a table topic of the CDC source, or may (it has not
// started, so its inputs are unknown: the runtime waits for the source's topics).
func (b *Backend) feeds(in views.Info) bool {
	if !in.Running {
		return true
	}
	for tp := range in.Lag {
		name, _, _ := strings.Cut(tp, "/")
		if b.cdcTopics[name] {
			return true
		}
	}
	return false
}

func viewInfo(in views.Info) serve.ViewInfo {
	state := serve.StateRunning
	var failingSince *time.Time
	problem := in.Problem
	switch {
	case in.Failing != "":
		state, problem = serve.StateFailing, in.Failing
		failingSince = &in.FailingSince
	case !in.Running || len(in.Restoring) > 0:
		state = serve.StateRestoring
	case in.Rebuild != nil && in.Rebuild.State == views.StateRebuilding:
		state = serve.StateRebuilding
	}
	var lag int64
	for _, l := range in.Lag {
		lag += l
	}
	return serve.ViewInfo{Name: string(in.Name), Version: in.Version, State: state, Windowed: in.Windowed,
		Partitions: in.Partitions, Owned: in.Owned, Lag: lag, Position: servePosition(in.Positions, in.Owned),
		Rebuild: rebuildProgress(in), Problem: problem, FailingSince: failingSince}
}

func rebuildProgress(in views.Info) *serve.RebuildProgress {
	r := in.Rebuild
	if r == nil {
		return nil
	}
	p := &serve.RebuildProgress{Version: r.Version, State: string(r.State), Reason: r.Reason, Records: r.Records,
		Lag: r.TotalLag, Rate: r.Rate, ETASeconds: r.ETA.Seconds()}
	if r.ETA < 0 {
		p.ETASeconds = -1
	}
	if in.Shadow != nil {
		p.ShadowKeys, p.ShadowDiffer = in.Shadow.Keys, in.Shadow.Differ
		p.ShadowCut, p.ShadowError = in.Shadow.Cut, in.Shadow.Err
	}
	return p
}

// servePosition turns views' last applied offsets into serve's next offsets. A partition of
// parts that has applied nothing is at 0: views leaves it out, but to serve a partition left
// out has reached nothing, not even 0, and a wait for 0 there would never end.
func servePosition(p views.Position, parts []int32) serve.Position {
	out := serve.Position{Offsets: make(map[int32]int64, max(len(p), len(parts)))}
	for _, part := range parts {
		out.Offsets[part] = 0
	}
	for part, off := range p {
		out.Offsets[part] = off + 1
	}
	return out
}

// view is one served view of the runtime.
type view struct {
	b    *Backend
	name views.Name
}

// info describes this view alone: it runs on every request (ownership, positions), and
// describing every view would read every view's positions from Pebble.
func (v *view) info() views.Info {
	in, err := v.b.rt.Info(v.name)
	if err != nil {
		return views.Info{Name: v.name}
	}
	return in
}

func (v *view) Info() serve.ViewInfo { return v.b.viewInfo(v.info()) }

// Rebuild starts a new version of the view that reprocesses its inputs beside the serving one.
func (v *view) Rebuild(ctx context.Context) (int, error) { return v.b.rt.Rebuild(ctx, v.name) }

func (v *view) Partition(key []byte) int32 {
	p, _ := v.b.rt.PartitionOf(v.name, string(key))
	return p
}

func (v *view) Owner(p int32) serve.Owner {
	in := v.info()
	// Assigned here and still restoring (or about to): this instance's, not the last owner's.
	if restoring := slices.Contains(in.Restoring, p); restoring || slices.Contains(in.Owned, p) {
		return serve.Owner{Local: true, Restoring: restoring}
	}
	return serve.Owner{Addr: v.b.owners.owner(v.name, p)}
}

// Position carries the LSN the view is known to have applied, taken before the offsets so
// that they cover it.
func (v *view) Position() serve.Position {
	lsn := v.b.lsns.of(v.name)
	in := v.info()
	pos := servePosition(in.Positions, in.Owned)
	pos.LSN = lsn
	return pos
}

// WaitFor polls: positions move once per processed batch, and a few milliseconds of delay is
// far below a batch's duration. A target LSN (min_lsn) is reached once the view applied
// every change the CDC source wrote up to it (cdcPosition.waitApplied); a view that reads no
// CDC table, or an app without a CDC source, has nothing to wait for. What such a wait
// proves is remembered for the positions of answers (appliedLSN).
func (v *view) WaitFor(ctx context.Context, target serve.Position) error {
	if target.LSN != 0 {
		if topics, err := v.b.rt.CDCTopics(v.name); err != nil {
			return err
		} else if len(topics) == 0 {
			return serve.ErrNotCDC
		}
		if v.b.cdcPos != nil {
			version, _ := v.b.rt.Serving(v.name)
			lsn, err := v.b.cdcPos.waitApplied(ctx, v.b.rt, v.name, target.LSN)
			if err != nil {
				return err
			}
			v.b.lsns.proved(v.name, version, lsn)
		}
		target.LSN = 0
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		in := v.info()
		if servePosition(in.Positions, in.Owned).Reached(target.Only(in.Owned)) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// Inputs and WaitInputs make the view a serve.InputWaiter: min_offsets=topic:partition:offset
// waits as min_lsn does, from the producer's record instead of the table topics' ends.
func (v *view) Inputs() []string {
	topics, _ := v.b.rt.Inputs(v.name)
	return topics
}

func (v *view) WaitInputs(ctx context.Context, next serve.InputOffsets) error {
	return v.b.rt.WaitApplied(ctx, v.name, next)
}

// position is the position of an answer read from parts after the LSN was taken (see
// Position).
func position(p views.Position, lsn serve.LSN, parts ...int32) serve.Position {
	out := servePosition(p, parts)
	out.LSN = lsn
	return out
}

func (v *view) Get(ctx context.Context, key []byte) (serve.Read, error) {
	lsn := v.b.lsns.of(v.name)
	val, pos, err := v.b.rt.Get(ctx, v.name, string(key))
	if errors.Is(err, views.ErrNotFound) {
		return serve.Read{Position: position(pos, lsn, v.Partition(key))}, nil
	}
	if err != nil {
		return serve.Read{}, serveError(err)
	}
	return serve.Read{Found: true, Value: val, Position: position(pos, lsn, v.Partition(key))}, nil
}

// Scan reads the version req names (pinned by the scan's first page) and asks views for one
// entry more than the limit of req's partitions, to tell serve whether more exist. A limit is
// always set: serve bounds every page.
func (v *view) Scan(_ context.Context, req serve.ScanRequest) (serve.ScanResult, error) {
	if err := v.checkLocal(req.Partitions); err != nil {
		return serve.ScanResult{}, err
	}
	pin, err := v.b.rt.Pin(v.name, req.Version)
	if err != nil {
		return serve.ScanResult{}, serveError(err)
	}
	var lsn serve.LSN
	if serving, _ := v.b.rt.Serving(v.name); pin.Version() == serving {
		lsn = v.b.lsns.of(v.name) // an older pinned version's LSN is not known
	}
	entries, pos, err := pin.Scan(views.ScanRange{Partitions: req.Partitions, Start: string(req.Start),
		End: string(req.End), Limit: req.Limit + 1})
	if err != nil {
		return serve.ScanResult{}, serveError(err)
	}
	res := serve.ScanResult{Version: pin.Version(), Position: position(pos, lsn, req.Partitions...).Only(req.Partitions)}
	if len(entries) > req.Limit {
		entries, res.More = entries[:req.Limit], true
	}
	res.Entries = make([]serve.Entry, len(entries))
	for i, e := range entries {
		res.Entries[i] = serve.Entry{Key: []byte(e.Key), Value: e.Value}
	}
	return res, nil
}

// checkLocal refuses partitions this instance does not own or still restores, as serve's
// contract asks.
func (v *view) checkLocal(parts []int32) error {
	in := v.info()
	for _, p := range parts {
		if !slices.Contains(in.Owned, p) {
			return &serve.NotOwnerError{Partition: p, Addr: v.b.owners.owner(v.name, p)}
		}
		if slices.Contains(in.Restoring, p) {
			return fmt.Errorf("%w: view %s partition %d", serve.ErrRestoring, v.name, p)
		}
	}
	return nil
}

func (v *view) Windows(ctx context.Context, key []byte, from, to time.Time) ([]serve.Window, serve.Position, error) {
	lsn := v.b.lsns.of(v.name)
	wins, pos, err := v.b.rt.Windows(ctx, v.name, string(key), from, to)
	if err != nil {
		return nil, serve.Position{}, serveError(err)
	}
	out := make([]serve.Window, 0, len(wins))
	for _, w := range wins {
		out = append(out, serve.Window{Start: w.Start, End: w.End, Value: w.Value})
	}
	return out, position(pos, lsn, v.Partition(key)), nil
}

// Subscribe forwards the views change feed to serve. Every change carries the offset of its
// own changelog record, live or replayed, so a client resuming after any change replays
// exactly the ones that followed it.
func (v *view) Subscribe(req serve.SubscribeRequest, fn func(serve.Change) bool) (serve.Position, func(), error) {
	if err := v.checkLocal(req.Partitions); err != nil {
		return serve.Position{}, nil, err
	}
	// The LSN vouches for the current offsets only: a stream that resumes from older ones
	// has not yet been handed everything up to it (its progress events carry it later).
	lsn := v.b.lsns.of(v.name)
	current := v.info().Positions
	after := views.Position{}
	start := serve.Position{Offsets: map[int32]int64{}, LSN: lsn}
	for _, p := range req.Partitions {
		if next, ok := req.After.Offsets[p]; ok {
			after[p] = next - 1
			start.Offsets[p] = next
			start.LSN = 0
		} else if off, ok := current[p]; ok {
			after[p] = off
			start.Offsets[p] = off + 1
		} else {
			after[p] = -1
			start.Offsets[p] = 0
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	sub, err := v.b.rt.Subscribe(ctx, v.name, after, 0)
	if err != nil {
		cancel()
		return serve.Position{}, nil, serveError(err)
	}
	go v.forward(ctx, sub, req, fn, cancel)
	return start, func() { cancel(); sub.Close() }, nil
}

// ownerCheck is how often a subscription looks whether its partitions are still here.
const ownerCheck = time.Second

// ended tells serve why the backend ends a subscription, unless serve ended it (ctx).
func (v *view) ended(ctx context.Context, req serve.SubscribeRequest, reason error) {
	if ctx.Err() == nil && req.Ended != nil {
		req.Ended(reason)
	}
}

// movedOr is reason, or serve.ErrStopping while the instance stops: its partitions leave
// because it stops, and its clients should hear that.
func (v *view) movedOr(reason error) error {
	if v.b.isStopping() {
		return serve.ErrStopping
	}
	return reason
}

// subscriptionEnd is serve's reason for the end of a views subscription.
func subscriptionEnd(err error) error {
	if errors.Is(err, views.ErrSwitched) {
		return fmt.Errorf("%w: %w", serve.ErrSwitched, err)
	}
	if err == nil {
		return serve.ErrStopping
	}
	return err
}

func containsAll(have, want []int32) bool {
	for _, p := range want {
		if !slices.Contains(have, p) {
			return false
		}
	}
	return true
}

func (v *view) forward(ctx context.Context, sub *views.Subscription, req serve.SubscribeRequest, fn func(serve.Change) bool, cancel func()) {
	defer cancel()
	defer sub.Close()
	tick := time.NewTicker(ownerCheck)
	defer tick.Stop()
	for {
		var c views.Change
		select {
		case <-v.b.stopping:
			v.ended(ctx, req, serve.ErrStopping)
			return
		case <-tick.C:
			if owned := v.info().Owned; !containsAll(owned, req.Partitions) {
				v.ended(ctx, req, v.movedOr(serve.ErrMoved))
				return
			}
			continue
		case next, ok := <-sub.C:
			if !ok {
				v.ended(ctx, req, v.movedOr(subscriptionEnd(sub.Err())))
				return
			}
			c = next
		}
		if !slices.Contains(req.Partitions, c.Partition) {
			continue
		}
		// Every change has its own changelog offset (views publishes one per record), so
		// positions, and the event ids made of them, rise strictly.
		if req.HasKey && c.Key != string(req.Key) {
			continue
		}
		if !fn(serve.Change{Partition: c.Partition, Offset: c.Offset, Key: []byte(c.Key), Value: c.Value}) {
			return
		}
	}
}

// serveError translates the runtime's errors into serve's.
func serveError(err error) error {
	var notOwner *views.NotOwnerError
	switch {
	case errors.As(err, &notOwner):
		return &serve.NotOwnerError{Partition: notOwner.Partition, Addr: notOwner.Addr}
	case errors.Is(err, views.ErrRestoring):
		return fmt.Errorf("%w: %v", serve.ErrRestoring, err)
	case errors.Is(err, views.ErrUnknownView):
		return fmt.Errorf("%w: %v", serve.ErrUnknownView, err)
	case errors.Is(err, views.ErrNoVersion):
		return fmt.Errorf("%w: %v", serve.ErrNoVersion, err)
	case errors.Is(err, views.ErrNotServed):
		return fmt.Errorf("%w: %v", serve.ErrNotWindowed, err)
	}
	return err
}

// ownerCache remembers which instance owns each partition for a short while: finding out
// asks Kafka to describe the view's consumer group.
type ownerCache struct {
	rt     *views.Runtime
	ttl    time.Duration
	mu     sync.Mutex
	byView map[views.Name]ownerEntry
}

type ownerEntry struct {
	at     time.Time
	owners map[int32]string
}

func (c *ownerCache) owner(name views.Name, p int32) string {
	c.mu.Lock()
	e, ok := c.byView[name]
	c.mu.Unlock()
	if !ok || time.Since(e.at) > c.ttl {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		owners, err := c.rt.Owners(ctx, name)
		cancel()
		if err != nil {
			return e.owners[p]
		}
		e = ownerEntry{at: time.Now(), owners: owners}
		c.mu.Lock()
		c.byView[name] = e
		c.mu.Unlock()
	}
	return e.owners[p]
}
