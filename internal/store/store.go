// Package store is the only writer of task state. Every status change it makes
// is a conditional UPDATE checked against the lifecycle transition table, runs
// in a transaction together with everything that belongs to it (the task row,
// its instance, new retry instances, system log lines), and is published to
// the events Publisher after commit, once per committed change.
//
// The same SQL runs on PostgreSQL and SQLite; dialect.go holds the few
// differences. On PostgreSQL, row locks order concurrent writers (always the
// instance row first, then the task row); on SQLite a process-wide write lock
// does, and the file's own lock keeps other processes out.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/lib/pq"
	_ "modernc.org/sqlite" // the embedded default database

	"github.com/taskgraph/taskgraph/ent"
	_ "github.com/taskgraph/taskgraph/ent/runtime" // defaults and the status guard hooks
	"github.com/taskgraph/taskgraph/ent/schema/lifecycle"
	"github.com/taskgraph/taskgraph/internal/auth"
	"github.com/taskgraph/taskgraph/internal/events"
	"github.com/taskgraph/taskgraph/internal/history"
	"github.com/taskgraph/taskgraph/internal/migrate"
	"github.com/taskgraph/taskgraph/internal/pgdsn"
)

// Config says which database to open and whom to tell about commits.
type Config struct {
	// DSN is a postgres:// (or postgresql://) URL or a key=value DSN
	// (host=... dbname=...), or a SQLite file path (optionally prefixed
	// with sqlite:// or file:).
	DSN string
	// Publisher receives committed changes. Default: discard them.
	Publisher events.Publisher
	// Clock, when set, is the cluster's time, authoritative: Now returns it
	// as it is, with no offset to the database's clock (tests' fake
	// clocks). Default: none; see WallClock.
	Clock func() time.Time
	// WallClock is this node's wall clock, which Now corrects by the
	// offset to the database's clock (SyncClock). Default: time.Now.
	// Tests give each node a skewed one.
	WallClock func() time.Time
	// Logger receives the store's own warnings. Default: slog.Default().
	Logger *slog.Logger
	// MaxOpenConns bounds the connection pool. Default: 32 on PostgreSQL,
	// 8 on SQLite.
	MaxOpenConns int
	// Gate, when set, limits what each claim may take per task type
	// (flow control: caps, rates, pauses). See Gate.
	Gate Gate
	// BeforeCommit, when set, runs in every writing transaction that
	// recorded changes, just before COMMIT, with a way to execute statements
	// in it: the relay sends its notifications there, so that they are
	// delivered if and only if the transaction commits. foreign marks a
	// transaction of the store's caller (In), whose changes this process
	// does not publish itself: every node must hear them, this one too.
	BeforeCommit BeforeCommitFunc
	// OnWrite, when set, is told the outcome of every write (nil: it
	// committed), after the store's own retries: the outage monitor counts
	// failures and readiness from it.
	OnWrite func(err error)
	// Migrate applies the schema's pending migrations at Open (--migrate);
	// without it, Open refuses a database that needs them (an empty one
	// is initialised either way).
	Migrate bool
}

// BeforeCommitFunc is Config.BeforeCommit.
type BeforeCommitFunc func(ctx context.Context, exec func(ctx context.Context, query string, args ...any) error, changes []events.TaskChange, logs []*ent.TaskLog, foreign bool) error

// Store reads and writes tasks, instances and logs.
type Store struct {
	client *ent.Client
	db     *sql.DB
	d      sqlDialect
	pub    events.Publisher
	clock  func() time.Time
	// wall is the node's wall clock, offset (ns, atomic) the database's
	// clock minus it; fixedClock says clock is a test's, authoritative
	// (clock.go).
	wall       func() time.Time
	offset     atomic.Int64
	fixedClock bool
	log        *slog.Logger
	writeMu    chan struct{} // SQLite only: one writing transaction at a time
	writers    *writers      // SQLite only: the processes sharing the file take turns (writers.go)
	before     BeforeCommitFunc
	onWrite    func(error)
	order      publishOrder
	gate       Gate
	stmts      statements // the hot statements, prepared on PostgreSQL
	// foreignCommits publishes, on SQLite, the tasks created in callers'
	// transactions (In) once they committed.
	foreignCommits foreignCommits

	inconsistencies atomic.Int64
	// hist is the task history counted by committed transactions and not
	// yet written (historyrec.go).
	hist historyAcc
	// fair is the node's passes of the claim's fair share (fair.go).
	fair fairness
}

