package views

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tarnhq/tarn/internal/topic"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ShadowReport is the comparison of a new version's results with the serving version's, made
// before the switch, so that an operator sees the effect of a change. When both versions
// process input (an on-demand rebuild of the same definition), they are compared at one input
// position, Cut: an unchanged definition then reports no difference however fast input
// arrives. After a code change the old version stopped processing when the rebuild began, so
// the two cannot meet at one position: Cut is empty and keys that moved since differ too.
type ShadowReport struct {
	At  time.Time `json:"at"`
	Old int       `json:"old"`
	New int       `json:"new"`
	// Keys is how many keys were compared: the first Config.Rebuild.ShadowKeys keys met in the
	// new version's served changelog, or all of them.
	Keys int `json:"keys"`
	// Differ counts compared keys whose values differ, including keys one version lacks.
	Differ int `json:"differ"`
	// Examples are up to five differing keys.
	Examples []string `json:"examples,omitempty"`
	// Cut is the input position both versions were compared at: per source topic and
	// partition, the offset of the first record that neither had processed. Empty when the
	// versions were compared where they stood (a code change, or Err).
	Cut map[string]map[int32]int64 `json:"cut,omitempty"`
	// Held is how long both versions' inputs were held at Cut; input arriving meanwhile
	// waited in its topics, and nothing was lost or processed twice.
	Held time.Duration `json:"held_ns,omitempty"`
	// Err says why the check could not finish, or could not hold both versions at one cut
	// (then they were compared where they stood); the switch goes ahead regardless.
	Err string `json:"error,omitempty"`
}

// shadowTimeout bounds the whole check; [RebuildConfig].ShadowHold the part of it that holds
// the inputs, so that a version that cannot reach the cut (a stuck instance, a lost
// partition) delays ingest by at most that long before the check gives up and says so.
const shadowTimeout = 2 * time.Minute

// shadowSettle is how often the coordinator looks at the versions' positions while it holds.
const shadowSettle = 100 * time.Millisecond

// shadowCheck compares the latest values of the served store's changelogs of the old and the
// new version: the changelogs hold every partition, so one instance can compare them all.
// When both versions process input it first holds them at a common cut (holdAndCompare).
func (vr *viewRun) shadowCheck(ctx context.Context, vlog *versionLog, rec versionsRecord, rb *engine) *ShadowReport {
	old := rec.Serving
	rep := &ShadowReport{At: vr.rt.cfg.Now(), Old: old.Version, New: rb.v.version}
	if old.Served == nil || rb.v.served == nil {
		rep.Err = "the serving version has no queryable store"
		return rep
	}
	ctx, cancel := context.WithTimeout(ctx, shadowTimeout)
	defer cancel()
	if rec.Rebuild == nil || rec.Rebuild.Fingerprint != old.Fingerprint {
		vr.compare(ctx, rep, old, rb)
		return rep
	}
	began := time.Now()
	err := vr.holdAndCompare(ctx, vlog, rep, old, rb)
	rep.Held = time.Since(began)
	vr.release(ctx, vlog, rb.v.version)
	if err != nil {
		vr.compare(ctx, rep, old, rb)
		rep.Cut = nil
		rep.Err = fmt.Sprintf("not compared at one input position: %v", err)
	}
	return rep
}

