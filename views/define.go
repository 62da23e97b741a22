package views

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tarnhq/tarn/internal/topic"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrDefinition is wrapped by every error [Define] returns; use errors.Is.
var ErrDefinition = errors.New("views: bad definition")

// Name is a view's name: one part of its topic names, so letters, digits, '_' and '-'.
type Name string

// View is a validated view definition: a graph of operators split into sub-topologies at
// repartition points. It is immutable after [Define] and safe to share between runtimes.
type View struct {
	name    Name
	version int
	subs    []*subtopology
	stores  []*storeSpec
	served  *storeSpec
	windows *Windows // of the served store, if windowed
	outputs []string
	copart  [][]topicRef
	desc    []string
	finger  string
	ext     viewExt // side inputs and processor steps (side.go)
}

// Name returns the view's name.
func (v *View) Name() Name { return v.name }

// Version returns the view's declared version (1 unless [Version] was given); the version the
// runtime runs is in [Info].Version.
func (v *View) Version() int { return v.version }

// Fingerprint returns a hex SHA-256 over the view's graph: operator kinds, step names, topics,
// codec names, window specs, aggregator names and version. Function bodies cannot be hashed, so
// a changed predicate with the same step names keeps the fingerprint: bump the version then.
func (v *View) Fingerprint() string { return v.finger }

// Graph returns the lines the fingerprint hashes, one per operator, for logs and tests.
func (v *View) Graph() []string { return append([]string(nil), v.desc...) }

// Windowed reports whether the view's queryable store is a windowed store.
func (v *View) Windowed() bool { return v.served != nil && v.served.windowed }

// Queryable reports whether the view has a queryable store (it may have only output topics).
func (v *View) Queryable() bool { return v.served != nil }

// Option changes how [Define] builds a view.
type Option interface{ apply(*View) }

type optionFunc func(*View)

func (f optionFunc) apply(v *View) { f(v) }

// Version sets the view's declared version (default 1): it is hashed into the fingerprint, so
// bumping it makes the runtime rebuild the view (as after any change of the graph), and it is
// the lowest data version the rebuilt view gets. See "Versions and rebuilds" in the package
// documentation.
func Version(n int) Option { return optionFunc(func(v *View) { v.version = n }) }

// Builder collects a view's operators while its build function runs. Problems found while
// building are collected and returned by [Define], so build functions need no error handling.
type Builder struct {
	view  *View
	errs  []error
	steps map[string]string
}

// Define builds and validates the view called name. build adds sources, operators and sinks to
// b. Every problem is returned at once, each naming the view and the step.
func Define(name string, build func(b *Builder), opts ...Option) (*View, error) {
	v := &View{name: Name(name), version: 1}
	for _, o := range opts {
		o.apply(v)
	}
	b := &Builder{view: v, steps: map[string]string{}}
	if err := topic.ValidateName("view", name); err != nil {
		b.fail("", "%v", err)
	}
	if v.version < 1 {
		b.fail("", "version %d must be at least 1", v.version)
	}
	if build == nil {
		b.fail("", "build function is nil")
	} else {
		build(b)
	}
	b.finish()
	if len(b.errs) > 0 {
		return nil, errors.Join(b.errs...)
	}
	sum := sha256.Sum256([]byte(strings.Join(v.desc, "\n")))
	v.finger = hex.EncodeToString(sum[:])
	return v, nil
}

// fail records a problem of the view being built.
func (b *Builder) fail(step, format string, args ...any) {
	where := fmt.Sprintf("view %q", b.view.name)
	if step != "" {
		where += fmt.Sprintf(" step %q", step)
	}
	b.errs = append(b.errs, fmt.Errorf("%w: %s: %s", ErrDefinition, where, fmt.Sprintf(format, args...)))
}

// step registers a step name of the given kind; names are unique within a view because stores
// and topics are named after them.
func (b *Builder) step(kind, name string) {
	if err := topic.ValidateName("step", name); err != nil {
		b.fail(name, "%s: %v", kind, err)
		return
	}
	if name == "meta" || strings.HasPrefix(name, "meta-") {
		b.fail(name, "%s: step names \"meta\" and \"meta-*\" are reserved for the runtime's stores", kind)
		return
	}
	if prev, ok := b.steps[name]; ok {
		b.fail(name, "%s: step name already used by a %s; step names must be unique in a view", kind, prev)
		return
	}
	b.steps[name] = kind
}