// Open connects, checks the connection and the schema's version (see
// prepareSchema): an empty database is initialised, one that needs
// migrations is refused unless cfg.Migrate.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	driverName, dsn, dialectName, err := parseDSN(cfg.DSN)
	if err != nil {
		return nil, err
	}
	db, err := openDB(driverName, dsn)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	s := &Store{
		db:     db,
		d:      sqlDialect{name: dialectName},
		pub:    cfg.Publisher,
		clock:  cfg.Clock,
		log:    cfg.Logger,
		before: cfg.BeforeCommit,
		gate:   cfg.Gate,
	}
	s.onWrite = cfg.OnWrite
	s.foreignCommits.s = s
	if s.pub == nil {
		s.pub = events.Discard{}
	}
	s.fixedClock = s.clock != nil
	s.wall = cfg.WallClock
	if s.wall == nil {
		s.wall = time.Now
	}
	if s.clock == nil {
		s.clock = s.Now // migrate stamps its records with the cluster's time
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	maxConns := cfg.MaxOpenConns
	if dialectName == dialect.SQLite {
		s.writeMu = make(chan struct{}, 1)
		path, _, _ := strings.Cut(strings.TrimPrefix(dsn, "file:"), "?")
		if s.writers, err = openWriters(path); err != nil {
			_ = db.Close()
			return nil, err
		}
		if maxConns == 0 {
			maxConns = 8
		}
	} else if maxConns == 0 {
		maxConns = 32
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)

	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("connect to %s database: %w", dialectName, err)
	}
	s.client = ent.NewClient(ent.Driver(capturingDriver{entsql.OpenDB(dialectName, db)}))
	if _, err := s.SyncClock(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	if err := s.prepareSchema(ctx, cfg.Migrate); err != nil {
		_ = db.Close()
		return nil, err
	}
	// What a read through the client sees is the assembly's to decide: it
	// installs the access filter (access.Install(s.Client())). The store's
	// own work runs as auth.System (internal), which sees everything.
	return s, nil
}

// kvJIT finds a jit setting in a key=value DSN.
var kvJIT = regexp.MustCompile(`(^|\s)jit\s*=`)

// kvDSN is the start of a key=value PostgreSQL DSN ("host=db dbname=x").
var kvDSN = regexp.MustCompile(`^\s*[A-Za-z_]+\s*=`)

// IsPostgres reports whether dsn names a PostgreSQL database: a
// postgres:// or postgresql:// URL, or a key=value DSN (host=... dbname=...).
// Anything else is a SQLite file. It is for a DSN before a store is open;
// once one is, ask it (Store.Postgres).
func IsPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") || kvDSN.MatchString(dsn)
}

// openDB opens a pool; PostgreSQL's connection attempts end with their
// context (pgdsn.Connector), so that a server that never answers does not
// hold Open, or a shutdown, for ever.
func openDB(driverName, dsn string) (*sql.DB, error) {
	if driverName != "postgres" {
		return sql.Open(driverName, dsn)
	}
	c, err := pgdsn.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(c), nil
}