// holdAndCompare holds both versions at a cut of their source partitions, waits until both
// processed exactly the input below it (their group's committed offsets are at the cut) and
// drained their repartition topics, compares them, and checks afterwards that neither moved.
//
// The cut starts at the furthest committed position of either version and is raised
// whenever one is found past it: an instance applies the hold only once it follows the
// versions record, so a version may overshoot a first cut, never one that every instance
// holds. A raised cut lets the version behind move on up to it. Committed offsets are the
// one position every instance's partitions publish (at least once they trail the applied
// ones by a commit round trip, which the waiting covers).
func (vr *viewRun) holdAndCompare(ctx context.Context, vlog *versionLog, rep *ShadowReport, old versionEntry, rb *engine) error {
	// The hold's own writes are bounded by the check's context, not by limit, so that a hold
	// written is also known here when release looks for it.
	wctx := ctx
	limit := vr.rt.cfg.Rebuild.ShadowHold
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	app, name := vr.rt.cfg.App, string(vr.v.name)
	vs := []holdVersion{vr.holdVersion(rb, old.Version, topic.Group(app, name, old.Version)), vr.holdVersion(rb, rb.v.version, rb.group)}
	// Instances end the hold by themselves a little later than this check gives up: the
	// release it writes then comes first, and the deadline only covers a coordinator gone.
	until := vr.rt.cfg.Now().Add(limit + 5*time.Second)
	// failed says that the time ran out rather than how a read it cut short failed.
	failed := func(err error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("the versions did not reach a common cut within %s (Rebuild.ShadowHold); the hold was released", limit)
		}
		return err
	}
	var cut offsets
	for ; ; vr.settle(ctx) {
		if ctx.Err() != nil {
			return failed(ctx.Err())
		}
		pos, err := vr.positions(ctx, vs)
		if kerr.IsRetriable(err) {
			continue // an exactly-once commit in flight (UNSTABLE_OFFSET_COMMIT), a moving leader
		}
		if err != nil {
			return failed(err)
		}
		if next := raise(cut, pos); !equalCuts(next, cut) {
			cut = next
			if err := vr.writeHold(wctx, vlog, &shadowHold{Old: old.Version, New: rb.v.version, Cut: cut, Until: until}); err != nil {
				return err
			}
		} else if ok, err := vr.drained(ctx, vs, pos, cut); err != nil && !kerr.IsRetriable(err) {
			return failed(err)
		} else if ok {
			vr.compare(ctx, rep, old, rb)
			if rep.Err != "" {
				return failed(errors.New(rep.Err))
			}
			after, err := vr.positions(ctx, vs)
			if err == nil && equalCuts(raise(cut, after), cut) {
				rep.Cut = cut
				return nil
			}
		}
	}
}

func (vr *viewRun) settle(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(shadowSettle):
	}
}

// holdVersion is what the coordinator watches of one version: its group, its source topics
// (shared by both versions) and its repartition topics.
type holdVersion struct {
	group   string
	sources []string
	reparts []string
}

func (vr *viewRun) holdVersion(rb *engine, version int, group string) holdVersion {
	hv := holdVersion{group: group}
	for name, src := range rb.bySource {
		if step := src.topic.repartition; step != "" {
			hv.reparts = append(hv.reparts, topic.Repartition(vr.rt.cfg.App, string(vr.v.name), version, step))
		} else {
			hv.sources = append(hv.sources, name)
		}
	}
	return hv
}

// offsets are committed offsets per topic and partition.
type offsets map[string]map[int32]int64

// holdPos is one version's committed position: on the source topics and on its own
// repartition topics.
type holdPos struct{ sources, reparts offsets }

// positions reads each version's committed offsets on its source and repartition topics; a
// partition without a commit is at 0. RequireStable waits for exactly-once commits in flight.
func (vr *viewRun) positions(ctx context.Context, vs []holdVersion) ([]holdPos, error) {
	out := make([]holdPos, len(vs))
	for i, hv := range vs {
		got, err := vr.adm.FetchOffsetsForTopics(kadm.RequireStable(ctx), hv.group, append(slices.Clone(hv.sources), hv.reparts...)...)
		if err == nil {
			err = got.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("committed offsets of group %s: %w", hv.group, err)
		}
		out[i] = holdPos{sources: offsets{}, reparts: offsets{}}
		got.Each(func(o kadm.OffsetResponse) {
			into := out[i].sources
			if slices.Contains(hv.reparts, o.Topic) {
				into = out[i].reparts
			}
			into.set(o.Topic, o.Partition, max(o.At, 0))
		})
	}
	return out, nil
}

func (o offsets) set(t string, p int32, off int64) {
	if o[t] == nil {
		o[t] = map[int32]int64{}
	}
	o[t][p] = off
}

// raise returns cut raised to every version's source position: a cut never moves back,
// because no version can unprocess input.
func raise(cut offsets, pos []holdPos) offsets {
	next := offsets{}
	for t, ps := range cut {
		next[t] = maps.Clone(ps)
	}
	for _, p := range pos {
		for t, ps := range p.sources {
			for part, o := range ps {
				if cur, ok := next[t][part]; !ok || o > cur {
					next.set(t, part, o)
				}
			}
		}
	}
	return next
}

func equalCuts(a, b offsets) bool {
	return a != nil && b != nil && maps.EqualFunc(a, b, func(x, y map[int32]int64) bool { return maps.Equal(x, y) })
}

