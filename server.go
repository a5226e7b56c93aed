// Command taskgraph serves the task engine: GraphQL at /query, workers and
// the watchdog in one process, on an embedded SQLite file unless --db names
// a PostgreSQL database. Its other commands are listed in commands below
// (and by taskgraph -h); this file only dispatches to them.
package main

import (
	"os"

	"taskgraph/app"
)

// command is a subcommand: run gets the arguments after its name and
// returns the exit code (app.ExitOK, app.ExitFailure, app.ExitUsage).
type command struct {
	name    string
	summary string
	run     func(args []string) int
}

var commands = []command{
	{"watch", "print a task's changes as they are committed, one JSON line each", runWatch},
	{"token", "make a bearer token and its token file line", func(args []string) int { return runToken(args, os.Stdout) }},
	{"bench", "measure throughput: tasks per second from PENDING to SUCCESS", helpIsNoError(runBench)},
	{"bench-latency", "measure the delay from a commit to its subscribers", helpIsNoError(runBenchLatency)},
	{"bench-import", "measure imports and exports: rows per second, peak memory", helpIsNoError(runBenchImport)},
}

// helpIsNoError makes "COMMAND -h" exit 0 for commands that answer any
// flag.Parse error, help included, with 2.
func helpIsNoError(run func([]string) int) func([]string) int {
	return func(args []string) int {
		code := run(args)
		if code == app.ExitUsage && len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			return app.ExitOK
		}
		return code
	}
}

func main() {
	list := make([]app.Command, len(commands))
	for i, c := range commands {
		list[i] = app.Command{Name: c.name, Summary: c.summary}
	}
	if len(os.Args) > 1 {
		for _, c := range commands {
			if os.Args[1] == c.name {
				os.Exit(c.run(os.Args[2:]))
			}
		}
		if os.Args[1] == "help" {
			os.Args[1] = "-h"
		}
	}
	os.Exit(app.Main(os.Args[1:], app.Options{Commands: list}, os.Stderr))
}