// parseDSN returns the database/sql driver name, its DSN and the ent dialect.
func parseDSN(raw string) (driverName, dsn, dialectName string, err error) {
	switch {
	case raw == "":
		return "", "", "", errors.New("no database given")
	case IsPostgres(raw) && !strings.Contains(raw, "://"):
		// A key=value DSN: the same jit setting as below, as a word of
		// its own.
		if !kvJIT.MatchString(raw) {
			raw += " jit=off"
		}
		return "postgres", raw, dialect.Postgres, nil
	case IsPostgres(raw):
		u, err := url.Parse(raw)
		if err != nil {
			return "", "", "", fmt.Errorf("database URL: %w", err)
		}
		// No just-in-time compilation in our sessions (unless the URL
		// asks for it): every statement of ours reads a few index
		// entries, and a misestimated cost (a table never analyzed)
		// would make one spend half a second compiling.
		if q := u.Query(); !q.Has("jit") {
			q.Set("jit", "off")
			u.RawQuery = q.Encode()
		}
		return "postgres", u.String(), dialect.Postgres, nil
	}
	path := strings.TrimPrefix(strings.TrimPrefix(raw, "sqlite://"), "file:")
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	if path == "" {
		return "", "", "", fmt.Errorf("database %q: no SQLite file path", raw)
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return "", "", "", fmt.Errorf("database directory: %w", err)
		}
	}
	q := url.Values{}
	// case_sensitive_like: LIKE (Contains, HasPrefix filters) is case
	// sensitive on PostgreSQL; so it must be here, or the two would answer
	// the same filter differently. The *Fold filters ignore case on both.
	for _, p := range []string{"busy_timeout(10000)", "journal_mode(WAL)", "foreign_keys(1)", "synchronous(NORMAL)", "case_sensitive_like(1)"} {
		q.Add("_pragma", p)
	}
	q.Set("_time_format", "sqlite")
	q.Set("_txlock", "immediate")
	return "sqlite", "file:" + path + "?" + q.Encode(), dialect.SQLite, nil
}

// migrateDialect is the store's database as package migrate names it.
func (s *Store) migrateDialect() migrate.Dialect {
	if s.d.postgres() {
		return migrate.Postgres
	}
	return migrate.SQLite
}

// prepareSchema checks the schema's version (internal/migrate): a database
// at the latest version opens; an empty one (no taskgraph table at all) is
// given every migration, so that a fresh database needs no step of its
// own; an older one is migrated only when Config.Migrate says so, and
// refused otherwise (a *migrate.VersionError); a newer one is always
// refused. Nothing else is compared or changed at a start: no diff of the
// schema, no index dropped.
func (s *Store) prepareSchema(ctx context.Context, apply bool) error {
	d := s.migrateDialect()
	st, err := migrate.ReadStatus(ctx, s.db, d)
	if err != nil {
		return fmt.Errorf("database schema: %w", err)
	}
	switch {
	case st.Current():
		return nil
	case st.Newer(), !st.Empty && !apply:
		return st.Check()
	}
	steps, err := migrate.Up(ctx, s.db, d, migrate.Options{Clock: s.clock})
	level := slog.LevelInfo
	if st.Empty {
		level = slog.LevelDebug // every fresh database: nothing to tell
	}
	for _, step := range steps {
		s.log.Log(ctx, level, "database schema migrated", "migration", step.String(), "recorded_only", step.Recorded, "took", step.Took.Round(time.Millisecond))
	}
	if err != nil {
		return fmt.Errorf("database schema: %w", err)
	}
	return nil
}

// OpenDB opens the connection pool of a DSN (Config.DSN) the way Open does
// — the same driver and settings — without checking its schema: for the
// migrate command, which reads and changes the schema's version itself.
func OpenDB(dsn string) (*sql.DB, migrate.Dialect, error) {
	driverName, dsn, dialectName, err := parseDSN(dsn)
	if err != nil {
		return nil, "", err
	}
	db, err := openDB(driverName, dsn)
	if err != nil {
		return nil, "", fmt.Errorf("open database: %w", err)
	}
	if dialectName == dialect.Postgres {
		return db, migrate.Postgres, nil
	}
	return db, migrate.SQLite, nil
}

