// Command taskgraph serves the task engine: GraphQL at /query, workers and
// the watchdog in one process, on an embedded SQLite file unless --db names
// a PostgreSQL database. "taskgraph bench", "taskgraph bench-latency" and
// "taskgraph bench-import" measure throughput, latency and imports/exports;
// "taskgraph watch" prints a task's changes as they are committed;
// "taskgraph token" makes a bearer token and its token file line.
package main

import (
	"os"

	"taskgraph/app"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "bench":
			os.Exit(runBench(os.Args[2:]))
		case "bench-latency":
			os.Exit(runBenchLatency(os.Args[2:]))
		case "bench-import":
			os.Exit(runBenchImport(os.Args[2:]))
		case "watch":
			os.Exit(runWatch(os.Args[2:]))
		case "token":
			os.Exit(runToken(os.Args[2:], os.Stdout))
		}
	}
	os.Exit(app.Main(os.Args[1:], app.Options{}, os.Stderr))
}
