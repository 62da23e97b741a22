package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Backend is what serve needs from the views runtime: the views this instance knows and whether
// its stores are ready. internal/servebackend adapts the runtime to it; serve's tests use a
// Pebble-backed fake. Both pass the conformance suite of serve/servetest, which holds the
// behaviours this interface and [View] document.
type Backend interface {
	// Views lists every view this instance knows, in name order.
	Views() []ViewInfo
	// View returns the named view, or an error wrapping ErrUnknownView.
	View(name string) (View, error)
	// Ready returns nil when every store assigned to this instance has restored, else an error
	// that says what is still restoring or failing (shown by /readyz).
	Ready() error
}

// View is one served view. Every method is safe for concurrent use.
type View interface {
	// Info describes the view as this instance sees it.
	Info() ViewInfo
	// Partition returns the partition that holds key (the views runtime partitions with
	// internal/partition.For over its partition count).
	Partition(key []byte) int32
	// Owner tells which instance owns partition p and whether that partition is restoring.
	Owner(p int32) Owner
	// Position is what the view has applied on this instance's partitions.
	Position() Position
	// WaitFor blocks until Position().Reached(target) on the partitions of target that this
	// instance owns, or until ctx ends (then it returns ctx.Err()).
	WaitFor(ctx context.Context, target Position) error
	// Get reads one key from a snapshot of its partition's store. A missing key is not an
	// error: Read.Found is false. It returns ErrRestoring while the partition restores and a
	// *NotOwnerError when the partition is owned elsewhere.
	Get(ctx context.Context, key []byte) (Read, error)
	// Scan returns up to req.Limit entries with req.Start <= key < req.End (a nil End is
	// unbounded) from req.Partitions, all of them local, in key order, read from one
	// consistent snapshot; Position is the snapshot's. Errors as for Get.
	Scan(ctx context.Context, req ScanRequest) (ScanResult, error)
	// Windows returns the windows of key that overlap [from, to), in window start order, for a
	// windowed view (ErrNotWindowed otherwise). Errors as for Get.
	Windows(ctx context.Context, key []byte, from, to time.Time) ([]Window, Position, error)
	// Subscribe calls fn with every change of the view (or of req.Key only, when req.HasKey)
	// on req.Partitions (all local): first those recorded after req.After, then live ones as
	// they are applied, in offset order per partition, each exactly once. It returns the
	// position the subscription starts from (req.After where given, else the current position)
	// and a cancel function.
	//
	// fn must be called for a change before Position reflects that change, so that a reader
	// who sees position P has already been handed every change below P. fn never blocks
	// (serve buffers) and returns false to end the subscription. fn may be called from several
	// goroutines, one per partition. ErrTooOld reports that changes after req.After are no
	// longer retained.
	Subscribe(req SubscribeRequest, fn func(Change) bool) (start Position, cancel func(), err error)
}

// InputWaiter is implemented by views that can wait for records on the Kafka topics they read,
// which is what min_offsets=topic:partition:offset asks for: a producer's write, named as
// its acknowledgement gave it. For a view that does not implement it every topic is unknown
// (a 400).
type InputWaiter interface {
	// Inputs lists the Kafka topics the view reads its records from (any step of it, also
	// those before a repartition), in name order.
	Inputs() []string
	// WaitInputs blocks until the view has applied every record below next, on every step
	// from the input topics to the store it serves, or until ctx ends (then it returns
	// ctx.Err()). Every topic of next is one of Inputs.
	WaitInputs(ctx context.Context, next InputOffsets) error
}

// Rebuilder is implemented by views that can be rebuilt by reprocessing their inputs
// (POST /v1/views/{view}/rebuild); a view that does not implement it answers 501.
type Rebuilder interface {
	// Rebuild starts a new version of the view that reprocesses its inputs while the current
	// one keeps serving, and returns the new version number.
	Rebuild(ctx context.Context) (version int, err error)
}

// State is the lifecycle state of a view on this instance.
type State string

// The states a view reports in [ViewInfo].
const (
	StateRestoring  State = "restoring"
	StateRunning    State = "running"
	StateRebuilding State = "rebuilding"
	// StateFailing: the view cannot be kept fresh here: it retries after a failure (Kafka
	// unreachable, a failed transaction) or its input (the CDC source) fails or waits to
	// retry; ViewInfo.Problem says why.
	StateFailing State = "failing"
)

// ViewInfo describes one view for GET /v1/views.
type ViewInfo struct {
	Name       string `json:"name"`
	Version    int    `json:"version"`
	State      State  `json:"state"`
	Windowed   bool   `json:"windowed"`
	Partitions int32  `json:"partitions"`
	// Owned lists the partitions owned by this instance, ascending.
	Owned []int32 `json:"owned"`
	// Lag is the number of input records not yet applied on the owned partitions.
	Lag      int64    `json:"lag"`
	Position Position `json:"position"`
	// Rebuild describes a new version being built beside this one; nil when none is.
	Rebuild *RebuildProgress `json:"rebuild,omitempty"`
	// Problem says why the view does not run here (e.g. an outdated definition) or, in
	// StateFailing, why it cannot be kept fresh; "" if none.
	Problem string `json:"problem,omitempty"`
	// FailingSince is when the view started failing (state failing); nil otherwise.
	FailingSince *time.Time `json:"failing_since,omitempty"`
}