// Client is the ent client, for reads. Writes go through Store's methods.
// Once the assembly has installed package access's filter on it (app.New
// does, and so does every test that opens a store), its queries see what
// the viewer of their context may see; a context without a viewer reads
// nothing.
func (s *Store) Client() *ent.Client { return s.client }

// DB is the underlying connection pool.
func (s *Store) DB() *sql.DB { return s.db }

// Dialect is "postgres" or "sqlite3", for messages. To ask which database
// the store is on, use Postgres.
func (s *Store) Dialect() string { return s.d.name }

// Postgres reports whether the store is on PostgreSQL (else SQLite). It is
// the one way to ask once a store is open; IsPostgres answers for a DSN
// before there is a store (parsing and checking configuration, choosing
// the store's own Config).
func (s *Store) Postgres() bool { return s.d.postgres() }

// Close closes the connection pool.
func (s *Store) Close() error {
	s.foreignCommits.close()
	// The history counted since the last flush.
	fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if _, err := s.FlushHistory(fctx); err != nil {
		s.log.Warn("the task history of the last seconds was not written", "err", err)
	}
	cancel()
	var werr error
	if s.writers != nil {
		// Once the transaction under way, if any, has ended (and an
		// acquire given up on has let its locks go).
		s.writeMu <- struct{}{}
		werr = s.writers.close()
		<-s.writeMu
	}
	err := s.client.Close()
	if err == nil {
		err = werr
	}
	return err
}

// internal marks the context of the store's methods that only the process
// itself calls (claims, heartbeats, work records, outcomes, the watchdog's
// scan): they read every task whoever asks.
func internal(ctx context.Context) context.Context {
	return lifecycle.Guarded(auth.NewSystemContext(ctx))
}

// txn is a transaction plus what it will publish once committed.
type txn struct {
	*ent.Tx
	sqlTx   *sql.Tx     // the same transaction, for prepared statements
	client  *ent.Client // what published entities are bound to
	changes []events.TaskChange
	logs    []*ent.TaskLog
	// hist is what the transaction adds to the task history, counted once
	// it committed.
	hist history.Batch
	// foreign marks a transaction of the store's caller (In): it holds one
	// of the pool's connections or one of its own, and a statement
	// prepared on the pool would wait for another, which a caller's many
	// transactions may all hold (hot statements run as text in it).
	foreign bool
}

// changed records committed-to-be changes. The tasks are bound to the
// store's client: subscribers resolve their edges after the transaction.
func (t *txn) changed(kind events.ChangeKind, tasks ...*ent.Task) {
	for _, tk := range tasks {
		t.changes = append(t.changes, events.TaskChange{Kind: kind, Task: tk.BindTo(t.client)})
	}
}

// logged records log lines written in the transaction.
func (t *txn) logged(logs ...*ent.TaskLog) {
	for _, l := range logs {
		t.logs = append(t.logs, l.BindTo(t.client))
	}
}

// begin wraps sqlTx, a transaction of the store's database, for the
// store's ent calls and prepared statements alike.
func (s *Store) begin(ctx context.Context, sqlTx *sql.Tx) *txn {
	tx := s.client.TxOn(ctx, &entsql.Tx{Conn: entsql.Conn{ExecQuerier: sqlTx}, Tx: sqlTx})
	return &txn{Tx: tx, sqlTx: sqlTx, client: s.client}
}

// Tx is a write transaction in which a caller does several of the store's
// writes, and writes of its own, so that they commit together or not at
// all: a task with its audit record and its stall override, an action
// with its record. It is the store's own (Write) or its caller's (In).
// What the store changes in it is published once it commits, in commit
// order; a change rolled back is never published.
type Tx struct {
	s *Store
	t *txn
}

// Ent is the transaction for the caller's own writes (an audit record, a
// row of an import target). The status of a task or an instance is the
// store's alone to change (ARCHITECTURE.md, invariant 1).
func (tx *Tx) Ent() *ent.Tx { return tx.t.Tx }

// SQL is the transaction for the caller's own statements.
func (tx *Tx) SQL() *sql.Tx { return tx.t.sqlTx }

