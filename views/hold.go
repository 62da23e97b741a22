package views

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// shadowHold asks every instance to stop both versions of a view at one cut of their source
// partitions, so that the shadow check compares them at the same input position. It travels
// in the view's versions record (every instance follows it) rather than from engine to
// engine, because the partitions of both versions are spread over instances that share
// nothing but Kafka.
//
// Holding, rather than reading each version's changelog "as of" an offset, is what makes the
// comparison exact for views with a repartition step: downstream of a repartition a store
// mixes the records of every source partition in the order they reached the repartition
// topic, so no changelog offset of it corresponds to a cut of source offsets, and compaction
// removes the history such a reading would need anyway. Held at a cut, each version drains
// its repartition topics and its stores then hold exactly the effects of the input below it.
type shadowHold struct {
	Old int `json:"old"`
	New int `json:"new"`
	// Cut is, per source topic and partition, the offset of the first record neither version
	// may process; records from it on wait in the topic until the hold ends. A partition
	// missing from it is held where the engine first sees the hold.
	Cut offsets `json:"cut"`
	// Until ends the hold by itself (each instance's clock), so that a coordinator that died
	// or hung never stops ingest for longer.
	Until time.Time `json:"until"`
}

// active reports whether the hold still applies at now.
func (h *shadowHold) active(now time.Time) bool { return h != nil && now.Before(h.Until) }

// limit is the offset from which the source partition is held.
func (h *shadowHold) limit(t string, p int32) (int64, bool) {
	o, ok := h.Cut[t][p]
	return o, ok
}

// setHold gives the engine the view's current hold (nil: none) and wakes its loop, which
// applies it between batches: a batch already polled is finished, later records are held.
func (e *engine) setHold(h *shadowHold) {
	if e.frozen {
		return // processes nothing, so it is at its position already
	}
	if old := e.hold.Swap(h); old == h {
		return
	}
	e.wakeLoop()
	if h != nil {
		// Wakes the loop when the hold ends by itself, even if no record comes.
		time.AfterFunc(time.Until(h.Until)+10*time.Millisecond, e.wakeLoop)
	}
}

func (e *engine) wakeLoop() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// holding reports whether a hold stops this engine's sources now (the stall watchdog then
// does not count the records waiting behind it).
func (e *engine) holding() bool { return e.hold.Load().active(e.rt.cfg.Now()) }

// releaseHeld resumes the source partitions the engine paused for a hold that ended, and
// those whose cut was raised above where they wait. Loop goroutine only, before each poll.
func (e *engine) releaseHeld(cl *kgo.Client) {
	if len(e.held) == 0 {
		return
	}
	h := e.hold.Load()
	if !h.active(e.rt.cfg.Now()) {
		h = nil
	}
	resume := map[string][]int32{}
	restart := map[string]map[int32]kgo.EpochOffset{}
	for t, ps := range e.held {
		for p, at := range ps {
			if h != nil {
				if cut, ok := h.limit(t, p); !ok || cut <= at.Offset {
					continue
				}
			}
			resume[t] = append(resume[t], p)
			if restart[t] == nil {
				restart[t] = map[int32]kgo.EpochOffset{}
			}
			restart[t][p] = at
			delete(ps, p)
		}
		if len(ps) == 0 {
			delete(e.held, t)
		}
	}
	if len(resume) > 0 {
		cl.ResumeFetchPartitions(resume)
		// Setting the same offset with the record's epoch (the rewind set none) restarts the
		// client's fetch session: resuming alone waits for the fetch in flight, a long poll
		// of up to FetchMaxWait (5s) on the partitions that were not held.
		cl.SetOffsets(restart)
	}
}

// resumeHeld resumes every partition paused for a hold, after an aborted transaction rewound
// the inputs to their committed offsets: the records between those and the cut must be
// fetched again, and holdBack pauses the partitions once more when they reach it.
func (e *engine) resumeHeld(cl *kgo.Client) {
	resume := map[string][]int32{}
	for t, ps := range e.held {
		for p := range ps {
			resume[t] = append(resume[t], p)
		}
	}
	e.held = nil
	if len(resume) > 0 {
		cl.ResumeFetchPartitions(resume)
	}
}

// holdBack removes from a poll the source records at or past the hold's cut, rewinds their
// partitions to the first of them and pauses them. Nothing is lost or repeated: SetOffsets
// moves the client's uncommitted offset back too, so that neither an at-least-once commit
// nor an exactly-once transaction covers a held record, and fetching resumes from it when
// the hold ends. Repartition topics are never held: the versions drain them up to the cut.
// Loop goroutine only, between the poll and the batch.
func (e *engine) holdBack(cl *kgo.Client, fs kgo.Fetches) {
	h := e.hold.Load()
	if !h.active(e.rt.cfg.Now()) {
		return
	}
	rewind := map[string]map[int32]kgo.EpochOffset{}
	pause := map[string][]int32{}
	for i := range fs {
		for j := range fs[i].Topics {
			ft := &fs[i].Topics[j]
			if src := e.bySource[ft.Topic]; src == nil || src.topic.repartition != "" {
				continue
			}
			for k := range ft.Partitions {
				fp := &ft.Partitions[k]
				if len(fp.Records) == 0 {
					continue
				}
				cut, ok := h.limit(ft.Topic, fp.Partition)
				if !ok {
					cut = fp.Records[0].Offset
				}
				n := len(fp.Records)
				for n > 0 && fp.Records[n-1].Offset >= cut {
					n--
				}
				if n == len(fp.Records) {
					continue
				}
				first := fp.Records[n]
				at := kgo.EpochOffset{Epoch: first.LeaderEpoch, Offset: first.Offset}
				fp.Records = fp.Records[:n]
				if rewind[ft.Topic] == nil {
					rewind[ft.Topic] = map[int32]kgo.EpochOffset{}
				}
				rewind[ft.Topic][fp.Partition] = kgo.EpochOffset{Epoch: -1, Offset: at.Offset}
				pause[ft.Topic] = append(pause[ft.Topic], fp.Partition)
				if e.held == nil {
					e.held = map[string]map[int32]kgo.EpochOffset{}
				}
				if e.held[ft.Topic] == nil {
					e.held[ft.Topic] = map[int32]kgo.EpochOffset{}
				}
				e.held[ft.Topic][fp.Partition] = at
			}
		}
	}
	if len(rewind) > 0 {
		cl.PauseFetchPartitions(pause)
		cl.SetOffsets(rewind)
	}
}
