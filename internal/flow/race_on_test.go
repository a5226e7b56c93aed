//go:build race

package flow_test

// raceEnabled: the race detector slows the SQLite engine (pure Go, every
// memory access instrumented) some forty times.
const raceEnabled = true
