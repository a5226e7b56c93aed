// Package migratecmd is the command `taskgraph migrate`: it shows where a
// database's schema stands, prints a migration's SQL for review, and
// applies or reverts migrations (package migrate) on the database the
// server would open, named by the server's own --db and --data-dir flags
// (and their environment twins).
package migratecmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/taskgraph/taskgraph/internal/app"
	"github.com/taskgraph/taskgraph/internal/migrate"
	"github.com/taskgraph/taskgraph/internal/store"
)

// Summary is the command's line in taskgraph -h.
const Summary = "show, review and apply the database's schema migrations: status, sql, up, down"

const usage = `Usage:
  taskgraph migrate status              where the database's schema stands, and what up would apply
  taskgraph migrate sql [up|down] N     print migration N's SQL (up by default) for review; nothing is run
  taskgraph migrate up [--to N]         apply the pending migrations (up to version N)
  taskgraph migrate down --to N | --one revert migrations down to version N (0: drop every table), or the last one

Each migration runs in a transaction of its own with the row that records it
(the table taskgraph_migrations). A database made before versioned migrations
(its tables, no version table) has 0001 recorded by up without running it.
A node refuses a database that needs migrations unless started with --migrate;
an empty one it initialises itself.

Flags of up and down (no environment variable: one left set must not revert a database):
  --to N
      up: the version to reach (default: the latest); down: the version to leave applied
  --one
      down: revert the last applied migration only

The database, as the server names it (each also read from its environment variable, shown in brackets; a flag wins):
`

// Run runs `taskgraph migrate` with the arguments after "migrate" and
// returns the exit code: 0 done (or help), 1 failure, 2 usage.
func Run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "taskgraph migrate: "+format+"\n", a...)
		if code == app.ExitUsage {
			fmt.Fprintln(stderr, "taskgraph migrate -h shows how to use it.")
		}
		return code
	}
	if len(args) == 0 {
		return fail(app.ExitUsage, "say status, sql, up or down")
	}
	sub, args := args[0], args[1:]
	var cfg app.Config
	f := app.NewFlags("taskgraph migrate", getenv)
	app.DatabaseFlags(f, &cfg)
	help := func() int {
		fmt.Fprint(stdout, usage)
		f.PrintDefaults(stdout)
		return app.ExitOK
	}
	switch sub {
	case "-h", "-help", "--help", "help":
		return help()
	case "status", "sql", "up", "down":
	default:
		return fail(app.ExitUsage, "%q is not status, sql, up or down", sub)
	}
	var positional []string
	for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		positional, args = append(positional, args[0]), args[1:]
	}
	to, one, rest, err := ownFlags(args)
	if err != nil {
		return fail(app.ExitUsage, "%v", err)
	}
	if err := f.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return help()
		}
		return fail(app.ExitUsage, "%v", err)
	}
	switch {
	case to >= 0 && sub != "up" && sub != "down":
		return fail(app.ExitUsage, "--to is for up and down")
	case one && sub != "down":
		return fail(app.ExitUsage, "--one is for down")
	case sub == "down" && one == (to >= 0):
		return fail(app.ExitUsage, "down needs --to N or --one (it drops what the migrations reverted made, with its rows)")
	case sub != "sql" && len(positional) > 0:
		return fail(app.ExitUsage, "unexpected argument %q", positional[0])
	}
	dsn := cfg.DSN()
	if sub != "up" && sub != "sql" && !store.IsPostgres(dsn) {
		// Opening a file that is not there would create it.
		if _, err := os.Stat(sqliteFile(dsn)); errors.Is(err, os.ErrNotExist) && sub == "status" {
			fmt.Fprintf(stdout, "database %s %s (no such file yet)\n", migrate.SQLite, shown(dsn, migrate.SQLite))
			printStatus(stdout, migrate.Status{Empty: true, Latest: migrate.Latest()}, migrate.SQLite, true)
			return app.ExitOK
		} else if err != nil {
			return fail(app.ExitFailure, "no SQLite database at %s (%v)", sqliteFile(dsn), err)
		}
	}

	if sub == "sql" {
		direction, version, err := sqlArgs(positional)
		if err != nil {
			return fail(app.ExitUsage, "%v", err)
		}
		d := migrate.SQLite
		if store.IsPostgres(dsn) {
			d = migrate.Postgres
		}
		text, err := migrate.SQL(d, direction, version)
		if err != nil {
			return fail(app.ExitUsage, "%v", err)
		}
		fmt.Fprint(stdout, text)
		return app.ExitOK
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	db, d, err := store.OpenDB(dsn)
	if err != nil {
		return fail(app.ExitFailure, "%v", err)
	}
	defer db.Close()
	fmt.Fprintf(stdout, "database %s %s\n", d, shown(dsn, d))
	if err := db.PingContext(ctx); err != nil {
		return fail(app.ExitFailure, "connect to the %s database: %v", d, err)
	}
	var steps []migrate.Step
	switch sub {
	case "up":
		steps, err = migrate.Up(ctx, db, d, migrate.Options{To: max(to, 0)})
	case "down":
		if one {
			st, serr := migrate.ReadStatus(ctx, db, d)
			if serr != nil {
				return fail(app.ExitFailure, "%v", serr)
			}
			to = max(st.Version-1, 0)
		}
		steps, err = migrate.Down(ctx, db, d, migrate.Options{To: to})
	}
	for _, s := range steps {
		switch {
		case s.Recorded:
			fmt.Fprintf(stdout, "%s: recorded, not run (the database already had its schema: made before versioned migrations)\n", s)
		case s.Direction == "down":
			fmt.Fprintf(stdout, "%s: reverted (%s)\n", s, s.Took.Round(time.Millisecond))
		default:
			fmt.Fprintf(stdout, "%s: applied (%s)\n", s, s.Took.Round(time.Millisecond))
		}
	}
	if err != nil {
		return fail(app.ExitFailure, "%v", app.OneLine(err))
	}
	if sub != "status" && len(steps) == 0 {
		fmt.Fprintln(stdout, "nothing to do")
	}
	st, err := migrate.ReadStatus(ctx, db, d)
	if err != nil {
		return fail(app.ExitFailure, "%v", err)
	}
	printStatus(stdout, st, d, sub == "status")
	return app.ExitOK
}

