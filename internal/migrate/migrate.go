// Package migrate holds taskgraph's database schema as numbered migrations,
// one set per database (postgres/ and sqlite/, embedded in the binary), and
// applies them: Up, Down, ReadStatus, SQL. The database records what it has
// applied in a table of its own, taskgraph_migrations (version, name,
// applied_at).
//
// A migration is a pair of files, NNNN_name.up.sql and NNNN_name.down.sql,
// numbered from 0001 without gaps, the same numbers and names in both sets.
// Each runs in a transaction of its own (both databases have transactional
// DDL), together with the row that records it, so that a migration is
// either applied and recorded or neither. On PostgreSQL the whole run holds
// an advisory lock, so that nodes (or commands) migrating together take
// turns; on SQLite each migration's transaction takes the file's write lock
// first (BEGIN IMMEDIATE) and reads the version again inside it.
//
// A database made before versioned migrations has the tables of 0001 but
// no version table: it is "unversioned", its schema that of 0001 (which is
// exactly what taskgraph created then); Up records 0001 as applied there
// without running it, after checking that its tables exist.
//
// The ent schema (ent/schema) and the migrations are held together by a
// test that applies every migration and asks ent for the difference: a
// change to ent/schema needs a new migration.
package migrate

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Dialect is a kind of database.
type Dialect string

// The dialects, by the names of their migration directories.
const (
	Postgres Dialect = "postgres"
	SQLite   Dialect = "sqlite"
)

// Table is the version table.
const Table = "taskgraph_migrations"

// lockKey is the PostgreSQL advisory lock held while migrating (the one
// the store held around its automatic migration before there were
// versions), so that nodes and commands do not migrate at once.
const lockKey = 0x7461736b67726170 // "taskgrap"

// Migration is one step of the schema, in both directions.
type Migration struct {
	Version int
	Name    string
	Up      string // SQL
	Down    string // SQL
}

// String is "0001 initial".
func (m Migration) String() string { return fmt.Sprintf("%04d %s", m.Version, m.Name) }

//go:embed postgres/*.sql sqlite/*.sql
var files embed.FS

