//go:build long

package app_test

import "testing"

// pythonTasks is how many tasks TestPythonWorker has the Python worker run.
const pythonTasks = 1000

// TestPythonWorkerAtScale is TestPythonWorker with 1,000 tasks, by a name
// of the long tier's own: .ci/run runs the long tier's tests by the names
// its files define, so without it the 1,000-task run would never run there.
func TestPythonWorkerAtScale(t *testing.T) { TestPythonWorker(t) }
