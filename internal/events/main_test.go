package events

import (
	"testing"

	"go.uber.org/goleak"
)

// Hold-back timers run their callbacks on goroutines of their own; every test
// must stop them (by closing its broker) before it returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
