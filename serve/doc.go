// Package serve owns the HTTP query API (chi): point reads, range and prefix scans, windowed
// reads, live watches, routing of a key to the instance that owns its partition, and the
// operational endpoints /healthz, /readyz and /metrics. openapi.yaml (embedded, served at
// /v1/openapi.yaml) documents every route.
//
// The views runtime supplies the data through [Backend] and [View]; serve knows nothing else
// about it. Values are JSON already and go out as they are. Package servetest checks that a
// backend keeps the contract of those interfaces.
//
// # Invariants
//
//   - Every answer about a view carries the [Position] its data reflects, in the Tarn-Position
//     header and in the body, so that a client can wait for its own writes (min_offsets=,
//     min_lsn=) and resume live streams. Its LSN, when set, is one up to which the view has
//     applied every write of the CDC source; positions of disjoint partition sets combine
//     with [Position.Join], which keeps the smaller.
//   - A min_offsets= topic is checked against the view's inputs ([InputWaiter]) before
//     anything waits: a topic it does not read is a 400, never a wait that cannot end.
//   - A live stream misses nothing and repeats nothing across reconnects: each event's id is the
//     stream's position just after it, per partition, and [View.Subscribe] replays from such a
//     position. Progress events are sent only after every change below their position has been
//     sent (see [View.Subscribe] for the ordering the backend keeps).
//   - A slow watcher never slows the view: its buffer ([Config.WatchBuffer]) is bounded, a push
//     into a full buffer fails at once, and the stream then ends with an overflow event that
//     holds the position to resume from; no change after a dropped one is ever sent.
//   - A read never comes from a restoring partition: it waits for the restore up to
//     [Config.MoveWait], then gets 503 with Retry-After ([ErrRestoring]).
//   - A request is forwarded to another instance at most once (the Tarn-Forwarded header), so
//     instances that briefly disagree about ownership cannot bounce it between them.
//   - Errors are RFC 9457 [Problem] bodies; internal errors and panics are logged and answered
//     with a bare 500 that shows nothing of them.
package serve