// ownFlags takes --to and --one out of args (they have no environment
// twin: a variable left set must not revert a database); to is -1 when not
// given.
func ownFlags(args []string) (to int, one bool, rest []string, err error) {
	to = -1
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || (name != "to" && name != "one") {
			rest = append(rest, a)
			continue
		}
		if name == "one" {
			if hasValue {
				if one, err = strconv.ParseBool(value); err != nil {
					return 0, false, nil, fmt.Errorf("--one: %q is not true or false", value)
				}
			} else {
				one = true
			}
			continue
		}
		if !hasValue {
			if i+1 == len(args) {
				return 0, false, nil, errors.New("--to: needs a version")
			}
			i++
			value = args[i]
		}
		n, err := strconv.Atoi(value)
		if err != nil || n < 0 {
			return 0, false, nil, fmt.Errorf("--to: %q is not a version (0, 1, 2...)", value)
		}
		to = n
	}
	return to, one, rest, nil
}

// sqlArgs reads `sql [up|down] N`.
func sqlArgs(args []string) (direction string, version int, err error) {
	direction = "up"
	if len(args) == 2 {
		direction, args = args[0], args[1:]
	}
	if len(args) != 1 || (direction != "up" && direction != "down") {
		return "", 0, errors.New("sql takes [up|down] and a version: taskgraph migrate sql up 1")
	}
	version, err = strconv.Atoi(args[0])
	if err != nil {
		return "", 0, fmt.Errorf("%q is not a version (1, 2...)", args[0])
	}
	return direction, version, nil
}

// printStatus writes the version and, with all, each migration's state.
func printStatus(w io.Writer, st migrate.Status, d migrate.Dialect, all bool) {
	state := "current"
	switch {
	case st.Newer():
		state = "newer than this taskgraph knows: a newer taskgraph migrated it; run that one"
	case st.Empty:
		state = "empty (no taskgraph table): taskgraph migrate up, or a node's first start, creates it"
	case st.Unversioned:
		state = "unversioned (made before versioned migrations, its schema 0001's): taskgraph migrate up records 0001"
		if st.Latest > 1 {
			state += " and applies the rest"
		}
	case st.Version < st.Latest:
		state = "behind: taskgraph migrate up applies what is pending"
	}
	fmt.Fprintf(w, "schema version %d of %d: %s\n", st.Version, st.Latest, state)
	if !all {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	applied := map[int]migrate.Applied{}
	for _, a := range st.Applied {
		applied[a.Version] = a
	}
	for _, m := range migrate.All(d) {
		a, ok := applied[m.Version]
		switch {
		case ok:
			fmt.Fprintf(tw, "%s\tapplied %s\n", m, a.AppliedAt.UTC().Format(time.DateTime))
		case st.Unversioned && m.Version == 1:
			fmt.Fprintf(tw, "%s\tin place, not recorded\n", m)
		default:
			fmt.Fprintf(tw, "%s\tpending\n", m)
		}
	}
	for _, a := range st.Applied {
		if a.Version > st.Latest {
			fmt.Fprintf(tw, "%04d %s\tapplied %s, unknown to this taskgraph\n", a.Version, a.Name, a.AppliedAt.UTC().Format(time.DateTime))
		}
	}
	_ = tw.Flush()
}

// shown is the database as the status names it: a SQLite file's absolute
// path, a PostgreSQL URL without its password.
func shown(dsn string, d migrate.Dialect) string {
	if d == migrate.SQLite {
		if abs, err := filepath.Abs(sqliteFile(dsn)); err == nil {
			return abs
		}
		return sqliteFile(dsn)
	}
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return password.ReplaceAllString(dsn, "password=xxxxx")
}

// password is a key=value DSN's password.
var password = regexp.MustCompile(`password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// sqliteFile is the path of a SQLite DSN's file.
func sqliteFile(dsn string) string {
	path := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite://"), "file:")
	path, _, _ = strings.Cut(path, "?")
	return path
}