// drained reports whether every version is exactly at cut on its sources and has processed
// its repartition topics to their ends. The ends are read after the positions: a committed
// upstream batch's repartition records are below them, so a drained downstream cannot hide
// records still on their way.
func (vr *viewRun) drained(ctx context.Context, vs []holdVersion, pos []holdPos, cut offsets) (bool, error) {
	for i, hv := range vs {
		if !equalCuts(raise(offsets{}, pos[i:i+1]), cut) {
			return false, nil
		}
		if len(hv.reparts) == 0 {
			continue
		}
		ends, err := vr.adm.ListCommittedOffsets(ctx, hv.reparts...)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			return false, fmt.Errorf("end offsets of %v: %w", hv.reparts, err)
		}
		behind := false
		ends.Each(func(o kadm.ListedOffset) {
			if pos[i].reparts[o.Topic][o.Partition] < o.Offset {
				behind = true
			}
		})
		if behind {
			return false, nil
		}
	}
	return true, nil
}

// writeHold records the hold for every instance and gives it to this one's engines at once:
// the supervisor that would apply it from the record is the one running this check.
func (vr *viewRun) writeHold(ctx context.Context, vlog *versionLog, h *shadowHold) error {
	_, err := vlog.update(ctx, vr.v.name, func(cur versionsRecord, _ bool) (versionsRecord, bool, error) {
		if cur.Rebuild == nil || cur.Rebuild.Version != h.New || cur.Rebuild.State != StateRebuilding || cur.Serving.Version != h.Old {
			return cur, false, fmt.Errorf("%w: version %d", ErrNoRebuild, h.New)
		}
		cur = cur.clone()
		cur.Hold = h
		return cur, true, nil
	})
	if err != nil {
		return fmt.Errorf("record the hold: %w", err)
	}
	vr.applyHold(h)
	return nil
}

// release ends the hold of the rebuild of version, here at once and for every instance in
// the record; even when the check's context ended (the hold ends by itself at Until if this
// write fails too).
func (vr *viewRun) release(ctx context.Context, vlog *versionLog, version int) {
	vr.applyHold(nil)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, err := vlog.update(ctx, vr.v.name, func(cur versionsRecord, _ bool) (versionsRecord, bool, error) {
		if cur.Hold == nil || cur.Hold.New != version {
			return cur, false, nil
		}
		cur = cur.clone()
		cur.Hold = nil
		return cur, true, nil
	})
	if err != nil {
		vr.logWrite(ctx, "release the shadow check's hold (it ends by itself)", err)
	}
}

// compare fills rep with the comparison of the two versions' served changelogs as they are
// now (read to their ends).
func (vr *viewRun) compare(ctx context.Context, rep *ShadowReport, old versionEntry, rb *engine) {
	rep.Keys, rep.Differ, rep.Examples, rep.Err = 0, 0, nil, ""
	app, name := vr.rt.cfg.App, string(vr.v.name)
	newest, err := readLatest(ctx, vr.rt.base, topic.Changelog(app, name, rb.v.version, rb.v.served.name), vr.rt.cfg.Rebuild.ShadowKeys, nil)
	if err != nil {
		rep.Err = err.Error()
		return
	}
	oldest, err := readLatest(ctx, vr.rt.base, topic.Changelog(app, name, old.Version, old.Served.Store), -1,
		func(k string) bool { _, ok := newest[k]; return ok })
	if err != nil {
		rep.Err = err.Error()
		return
	}
	for _, k := range slicesSorted(newest) {
		rep.Keys++
		if o, ok := oldest[k]; !ok || !bytes.Equal(o, newest[k]) {
			rep.Differ++
			if len(rep.Examples) < 5 {
				rep.Examples = append(rep.Examples, k)
			}
		}
	}
}

func slicesSorted(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// readLatest reads a compacted topic from its start to its last stable offset and returns the
// latest value of each live key: of the first limit keys met (all when limit < 0), or of the
// keys keep accepts. Control records are kept so that a partition ending in a transaction
// marker is seen to end.
func readLatest(ctx context.Context, base []kgo.Opt, name string, limit int, keep func(string) bool) (map[string][]byte, error) {
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, base...),
		kgo.ConsumeTopics(name), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, name)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", name, err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	latest := map[string][]byte{}
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		if err := fs.Err0(); err != nil && !kgoRetriable(err) {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if r.Offset == end-1 {
				delete(left, r.Partition)
			}
			if r.Attrs.IsControl() {
				return
			}
			k := string(r.Key)
			_, known := latest[k]
			switch {
			case keep != nil && !keep(k):
			case r.Value == nil:
				delete(latest, k)
			case known || limit < 0 || len(latest) < limit:
				latest[k] = bytes.Clone(r.Value)
			}
		})
	}
	return latest, nil
}
