package views

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tarnhq/tarn/internal/topic"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ShadowReport is the comparison of a new version's results with the serving version's, made
// before the switch, so that an operator sees the effect of a change. After a code change the
// old version stopped processing when the rebuild began, so keys that moved since differ too.
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
	// Err says why the check could not finish (the switch goes ahead regardless).
	Err string `json:"error,omitempty"`
}

// shadowTimeout bounds the reading of the two changelogs.
const shadowTimeout = 2 * time.Minute

// shadowCheck compares the latest values of the served store's changelogs of the old and the
// new version: the changelogs hold every partition, so one instance can compare them all.
func (vr *viewRun) shadowCheck(ctx context.Context, old versionEntry, newVersion int, newStore string) *ShadowReport {
	rep := &ShadowReport{At: vr.rt.cfg.Now(), Old: old.Version, New: newVersion}
	if old.Served == nil {
		rep.Err = "the serving version has no queryable store"
		return rep
	}
	ctx, cancel := context.WithTimeout(ctx, shadowTimeout)
	defer cancel()
	app, name := vr.rt.cfg.App, string(vr.v.name)
	limit := vr.rt.cfg.Rebuild.ShadowKeys
	newest, err := readLatest(ctx, vr.rt.base, topic.Changelog(app, name, newVersion, newStore), limit, nil)
	if err != nil {
		rep.Err = err.Error()
		return rep
	}
	oldest, err := readLatest(ctx, vr.rt.base, topic.Changelog(app, name, old.Version, old.Served.Store), -1,
		func(k string) bool { _, ok := newest[k]; return ok })
	if err != nil {
		rep.Err = err.Error()
		return rep
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
	return rep
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