// Write runs fn in a transaction of the store's own, and publishes what
// the store changed in it once it committed. fn is run again, in a new
// transaction, after a serialization failure or a deadlock: it must do
// all of its writes through tx and keep nothing of a failed run.
func (s *Store) Write(ctx context.Context, fn func(tx *Tx) error) error {
	return s.write(ctx, func(t *txn) error { return fn(&Tx{s: s, t: t}) })
}

// In runs fn in sqlTx, a transaction of the caller's on the store's
// database (on SQLite, one begun on DB(); on PostgreSQL, on any
// connection to the same database and schema), which the caller commits
// or rolls back once In returned. What the store writes in it exists only
// if sqlTx commits: workers can claim its tasks, and every node — this
// one too — publishes its changes to subscribers, only after that commit
// (on PostgreSQL through the relay's notifications, sent in sqlTx; on
// SQLite, see Config.Foreign). An error of fn is returned as it is; the
// caller should roll sqlTx back (a PostgreSQL transaction that failed a
// statement accepts no other). Nothing is retried: a serialization
// failure or deadlock is the caller's to retry, with its whole
// transaction.
func (s *Store) In(ctx context.Context, sqlTx *sql.Tx, fn func(tx *Tx) error) error {
	if sqlTx == nil {
		return errors.New("store: no transaction given")
	}
	t := s.begin(ctx, sqlTx)
	t.foreign = true
	if err := fn(&Tx{s: s, t: t}); err != nil {
		return err
	}
	// The caller's commit is out of the store's sight: what it did is
	// counted now (a caller that then rolls back is counted still).
	s.hist.merge(t.hist)
	if len(t.changes)+len(t.logs) == 0 {
		return nil
	}
	if s.before != nil {
		exec := func(ctx context.Context, query string, args ...any) error {
			_, err := sqlTx.ExecContext(ctx, query, args...)
			return err
		}
		if err := s.before(ctx, exec, t.changes, t.logs, true); err != nil {
			return err
		}
	}
	if !s.d.postgres() {
		s.foreignCommits.add(t.changes)
	}
	return nil
}

// SQL runs fn in a transaction of the store's database that takes turns
// with the store's own writes — on SQLite one writing transaction at a
// time in the process (and in turn with the other processes on the file),
// so that a caller's many concurrent transactions do not starve each other
// or the store in SQLite's busy handler — and commits it when fn returns
// nil, rolls it back otherwise and returns fn's error. fn is run again, in
// a new transaction, after a serialization failure, a deadlock or a busy
// database: it must do all of its writes through tx. The store's writes in
// it (Store.In, on tx) are published once it committed.
func (s *Store) SQL(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return s.write(ctx, func(t *txn) error { return fn(t.sqlTx) })
}

// write runs fn in a transaction, retrying it when the database reports a
// serialization failure or deadlock, and publishes what fn recorded after the
// commit succeeded, in commit order (see publishOrder).
func (s *Store) write(ctx context.Context, fn func(t *txn) error) error {
	_, err := s.writeLocked(ctx, fn)
	if s.onWrite != nil {
		s.onWrite(err)
	}
	return err
}