// RebuildProgress is the progress of a view's rebuild as GET /v1/views reports it.
type RebuildProgress struct {
	Version int    `json:"version"`
	State   string `json:"state"`
	Reason  string `json:"reason,omitempty"`
	// Records is how many input records this instance processed for the new version.
	Records int64 `json:"records"`
	// Lag is the records the new version still has to process, over all instances.
	Lag int64 `json:"lag"`
	// Rate is how fast Lag shrinks (records/s); ETASeconds the time left at that rate, -1 when
	// unknown.
	Rate       float64 `json:"rate"`
	ETASeconds float64 `json:"eta_seconds"`
	// ShadowDiffer and ShadowKeys give the shadow check: how many of the compared keys differ
	// between the versions (set once the check ran).
	ShadowKeys   int `json:"shadow_keys,omitempty"`
	ShadowDiffer int `json:"shadow_differ,omitempty"`
	// ShadowCut is the input position the versions were compared at: per source topic and
	// partition, the offset of the first record neither had processed. Absent when they were
	// compared where they stood (after a code change, or when ShadowError says why).
	ShadowCut   map[string]map[int32]int64 `json:"shadow_cut,omitempty"`
	ShadowError string                     `json:"shadow_error,omitempty"`
}

// Owner says where a partition lives.
type Owner struct {
	// Local is true when this instance owns the partition.
	Local bool
	// Addr is the base URL (scheme://host:port) of the owning instance's HTTP API, as
	// advertised in its group membership; empty while the partition is unassigned.
	Addr string
	// Restoring is true while the owner restores the partition's stores.
	Restoring bool
}

// Read is the result of a point read.
type Read struct {
	Found bool
	// Value is the JSON value; nil when not found.
	Value json.RawMessage
	// Position is that of the snapshot the read came from.
	Position Position
}

// ScanRequest asks for a key range of some partitions.
type ScanRequest struct {
	Partitions []int32
	Start, End []byte
	Limit      int
	// Version is the version of the view to read (a scan pins one for all its pages); 0 reads
	// the serving one. A version no longer kept fails with ErrNoVersion.
	Version int
}

// Entry is one key and its JSON value.
type Entry struct {
	Key   []byte
	Value json.RawMessage
}

// ScanResult is the answer to a [ScanRequest].
type ScanResult struct {
	Entries  []Entry
	Position Position
	// More is true when entries beyond the last one exist in the range.
	More bool
	// Version is the version of the view the entries come from; 0 when no partition was read.
	Version int
}

// Window is one window of a windowed view's key.
type Window struct {
	Start time.Time       `json:"start"`
	End   time.Time       `json:"end"`
	Value json.RawMessage `json:"value"`
}

// SubscribeRequest selects the changes a subscription receives.
type SubscribeRequest struct {
	Partitions []int32
	HasKey     bool
	Key        []byte
	// After is where to resume: changes at offsets >= After.Offsets[p] are delivered. A
	// partition absent from After (or a zero After) starts at the current position.
	After Position
	// Ended, when set, is called once if the backend ends the subscription by itself, with
	// why: ErrSwitched (the view now serves another version), ErrMoved (a partition went to
	// another instance), ErrStopping (this instance stops) or another error. serve then
	// sends an end event with the reason and the position to resume from. It is not called
	// after the cancel function Subscribe returned.
	Ended func(reason error)
}

// Change is one applied change of a view.
type Change struct {
	Partition int32
	// Offset is the input offset of the change; after it the partition's position is Offset+1.
	Offset int64
	Key    []byte
	// Value is the new JSON value; nil means the key was deleted.
	Value json.RawMessage
	// LSN is the Postgres LSN the change came from, for CDC-fed views (0 otherwise).
	LSN LSN
}

// Errors a Backend returns; serve maps them to HTTP statuses. Test with errors.Is.
var (
	ErrUnknownView = errors.New("serve: unknown view")
	ErrRestoring   = errors.New("serve: partition is restoring")
	ErrNotWindowed = errors.New("serve: view is not windowed")
	ErrWindowed    = errors.New("serve: view is windowed")
	ErrNoVersion   = errors.New("serve: view version is not available")
	ErrTooOld      = errors.New("serve: position is older than the retained changes")
	// ErrNotCDC is what WaitFor returns for a position with an LSN on a view that reads no
	// Postgres table as an input (co-tables aside): no LSN can tell whether it applied a
	// write, so min_lsn is refused.
	ErrNotCDC = errors.New("serve: view reads no Postgres table")
	// ErrSwitched, ErrMoved and ErrStopping are why a backend ends a subscription (see
	// SubscribeRequest.Ended).
	ErrSwitched = errors.New("serve: the view switched to another version")
	ErrMoved    = errors.New("serve: a partition moved to another instance")
	ErrStopping = errors.New("serve: the instance is stopping")
)

// NotOwnerError says that another instance owns the partition asked for; serve then routes the
// request there. Test with errors.As.
type NotOwnerError struct {
	Partition int32
	// Addr is the owner's base URL, empty when the partition is unassigned.
	Addr string
}

func (e *NotOwnerError) Error() string {
	if e.Addr == "" {
		return fmt.Sprintf("serve: partition %d is not assigned to any instance", e.Partition)
	}
	return fmt.Sprintf("serve: partition %d is owned by %s", e.Partition, e.Addr)
}