// describe appends one line to the graph description the fingerprint hashes.
func (b *Builder) describe(format string, args ...any) {
	b.view.desc = append(b.view.desc, fmt.Sprintf(format, args...))
}

func (b *Builder) finish() {
	v := b.view
	b.describe("view %s v%d", v.name, v.version)
	if v.served == nil && len(v.outputs) == 0 && len(b.errs) == 0 {
		b.fail("", "no sink: call Serve on a table or To on a stream or table")
	}
	for _, s := range v.subs {
		if len(s.sources) == 0 {
			b.fail("", "internal: sub-topology %d has no source", s.id)
		}
	}
}

// newSub starts a sub-topology: the operators between sources and repartition points.
func (b *Builder) newSub() *subtopology {
	s := &subtopology{id: len(b.view.subs), view: b.view}
	b.view.subs = append(b.view.subs, s)
	return s
}

// newStore declares a store of sub-topology s, named after its step.
func (b *Builder) newStore(s *subtopology, name string, windowed bool) *storeSpec {
	st := &storeSpec{name: name, windowed: windowed, sub: s, index: len(b.view.stores)}
	b.view.stores = append(b.view.stores, st)
	s.stores = append(s.stores, st)
	return st
}

// serve makes st the view's queryable store.
func (b *Builder) serve(step string, st *storeSpec) {
	if b.view.served != nil {
		b.fail(step, "Serve called twice; a view has one queryable store (already %q)", b.view.served.name)
		return
	}
	b.view.served = st
	b.describe("serve %s", st.name)
}

// Input is a stream or table, for operators that name their inputs, such as
// [Builder.RequireCoPartitioned].
type Input interface{ sourceTopics() []topicRef }

// RequireCoPartitioned declares that inputs must be co-partitioned: their source topics must
// have the same partition count (all use Kafka's murmur2 partitioner). The runtime checks it at
// start with [CheckCoPartitioned] and refuses to start otherwise. Join operators call it.
func (b *Builder) RequireCoPartitioned(inputs ...Input) {
	var refs []topicRef
	for _, in := range inputs {
		refs = append(refs, in.sourceTopics()...)
	}
	if len(refs) > 1 {
		b.view.copart = append(b.view.copart, refs)
		b.describe("copartition %d topics", len(refs))
	}
}

// topicRef names a topic whose full name depends on the runtime's app id.
type topicRef struct {
	literal     string // a user topic, used as is
	cdcSchema   string // with cdcTable: a CDC table topic
	cdcTable    string
	repartition string // a repartition step of this view
}

func (t topicRef) resolve(app string, v *View) string {
	switch {
	case t.repartition != "":
		return topic.Repartition(app, string(v.name), v.version, t.repartition)
	case t.cdcTable != "":
		return topic.CDCTable(app, t.cdcSchema, t.cdcTable)
	default:
		return t.literal
	}
}

func (t topicRef) String() string {
	switch {
	case t.repartition != "":
		return "repartition:" + t.repartition
	case t.cdcTable != "":
		return "cdc:" + t.cdcSchema + "." + t.cdcTable
	default:
		return "topic:" + t.literal
	}
}

// subtopology is the part of a view's graph that runs as one task per input partition.
type subtopology struct {
	id      int
	view    *View
	sources []*sourceNode
	stores  []*storeSpec
}

// sourceNode feeds one topic's records into a sub-topology.
type sourceNode struct {
	step   string
	topic  topicRef
	handle func(t *task, r *kgo.Record) error
}

// storeSpec declares one store of a view; each task of its sub-topology has a partition of it.
type storeSpec struct {
	name     string
	windowed bool
	sub      *subtopology
	index    int
	// Windowed stores only: a window starting at s is dropped once the watermark passes
	// s + span + grace + retention.
	span, grace, retention time.Duration
}
