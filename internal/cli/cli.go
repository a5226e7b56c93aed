// Package cli is taskgraph's command line for people and scripts: tasks
// (create, get, list, cancel, retry, watch, logs), imports, exports,
// downloads and tokens, on the server's GraphQL API through a client
// genqlient generates from the schema and operations.graphql.
//
// People get tables and a live progress bar on a terminal; scripts get
// --json (one JSON document per line) and exit codes to branch on:
// 0 done (SUCCESS), 1 failure, 2 usage error, 3 the task FAILED, 4 the
// task was CANCELLED.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/mattn/go-isatty"
)

// Exit codes of every command.
const (
	ExitOK        = 0 // done; the task (watched or waited for) succeeded
	ExitFailure   = 1 // something went wrong: the server said no, or could not be reached
	ExitUsage     = 2 // the command line is wrong
	ExitFailed    = 3 // the task ended FAILED
	ExitCancelled = 4 // the task ended CANCELLED
	ExitReview    = 5 // the task waits for a person's review (REVIEW_PENDING)
)

// Env is what a command runs with: its streams and environment.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	// Terminal reports whether Stdout (and Stderr) is a terminal: then
	// progress is a live bar, otherwise plain lines.
	Terminal bool
	// Ctx ends with an interrupt (Ctrl-C).
	Ctx context.Context
	// Dir is where relative paths are (default: the working directory).
	Dir string
}

// path resolves a path given on the command line.
func (e *Env) path(p string) string {
	if e.Dir == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(e.Dir, p)
}

// OSEnv is the process's own environment; stop releases the interrupt
// handler.
func OSEnv() (env *Env, stop func()) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	return &Env{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, Ctx: ctx,
		Terminal: isatty.IsTerminal(os.Stdout.Fd()) && isatty.IsTerminal(os.Stderr.Fd()),
	}, stop
}

// Command is one of the binary's commands.
type Command struct {
	Name    string
	Summary string
	Run     func(env *Env, args []string) int
}

// Commands are the commands of this package, for the binary's dispatcher.
var Commands = []Command{
	{"task", "create, get, list, cancel, retry, watch tasks and read their logs (taskgraph task -h)", runTask},
	{"import", "upload a spreadsheet (xlsx or CSV) into an import target, and follow it", runImport},
	{"export", "export contacts, tasks or the audit trail to xlsx or CSV, and download the file", runExport},
	{"download", "download a task's file (error report, export, report, source)", runDownload},
	{"watch", "print a task's changes as they are committed (like task watch)", runWatch},
	{"token", "make a bearer token and its token file line", runToken},
	{"schedule", "list, create, pause, resume, delete schedules (taskgraph schedule -h)", runSchedule},
	{"node", "list the cluster's nodes, drain one (taskgraph node -h)", runNode},
	{"bulk", "cancel or retry every task a filter matches, after a preview (taskgraph bulk -h)", runBulk},
	{"alert", "alert rules and channels: list, create, delete (taskgraph alert -h)", runAlert},
	{"type", "task types' flow control: list, pause, resume, cap, rate (taskgraph type -h)", runType},
}

// usageError is a wrong command line: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// exitError ends a command with a code and, unless empty, a message.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// cmd is one run of a command: its name, flags, common options and env.
type cmd struct {
	name  string // "task get"
	args  string // "ID" in the usage line
	about string
	env   *Env
	fs    *flag.FlagSet

	server, token string
	json, quiet   bool
}

// newCmd declares the flags every command has: --server, --token and
// --json (their environment twins are TASKGRAPH_SERVER and
// TASKGRAPH_TOKEN).
func newCmd(env *Env, name, args, about string) *cmd {
	c := &cmd{name: name, args: args, about: about, env: env, fs: flag.NewFlagSet("taskgraph "+name, flag.ContinueOnError)}
	c.fs.SetOutput(io.Discard)
	c.fs.Usage = func() {}
	server := env.Getenv("TASKGRAPH_SERVER")
	if server == "" {
		server = "http://127.0.0.1:8080"
	}
	c.fs.StringVar(&c.server, "server", server, "the taskgraph server [$TASKGRAPH_SERVER]")
	c.fs.StringVar(&c.token, "token", env.Getenv("TASKGRAPH_TOKEN"), "bearer token, when the server requires one [$TASKGRAPH_TOKEN]")
	c.fs.BoolVar(&c.json, "json", false, "print JSON (one document per line) instead of tables")
	c.fs.BoolVar(&c.quiet, "q", false, "quiet: print only the task ids (for scripts: ID=$(taskgraph task create noop -q))")
	return c
}