var fileName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.(up|down)\.sql$`)

// sets are the migrations of each dialect, read once from files.
var sets = sync.OnceValue(func() map[Dialect][]Migration {
	out := map[Dialect][]Migration{}
	for _, d := range []Dialect{Postgres, SQLite} {
		ms, err := load(files, string(d))
		if err != nil {
			panic(fmt.Sprintf("migrate: the embedded %s migrations: %v", d, err))
		}
		out[d] = ms
	}
	if err := sameSteps(out[Postgres], out[SQLite]); err != nil {
		panic(fmt.Sprintf("migrate: the embedded migrations: %v", err))
	}
	return out
})

// load reads a directory of migrations: numbered from 1 without gaps, each
// with its up and down file.
func load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("%s/%s: not NNNN_name.up.sql or NNNN_name.down.sql", dir, e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		b, err := fs.ReadFile(fsys, dir+"/"+e.Name())
		if err != nil {
			return nil, err
		}
		mig := byVersion[v]
		if mig == nil {
			mig = &Migration{Version: v, Name: m[2]}
			byVersion[v] = mig
		}
		if mig.Name != m[2] {
			return nil, fmt.Errorf("%s: %04d is named both %q and %q", dir, v, mig.Name, m[2])
		}
		if m[3] == "up" {
			mig.Up = string(b)
		} else {
			mig.Down = string(b)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for v := 1; v <= len(byVersion); v++ {
		m := byVersion[v]
		switch {
		case m == nil:
			return nil, fmt.Errorf("%s: no migration %04d (versions run from 0001 without gaps)", dir, v)
		case strings.TrimSpace(m.Up) == "":
			return nil, fmt.Errorf("%s: %s has no up file", dir, m)
		case strings.TrimSpace(m.Down) == "":
			return nil, fmt.Errorf("%s: %s has no down file", dir, m)
		}
		out = append(out, *m)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no migrations", dir)
	}
	return out, nil
}

// sameSteps checks that two dialects' sets have the same versions and names.
func sameSteps(a, b []Migration) error {
	if len(a) != len(b) {
		return fmt.Errorf("postgres has %d migrations, sqlite %d", len(a), len(b))
	}
	for i := range a {
		if a[i].Name != b[i].Name {
			return fmt.Errorf("%04d is %q on postgres, %q on sqlite", a[i].Version, a[i].Name, b[i].Name)
		}
	}
	return nil
}

// All returns the migrations of d, in order (version 1 first).
func All(d Dialect) []Migration { return slices.Clone(sets()[d]) }

// Latest is the highest version this binary knows: the schema it runs on.
func Latest() int { return len(sets()[Postgres]) }

// SQL returns the SQL of migration version in direction "up" or "down", for
// review before it is applied.
func SQL(d Dialect, direction string, version int) (string, error) {
	ms, ok := sets()[d]
	if !ok {
		return "", fmt.Errorf("no migrations for %q", d)
	}
	if version < 1 || version > len(ms) {
		return "", fmt.Errorf("no migration %d: this taskgraph knows 1 to %d", version, len(ms))
	}
	switch direction {
	case "up":
		return ms[version-1].Up, nil
	case "down":
		return ms[version-1].Down, nil
	}
	return "", fmt.Errorf("direction %q: want up or down", direction)
}

// base is what migration 0001 creates, read from its SQL: each table's
// columns, and each index's table. A database that has these tables and no
// version table is unversioned (version 1).
type base struct {
	tables  []string
	columns map[string][]string // by table
	indexes map[string]string   // index -> table
}

var (
	createTable = regexp.MustCompile(`(?ms)^CREATE TABLE (\w+) \((.*?)^\)`)
	columnLine  = regexp.MustCompile(`(?m)^\s+"?(\w+)"? `)
	createIndex = regexp.MustCompile(`(?m)^CREATE (?:UNIQUE )?INDEX (\w+) ON (\w+)`)
)

var bases = sync.OnceValue(func() map[Dialect]base {
	out := map[Dialect]base{}
	for d, ms := range sets() {
		b := base{columns: map[string][]string{}, indexes: map[string]string{}}
		for _, m := range createTable.FindAllStringSubmatch(ms[0].Up, -1) {
			b.tables = append(b.tables, m[1])
			for _, c := range columnLine.FindAllStringSubmatch(m[2], -1) {
				b.columns[m[1]] = append(b.columns[m[1]], c[1])
			}
		}
		for _, m := range createIndex.FindAllStringSubmatch(ms[0].Up, -1) {
			b.indexes[m[1]] = m[2]
		}
		out[d] = b
	}
	return out
})

// Applied is a migration recorded in the version table.
type Applied struct {
	Version   int
	Name      string
	AppliedAt time.Time
}

// Status is where a database's schema stands.
type Status struct {
	// Version is the schema's version: the highest migration applied; 0
	// for an empty database, 1 for an unversioned one.
	Version int
	// Latest is the version this binary runs on (Latest()).
	Latest int
	// Empty: none of taskgraph's tables exist (and nothing is recorded).
	Empty bool
	// Unversioned: the tables of 0001 are there, but no migration is
	// recorded (a database made before versioned migrations).
	Unversioned bool
	// Applied is what the version table records, oldest first.
	Applied []Applied
}

// Newer reports whether the database is at a version this binary does not
// know (a newer taskgraph migrated it).
func (s Status) Newer() bool { return s.Version > s.Latest }

// Current reports whether the database is at the latest version, recorded.
func (s Status) Current() bool { return s.Version == s.Latest && !s.Unversioned }

// Pending are the migrations this binary would apply to reach Latest.
func (s Status) Pending(d Dialect) []Migration {
	if s.Version >= s.Latest {
		return nil
	}
	return All(d)[s.Version:]
}

// VersionError is a database whose schema is not the one this binary runs
// on: older (migrate up), or newer (a newer taskgraph migrated it).
type VersionError struct {
	Version, Latest int
	Unversioned     bool
}

// Newer reports whether the database is ahead of this binary.
func (e *VersionError) Newer() bool { return e.Version > e.Latest }

func (e *VersionError) Error() string {
	switch {
	case e.Newer():
		return fmt.Sprintf("the database schema is at version %d, newer than this taskgraph knows (%d): a newer taskgraph migrated it", e.Version, e.Latest)
	case e.Unversioned:
		return fmt.Sprintf("the database schema is unversioned (made by a taskgraph before versioned migrations), and this taskgraph runs on version %d, recorded", e.Latest)
	}
	return fmt.Sprintf("the database schema is at version %d, and this taskgraph runs on version %d", e.Version, e.Latest)
}

// Check returns nil when s is current, else a *VersionError.
func (s Status) Check() error {
	if s.Current() {
		return nil
	}
	return &VersionError{Version: s.Version, Latest: s.Latest, Unversioned: s.Unversioned}
}

// querier is what reads the status: the pool, a connection, a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// ReadStatus reads where db's schema stands. It changes nothing.
func ReadStatus(ctx context.Context, db *sql.DB, d Dialect) (Status, error) {
	if err := known(d); err != nil {
		return Status{}, err
	}
	return readStatus(ctx, db, d)
}

func readStatus(ctx context.Context, q querier, d Dialect) (Status, error) {
	st := Status{Latest: Latest()}
	tables, err := tableNames(ctx, q, d)
	if err != nil {
		return st, fmt.Errorf("read the database's tables: %w", err)
	}
	if tables[Table] {
		rows, err := q.QueryContext(ctx, `SELECT version, name, applied_at FROM `+Table+` ORDER BY version`)
		if err != nil {
			return st, fmt.Errorf("read %s: %w", Table, err)
		}
		defer rows.Close()
		for rows.Next() {
			var a Applied
			if err := rows.Scan(&a.Version, &a.Name, &a.AppliedAt); err != nil {
				return st, fmt.Errorf("read %s: %w", Table, err)
			}
			st.Applied = append(st.Applied, a)
			st.Version = max(st.Version, a.Version)
		}
		if err := rows.Err(); err != nil {
			return st, fmt.Errorf("read %s: %w", Table, err)
		}
	}
	if len(st.Applied) == 0 {
		st.Empty = true
		for _, t := range bases()[d].tables {
			if tables[t] {
				st.Empty = false
				break
			}
		}
		if !st.Empty {
			st.Unversioned, st.Version = true, 1
		}
	}
	return st, nil
}

// tableNames lists the tables of the database (SQLite) or of the current
// schema, where unqualified names are created (PostgreSQL).
func tableNames(ctx context.Context, q querier, d Dialect) (map[string]bool, error) {
	query := `SELECT name FROM sqlite_master WHERE type = 'table'`
	if d == Postgres {
		query = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`
	}
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out[n] = true
	}
	return out, rows.Err()
}