func (s *Store) writeLocked(ctx context.Context, fn func(t *txn) error) (*txn, error) {
	if s.writeMu != nil {
		select {
		case s.writeMu <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		unlock := func() { <-s.writeMu }
		if s.writers != nil {
			if err := s.writers.acquire(ctx, unlock); err != nil {
				return nil, err // unlock is called by acquire
			}
			unlockMu := unlock
			unlock = func() {
				if err := s.writers.release(); err != nil {
					s.log.Error("letting the writers' lock go failed", "err", err)
				}
				unlockMu()
			}
		}
		defer unlock()
	}
	const attempts = 5
	for i := 1; ; i++ {
		t, err := s.writeOnce(ctx, fn)
		if err == nil || i == attempts || !retryableDBError(err) {
			return t, err
		}
		s.log.Debug("retrying transaction", "attempt", i, "err", err)
		select {
		case <-time.After(time.Duration(i*i) * 5 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (s *Store) writeOnce(ctx context.Context, fn func(t *txn) error) (*txn, error) {
	sqlTx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin transaction: %w", err)
	}
	t := s.begin(ctx, sqlTx)
	if err := fn(t); err != nil {
		_ = sqlTx.Rollback()
		return nil, err
	}
	if s.before != nil && len(t.changes)+len(t.logs) > 0 {
		exec := func(ctx context.Context, query string, args ...any) error {
			_, err := sqlTx.ExecContext(ctx, query, args...)
			return err
		}
		if err := s.before(ctx, exec, t.changes, t.logs, false); err != nil {
			_ = sqlTx.Rollback()
			return nil, err
		}
	}
	if len(t.changes)+len(t.logs) == 0 {
		if err := sqlTx.Commit(); err != nil {
			return nil, &commitError{err}
		}
		s.hist.merge(t.hist)
		return t, nil
	}
	ticket := s.order.take()
	if err := sqlTx.Commit(); err != nil {
		s.order.done(ticket, nil)
		// The outcome of a failed COMMIT is unknown: never run the
		// transaction again on top of it.
		return nil, &commitError{err}
	}
	s.order.done(ticket, func() {
		if len(t.changes) > 0 {
			s.pub.PublishTasks(t.changes)
		}
		if len(t.logs) > 0 {
			s.pub.PublishLogs(t.logs)
		}
	})
	// Counted after the publishing: the next transactions' tickets do not
	// wait on it.
	s.hist.merge(t.hist)
	return t, nil
}

// publishOrder publishes committed transactions in the order they took a
// ticket, just before COMMIT. A transaction that changes a row another one
// changed first waits for that one's commit (row locks; SQLite's single
// writer), so it takes a later ticket: per task, ticket order is commit
// order. Publishing in ticket order keeps two goroutines that commit changes
// of one task back to back from publishing them the other way round.
type publishOrder struct {
	mu      sync.Mutex
	taken   uint64
	next    uint64
	pending map[uint64]func()
}

func (o *publishOrder) take() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.taken
	o.taken++
	return t
}

// done records the outcome of ticket t (publish nil for a failed commit)
// and runs every publication now due, in ticket order.
func (o *publishOrder) done(t uint64, publish func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pending == nil {
		o.pending = make(map[uint64]func())
	}
	if publish == nil {
		publish = func() {}
	}
	o.pending[t] = publish
	for {
		p, ok := o.pending[o.next]
		if !ok {
			return
		}
		delete(o.pending, o.next)
		o.next++
		p()
	}
}

// commitError is a failed COMMIT.
type commitError struct{ err error }

func (e *commitError) Error() string { return "commit: " + e.err.Error() }
func (e *commitError) Unwrap() error { return e.err }

// retryableDBError reports errors after which the whole transaction may be
// run again: PostgreSQL serialization failures and deadlocks, SQLite busy,
// all raised before the commit.
func retryableDBError(err error) bool {
	var ce *commitError
	if errors.As(err, &ce) {
		return false
	}
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		return pqErr.Code == "40001" || pqErr.Code == "40P01"
	}
	msg := err.Error()
	return strings.Contains(msg, "SQLITE_BUSY") || strings.Contains(msg, "database is locked")
}

// exec runs a hand-written statement (with ? placeholders) in the transaction.
func (s *Store) exec(ctx context.Context, t *txn, query string, args ...any) (int64, error) {
	res, err := t.ExecContext(ctx, s.d.rebind(query), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// queryInts runs a hand-written query returning rows of integers.
func (s *Store) queryInts(ctx context.Context, t *txn, cols int, query string, args ...any) ([][]int64, error) {
	rows, err := t.QueryContext(ctx, s.d.rebind(query), args...)
	if err != nil {
		return nil, err
	}
	return scanInts(rows, cols)
}
