// Package bench holds the benchmark commands `taskgraph bench` (the
// burn-down: tasks per second from PENDING to SUCCESS, and where the CPU
// went), `taskgraph bench-latency` (from a commit to its subscribers) and
// `taskgraph bench-import` (imports and exports: rows per second, peak
// memory). Each runs real nodes in this process on a fresh database and
// prints what it measured; server.go dispatches to Run, RunLatency and
// RunImport.
package bench