func known(d Dialect) error {
	if d != Postgres && d != SQLite {
		return fmt.Errorf("migrate: unknown dialect %q (want %q or %q)", d, Postgres, SQLite)
	}
	return nil
}

// Options tune Up and Down.
type Options struct {
	// To is the version to reach: for Up, 0 means the latest; for Down,
	// it is the version left applied (0: none, every table dropped).
	To int
	// Clock stamps applied_at. Default: time.Now.
	Clock func() time.Time
}

// Step is one migration Up or Down went through.
type Step struct {
	Migration
	// Direction is "up" or "down".
	Direction string
	// Recorded: the migration was recorded as applied without running it
	// (0001 on an unversioned database, whose tables it would create).
	Recorded bool
	Took     time.Duration
}

// Up applies the migrations after the database's version, up to opts.To
// (the latest when 0), each in its own transaction. An empty database gets
// every one; an unversioned one has 0001 recorded (its tables checked);
// one already at the version asked for is left alone. A database at a
// version this binary does not know is refused (*VersionError). It
// returns the steps taken, also when a later one failed.
func Up(ctx context.Context, db *sql.DB, d Dialect, opts Options) ([]Step, error) {
	if err := known(d); err != nil {
		return nil, err
	}
	to := opts.To
	if to == 0 {
		to = Latest()
	}
	if to < 0 || to > Latest() {
		return nil, fmt.Errorf("migrate up: no version %d: this taskgraph knows 1 to %d", to, Latest())
	}
	var steps []Step
	err := locked(ctx, db, d, func(conn *sql.Conn) error {
		st, err := readStatus(ctx, conn, d)
		if err != nil {
			return err
		}
		if st.Newer() {
			return st.Check()
		}
		if st.Version > to {
			return fmt.Errorf("migrate up: the database schema is at version %d, beyond %d (migrate down goes back)", st.Version, to)
		}
		ms := All(d)
		for _, m := range ms[:to] {
			step, err := upOne(ctx, conn, d, m, opts.Clock)
			if err != nil {
				return fmt.Errorf("migrate up: %s: %w", m, err)
			}
			if step != nil {
				steps = append(steps, *step)
			}
		}
		return nil
	})
	return steps, err
}

