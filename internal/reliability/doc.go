// Package reliability scripts outages against whole taskgraph nodes and
// checks that nothing is lost: PostgreSQL restarted mid-run and its backend
// connections terminated (on a throwaway cluster the tests start
// themselves, never the shared server), the disk of a SQLite node filling
// up (a size-limited tmpfs), and SIGTERM with subscribers connected. Each
// test asserts that every task ends in one state, that no task ran twice at
// the same time, that every watcher — over websockets and SSE — saw every
// task's final state without a duplicate, and that clients were told what
// happened in typed errors. It holds tests only, in the long tier (the
// build tag long): `go test -race -tags long ./reliability/` runs them, and
// so does CI's long step.
package reliability
