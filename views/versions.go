package views

import (
	"fmt"
	"slices"
	"time"
)

// VersionState is the lifecycle state of one version of a view, as recorded in the versions
// topic.
type VersionState string

// The states of a version. A first version starts serving; a rebuilt one starts rebuilding and
// ends serving, failed or rolled back; a replaced serving version is retired; every version but
// the serving one ends deleted (its stores, topics and group removed).
const (
	StateServing    VersionState = "serving"
	StateRebuilding VersionState = "rebuilding"
	StateFailed     VersionState = "failed"
	StateRolledBack VersionState = "rolled-back"
	StateRetired    VersionState = "retired"
	StateDeleted    VersionState = "deleted"
)

// keepDeleted bounds the deleted versions a record remembers: enough for an instance that was
// down during a deletion to drop its local copy, and to recognise an outdated binary.
const keepDeleted = 8

// versionsRecord is the value of one view's key in the versions topic: the whole truth about
// its versions, rewritten on every transition (the topic is compacted, last writer wins).
type versionsRecord struct {
	// Latest is the highest version number ever given out, so that numbers are never reused
	// even after their topics are deleted.
	Latest  int            `json:"latest"`
	Serving versionEntry   `json:"serving"`
	Rebuild *versionEntry  `json:"rebuild,omitempty"`
	Old     []versionEntry `json:"old,omitempty"`
	// Hold, while the shadow check runs, stops the serving and the rebuilding version at one
	// cut of their inputs (hold.go). Every transition of the versions ends it.
	Hold *shadowHold `json:"hold,omitempty"`
}

// versionEntry is one version of a view.
type versionEntry struct {
	Version     int          `json:"version"`
	Fingerprint string       `json:"fingerprint"`
	State       VersionState `json:"state"`
	// Reason says why a rebuild failed, was rolled back or superseded.
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since"`
	// DeleteAt is when the stores, topics and group of a version that no longer serves go.
	DeleteAt time.Time `json:"delete_at,omitzero"`
	// Shadow is, for a serving version that replaced another, the comparison made before.
	Shadow *ShadowReport `json:"shadow,omitempty"`
	// Served lets a binary without this version's definition answer queries from its store.
	Served *servedSpec `json:"served,omitempty"`
}

// due reports whether the version's data should be deleted at now.
func (v versionEntry) due(now time.Time) bool {
	return v.State != StateDeleted && v.State != StateServing && v.State != StateRebuilding &&
		!v.DeleteAt.IsZero() && !now.Before(v.DeleteAt)
}

func (r versionsRecord) clone() versionsRecord {
	c := r
	if r.Rebuild != nil {
		rb := *r.Rebuild
		c.Rebuild = &rb
	}
	c.Old = slices.Clone(r.Old)
	return c
}

// firstRecord is the record of a view seen for the first time: its definition serves at its
// declared version.
func firstRecord(fp string, declared int, now time.Time) versionsRecord {
	return versionsRecord{Latest: declared,
		Serving: versionEntry{Version: declared, Fingerprint: fp, State: StateServing, Since: now}}
}

// plan is what one instance runs of a view, decided from the record and its definition.
type plan struct {
	// serving is the version queries read; process is false when this binary does not have
	// its definition (the view is being rebuilt after a code change): its stores then answer
	// queries and it processes nothing.
	serving int
	process bool
	// rebuild is the version this instance rebuilds, 0 if none.
	rebuild int
	// start is true when the definition is new: a new version must be started.
	start bool
	// outdated is true when this binary's definition was replaced by a newer one: the
	// instance runs no version of the view.
	outdated bool
}

// decide maps a record and this binary's fingerprint to what this instance runs.
func decide(rec versionsRecord, fp string) plan {
	rb := rec.Rebuild
	switch {
	case rec.Serving.Fingerprint == fp:
		p := plan{serving: rec.Serving.Version, process: true}
		if rb != nil && rb.State == StateRebuilding && rb.Fingerprint == fp {
			p.rebuild = rb.Version
		}
		return p
	case rb != nil && rb.Fingerprint == fp:
		p := plan{serving: rec.Serving.Version}
		if rb.State == StateRebuilding {
			p.rebuild = rb.Version
		}
		return p
	case slices.ContainsFunc(rec.Old, func(o versionEntry) bool { return o.Fingerprint == fp }):
		return plan{outdated: true}
	default:
		return plan{serving: rec.Serving.Version, start: true}
	}
}