// upOne applies m unless the database has it (read again in m's own
// transaction): nil when there was nothing to do.
func upOne(ctx context.Context, conn *sql.Conn, d Dialect, m Migration, clock func() time.Time) (*Step, error) {
	var step *Step
	err := inTx(ctx, conn, d, func(tx execQuerier) error {
		st, err := readStatus(ctx, tx, d)
		if err != nil {
			return err
		}
		switch {
		case st.Newer():
			return st.Check()
		case st.Version >= m.Version && !st.Unversioned:
			return nil // applied (by us before, or by another node)
		case st.Version != m.Version-1 && !(st.Unversioned && m.Version == 1):
			return fmt.Errorf("the database schema is at version %d, not %d", st.Version, m.Version-1)
		}
		start := time.Now()
		recorded := false
		if st.Unversioned {
			// 0001's tables are there, made before versions: check
			// them, record 0001 without running it.
			if err := checkBase(ctx, tx, d); err != nil {
				return err
			}
			recorded = true
		} else if _, err := tx.ExecContext(ctx, m.Up); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, versionTable[d]); err != nil {
			return fmt.Errorf("create %s: %w", Table, err)
		}
		if _, err := tx.ExecContext(ctx, rebind(d, `INSERT INTO `+Table+` (version, name, applied_at) VALUES (?, ?, ?)`),
			m.Version, m.Name, now(clock)); err != nil {
			return fmt.Errorf("record it in %s: %w", Table, err)
		}
		step = &Step{Migration: m, Direction: "up", Recorded: recorded, Took: time.Since(start)}
		return nil
	})
	return step, err
}

