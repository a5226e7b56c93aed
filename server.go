// Command taskgraph serves the task engine: GraphQL at /query, workers and
// the watchdog in one process, on an embedded SQLite file unless --db names
// a PostgreSQL database. Its other commands (the client, internal/cli; the
// schema's migrations, internal/migratecmd; the benches, internal/bench) are
// listed in commands below and by taskgraph -h; this file only dispatches
// to them.
package main

import (
	"os"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/bench"
	"github.com/taskgraph/taskgraph/internal/cli"
	"github.com/taskgraph/taskgraph/internal/migratecmd"
)

// command is a subcommand: run gets the arguments after its name and
// returns the exit code (0 ok, 1 failure, 2 usage; see package cli).
type command struct {
	name    string
	summary string
	run     func(args []string) int
}

var commands = func() []command {
	var cs []command
	for _, c := range cli.Commands {
		cs = append(cs, command{c.Name, c.Summary, func(args []string) int {
			env, stop := cli.OSEnv()
			defer stop()
			return c.Run(env, args)
		}})
	}
	return append(cs,
		command{"migrate", migratecmd.Summary, func(args []string) int {
			return migratecmd.Run(args, os.Stdout, os.Stderr, os.Getenv)
		}},
		command{"bench", "measure throughput: tasks per second from PENDING to SUCCESS", helpIsNoError(bench.Run)},
		command{"bench-latency", "measure the delay from a commit to its subscribers", helpIsNoError(bench.RunLatency)},
		command{"bench-import", "measure imports and exports: rows per second, peak memory", helpIsNoError(bench.RunImport)},
		command{"bench-history", "measure a long history: list pages, counts, the claim, the watchdog and the purge over N finished tasks", helpIsNoError(bench.RunHistory)},
	)
}()

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
	app.TuneGC()
	list := make([]app.Command, len(commands))
	for i, c := range commands {
		list[i] = app.Command{Name: c.name, Summary: c.summary}
	}
	// The client's flags may come before its command's name too.
	os.Args = append(os.Args[:1], cli.Hoist(os.Args[1:])...)
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
