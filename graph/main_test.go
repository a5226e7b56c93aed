package graph_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Subscriptions end with their client: no goroutine may outlive a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
