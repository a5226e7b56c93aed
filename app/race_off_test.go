//go:build !race

package app_test

// raceEnabled: the tests run under the race detector (slower).
const raceEnabled = false
