//go:build long

package app_test

// pythonTasks is how many tasks TestPythonWorker has the Python worker run.
const pythonTasks = 1000
