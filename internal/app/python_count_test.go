//go:build !long

package app_test

// pythonTasks is how many tasks TestPythonWorker has the Python worker run
// (1,000 in the long tier: python_count_long_test.go).
const pythonTasks = 100
