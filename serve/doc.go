// Package serve owns the HTTP query API (chi): point reads, range and prefix scans, windowed
// reads, live watches, routing of a key to the instance that owns its partition, and the
// operational endpoints /healthz, /readyz and /metrics.
package serve