// checkBase checks that an unversioned database has the schema of 0001:
// every table, column and index, and no other index on those tables (the
// automatic migration before versions dropped any index ent/schema did not
// declare, so a database it last migrated has none).
func checkBase(ctx context.Context, q querier, d Dialect) error {
	b := bases()[d]
	tables, err := tableNames(ctx, q, d)
	if err != nil {
		return err
	}
	var missing []string
	for _, t := range b.tables {
		if !tables[t] {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the database has some of taskgraph's tables but not %s, and no %s table: it is not a schema taskgraph made; refusing to touch it", strings.Join(missing, ", "), Table)
	}
	columns, indexes, err := inspect(ctx, q, d, b.tables)
	if err != nil {
		return err
	}
	var problems []string
	for _, t := range b.tables {
		for _, c := range b.columns[t] {
			if !columns[t+"."+c] {
				problems = append(problems, "no column "+t+"."+c)
			}
		}
	}
	for i, t := range b.indexes {
		if _, ok := indexes[i]; !ok {
			problems = append(problems, "no index "+i+" on "+t)
		}
	}
	for i, t := range indexes {
		if _, ok := b.indexes[i]; !ok {
			problems = append(problems, "an index 0001 does not make: "+i+" on "+t)
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return fmt.Errorf("the database is unversioned, but its schema is not that of 0001 (%s): a taskgraph older than the last one before versioned migrations made it; start it once with that one (commit 6365223), which brings it to 0001's schema, then migrate", strings.Join(problems, "; "))
	}
	return nil
}

// inspect lists the columns ("table.column") and the indexes (name ->
// table) of tables, but for those of primary keys.
func inspect(ctx context.Context, q querier, d Dialect, tables []string) (columns map[string]bool, indexes map[string]string, err error) {
	columns, indexes = map[string]bool{}, map[string]string{}
	colQuery := `SELECT m.name, p.name FROM sqlite_master m, pragma_table_info(m.name) p WHERE m.type = 'table'`
	idxQuery := `SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_autoindex_%'`
	if d == Postgres {
		colQuery = `SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()`
		idxQuery = `SELECT i.relname, t.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
			WHERE t.relnamespace = current_schema()::regnamespace AND NOT x.indisprimary`
	}
	wanted := map[string]bool{}
	for _, t := range tables {
		wanted[t] = true
	}
	read := func(query string, row func(a, b string)) error {
		rows, err := q.QueryContext(ctx, query)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var a, b string
			if err := rows.Scan(&a, &b); err != nil {
				return err
			}
			row(a, b)
		}
		return rows.Err()
	}
	if err := read(colQuery, func(t, c string) { columns[t+"."+c] = true }); err != nil {
		return nil, nil, fmt.Errorf("read the database's columns: %w", err)
	}
	if err := read(idxQuery, func(i, t string) {
		if wanted[t] {
			indexes[i] = t
		}
	}); err != nil {
		return nil, nil, fmt.Errorf("read the database's indexes: %w", err)
	}
	return columns, indexes, nil
}

// Down reverts the migrations applied beyond opts.To, newest first, each in
// its own transaction with the removal of its record. It refuses an
// unversioned database (migrate up records its version first) and one at
// a version this binary does not know (its down migrations are the newer
// binary's).
func Down(ctx context.Context, db *sql.DB, d Dialect, opts Options) ([]Step, error) {
	if err := known(d); err != nil {
		return nil, err
	}
	to := opts.To
	if to < 0 || to > Latest() {
		return nil, fmt.Errorf("migrate down: no version %d: this taskgraph knows 0 to %d", to, Latest())
	}
	var steps []Step
	err := locked(ctx, db, d, func(conn *sql.Conn) error {
		st, err := readStatus(ctx, conn, d)
		if err != nil {
			return err
		}
		switch {
		case st.Newer():
			return fmt.Errorf("migrate down: %w; migrate down with that taskgraph", st.Check())
		case st.Unversioned:
			return errors.New("migrate down: the database schema is unversioned (made before versioned migrations); migrate up records its version first")
		}
		ms := All(d)
		for i := st.Version; i > to; i-- {
			m := ms[i-1]
			start := time.Now()
			err := inTx(ctx, conn, d, func(tx execQuerier) error {
				cur, err := readStatus(ctx, tx, d)
				if err != nil {
					return err
				}
				if cur.Version != m.Version {
					return fmt.Errorf("the database schema is at version %d, not %d", cur.Version, m.Version)
				}
				if _, err := tx.ExecContext(ctx, m.Down); err != nil {
					return err
				}
				_, err = tx.ExecContext(ctx, rebind(d, `DELETE FROM `+Table+` WHERE version = ?`), m.Version)
				return err
			})
			if err != nil {
				return fmt.Errorf("migrate down: %s: %w", m, err)
			}
			steps = append(steps, Step{Migration: m, Direction: "down", Took: time.Since(start)})
		}
		return nil
	})
	return steps, err
}

// versionTable creates the version table if it is not there.
var versionTable = map[Dialect]string{
	Postgres: `CREATE TABLE IF NOT EXISTS ` + Table + ` (version bigint PRIMARY KEY, name varchar NOT NULL, applied_at timestamptz NOT NULL)`,
	SQLite:   `CREATE TABLE IF NOT EXISTS ` + Table + ` (version integer PRIMARY KEY, name text NOT NULL, applied_at datetime NOT NULL)`,
}

func now(clock func() time.Time) time.Time {
	if clock == nil {
		clock = time.Now
	}
	return clock().UTC().Truncate(time.Microsecond)
}

// rebind turns ? placeholders into $1, $2... on PostgreSQL.
func rebind(d Dialect, q string) string {
	if d != Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// locked runs fn on one connection, holding the advisory lock on
// PostgreSQL.
func locked(ctx context.Context, db *sql.DB, d Dialect, fn func(conn *sql.Conn) error) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if d == Postgres {
		if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, int64(lockKey)); err != nil {
			return fmt.Errorf("migrate: take the migration lock: %w", err)
		}
		defer func() {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(lockKey))
		}()
	}
	return fn(conn)
}

type execQuerier interface {
	querier
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// inTx runs fn in a transaction on conn: BEGIN IMMEDIATE on SQLite (the
// write lock first, whatever the DSN says, so that the version read in fn
// is the one the writes follow).
func inTx(ctx context.Context, conn *sql.Conn, d Dialect, fn func(tx execQuerier) error) error {
	if d == Postgres {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return err
	}
	if err := fn(conn); err != nil {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
		return err
	}
	if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
		return err
	}
	return nil
}