// parse reads the flags, which may come before, between or after the
// positional arguments, and checks how many of those there are.
func (c *cmd) parse(args []string, minPos, maxPos int) ([]string, error) {
	var pos []string
	for {
		if err := c.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			msg := err.Error()
			if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
				msg = "--" + strings.TrimLeft(name, "-") + ": no such flag"
			}
			return nil, &usageError{msg}
		}
		args = c.fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	switch {
	case len(pos) < minPos:
		return nil, usageErrorf("missing %s", c.args)
	case maxPos >= 0 && len(pos) > maxPos:
		return nil, usageErrorf("unexpected argument %q", pos[maxPos])
	}
	return pos, nil
}

// client connects to --server with --token.
func (c *cmd) client() (*client, error) { return newClient(c.server, c.token) }

// usage prints the command's usage and flags to w.
func (c *cmd) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: taskgraph %s %s[flags]\n\n%s\n\nFlags:\n", c.name, strings.TrimSuffix(c.args+" ", " ")+" ", c.about)
	c.fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		head := "  --" + f.Name
		if typ != "" {
			head += " " + typ
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.Name != "token" {
			def = " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(w, "%s\n      %s%s\n", head, usage, def)
	})
	fmt.Fprint(w, "\nExit codes: 0 done (the task succeeded), 1 failure, 2 usage error, 3 the task FAILED, 4 the task was CANCELLED.\n")
}

// finish turns what a command returned into its exit code, printing the
// usage for -h and a line on stderr for an error.
func (c *cmd) finish(err error) int {
	var ue *usageError
	var ee *exitError
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		c.usage(c.env.Stdout)
		return ExitOK
	case errors.As(err, &ue):
		fmt.Fprintf(c.env.Stderr, "taskgraph %s: %s\ntaskgraph %s -h shows its usage.\n", c.name, ue.msg, c.name)
		return ExitUsage
	case errors.As(err, &ee):
		if ee.msg != "" {
			fmt.Fprintf(c.env.Stderr, "taskgraph %s: %s\n", c.name, ee.msg)
		}
		return ee.code
	case errors.Is(err, context.Canceled) && c.env.Ctx.Err() != nil:
		return ExitFailure // interrupted
	default:
		fmt.Fprintf(c.env.Stderr, "taskgraph %s: %s\n", c.name, explain(err))
		return ExitFailure
	}
}

// Main runs the command named by args[0] (for tests and embedders; the
// binary dispatches through Commands).
func Main(env *Env, args []string) int {
	args = Hoist(args)
	if len(args) > 0 {
		for _, c := range Commands {
			if c.Name == args[0] {
				return c.Run(env, args[1:])
			}
		}
	}
	fmt.Fprintf(env.Stderr, "taskgraph: unknown command %q\n", strings.Join(args, " "))
	return ExitUsage
}

// leadingGlobals splits off the client flags every command has (--server,
// --token, --json, -q) written before a command's name.
func leadingGlobals(args []string) (globals, rest []string) {
	for len(args) > 0 {
		a := args[0]
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			break
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		n := 0
		switch name {
		case "server", "token":
			n = 2
			if hasValue {
				n = 1
			}
		case "json", "q":
			n = 1
		}
		if n == 0 || n > len(args) {
			break
		}
		globals = append(globals, args[:n]...)
		args = args[n:]
	}
	return globals, args
}

// Hoist moves the client flags written before a command's name
// (taskgraph --server URL task create noop) after it, where the command
// reads them; args without such flags, or not naming a command of this
// package after them, are returned as they are.
func Hoist(args []string) []string {
	globals, rest := leadingGlobals(args)
	if len(globals) == 0 || len(rest) == 0 || !isCommand(rest[0]) {
		return args
	}
	return afterCommand(rest, globals)
}

// afterCommand puts globals after rest's command and sub-command words,
// before any "--".
func afterCommand(rest, globals []string) []string {
	out := make([]string, 0, len(rest)+len(globals))
	end := len(rest)
	for i, a := range rest {
		if a == "--" {
			end = i
			break
		}
	}
	out = append(out, rest[:end]...)
	out = append(out, globals...)
	return append(out, rest[end:]...)
}

func isCommand(name string) bool {
	for _, c := range Commands {
		if c.Name == name {
			return true
		}
	}
	return false
}

// enumWords lists an enum's values for a flag's help: "A, B or C".
func enumWords[T ~string](all []T) string {
	words := make([]string, len(all))
	for i, v := range all {
		words[i] = string(v)
	}
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// parseEnum reads a flag's value as one of an enum's values (in any
// case), or is a usage error listing them.
func parseEnum[T ~string](flagName, v string, all []T) (T, error) {
	for _, e := range all {
		if strings.EqualFold(string(e), strings.TrimSpace(v)) {
			return e, nil
		}
	}
	return "", usageErrorf("--%s: %q is not one of %s", flagName, v, enumWords(all))
}