// startVersion gives out a new version of fp that rebuilds beside the serving one. A rebuild
// already recorded is superseded: it moves to the old versions, to be deleted after delay.
func startVersion(rec versionsRecord, fp string, declared int, now time.Time, delay time.Duration) (versionsRecord, int) {
	rec = rec.clone()
	if rb := rec.Rebuild; rb != nil {
		if rb.State == StateRebuilding {
			rb.State, rb.Reason, rb.Since, rb.DeleteAt = StateRetired, "superseded by a newer rebuild", now, now.Add(delay)
		}
		rec.Old = append(rec.Old, *rb)
	}
	n := max(rec.Latest+1, declared)
	rec.Latest, rec.Hold = n, nil
	rec.Rebuild = &versionEntry{Version: n, Fingerprint: fp, State: StateRebuilding, Since: now}
	return rec.trimmed(), n
}

// switchTo makes the rebuilding version serve; the replaced one is retired until delay ends.
func switchTo(rec versionsRecord, version int, shadow *ShadowReport, now time.Time, delay time.Duration) (versionsRecord, error) {
	if rec.Rebuild == nil || rec.Rebuild.Version != version || rec.Rebuild.State != StateRebuilding {
		return rec, fmt.Errorf("%w: version %d is not rebuilding", ErrNoRebuild, version)
	}
	rec = rec.clone()
	old := rec.Serving
	old.State, old.Since, old.DeleteAt = StateRetired, now, now.Add(delay)
	rec.Old = append(rec.Old, old)
	rec.Serving = *rec.Rebuild
	rec.Serving.State, rec.Serving.Since, rec.Serving.Shadow = StateServing, now, shadow
	rec.Rebuild, rec.Hold = nil, nil
	return rec.trimmed(), nil
}

// failVersion records that a rebuild failed; the serving version is untouched.
func failVersion(rec versionsRecord, version int, reason string, now time.Time, delay time.Duration) (versionsRecord, bool) {
	if rec.Rebuild == nil || rec.Rebuild.Version != version || rec.Rebuild.State != StateRebuilding {
		return rec, false
	}
	rec = rec.clone()
	rec.Rebuild.State, rec.Rebuild.Reason, rec.Rebuild.Since, rec.Rebuild.DeleteAt = StateFailed, reason, now, now.Add(delay)
	rec.Hold = nil
	return rec, true
}

// rollBack serves the version the serving one replaced again, if its data is not deleted yet;
// the version rolled back from is deleted after delay.
func rollBack(rec versionsRecord, now time.Time, delay time.Duration) (versionsRecord, error) {
	i := -1
	for j, o := range rec.Old {
		if o.State == StateRetired && (i < 0 || o.Version > rec.Old[i].Version) {
			i = j
		}
	}
	if i < 0 {
		return rec, fmt.Errorf("%w: no replaced version of the view is kept (deleted after Rebuild.DeleteAfter)", ErrNoRollback)
	}
	rec = rec.clone()
	back := rec.Old[i]
	rec.Old = slices.Delete(rec.Old, i, i+1)
	if rb := rec.Rebuild; rb != nil {
		if rb.State == StateRebuilding {
			rb.State, rb.Reason, rb.Since, rb.DeleteAt = StateRetired, "superseded by a rollback", now, now.Add(delay)
		}
		rec.Old = append(rec.Old, *rb)
	}
	from := rec.Serving
	from.State, from.Reason, from.Since, from.DeleteAt = StateRolledBack, "rolled back", now, now.Add(delay)
	rec.Rebuild = &from
	back.State, back.Since, back.DeleteAt = StateServing, now, time.Time{}
	rec.Serving, rec.Hold = back, nil
	return rec.trimmed(), nil
}

// markDeleted records that a version's stores, topics and group are gone.
func markDeleted(rec versionsRecord, version int, now time.Time) (versionsRecord, bool) {
	rec = rec.clone()
	mark := func(v *versionEntry) bool {
		if v.Version != version || v.State == StateDeleted || v.State == StateServing {
			return false
		}
		v.State, v.Since = StateDeleted, now
		return true
	}
	if rec.Rebuild != nil && mark(rec.Rebuild) {
		return rec, true
	}
	for i := range rec.Old {
		if mark(&rec.Old[i]) {
			return rec.trimmed(), true
		}
	}
	return rec, false
}

// trimmed forgets the oldest deleted versions beyond keepDeleted.
func (r versionsRecord) trimmed() versionsRecord {
	deleted := 0
	for _, o := range r.Old {
		if o.State == StateDeleted {
			deleted++
		}
	}
	out := r.Old[:0:0]
	for _, o := range r.Old {
		if o.State == StateDeleted && deleted > keepDeleted {
			deleted--
			continue
		}
		out = append(out, o)
	}
	r.Old = out
	return r
}

// entries lists every version the record knows, for deletions and pinned reads.
func (r versionsRecord) entries() []versionEntry {
	all := append([]versionEntry{r.Serving}, r.Old...)
	if r.Rebuild != nil {
		all = append(all, *r.Rebuild)
	}
	return all
}
