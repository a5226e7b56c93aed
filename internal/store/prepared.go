package store

import (
	"context"
	"database/sql"
	"strings"
	"sync"

	"github.com/taskgraph/taskgraph/ent/task"
)

// The hot statements of the store (claim, finish, insert) are prepared on
// PostgreSQL, once per connection (database/sql keeps a statement prepared
// on each connection it was used on): a call then neither parses nor plans
// its statement, which was a tenth of PostgreSQL's work per task. Their
// texts do not vary with the batch (one array parameter per column) and
// name their columns, so that a column another node's newer schema adds
// does not change what a prepared statement returns.

// statements are the store's prepared statements, by text.
type statements struct {
	mu     sync.Mutex
	byText map[string]*sql.Stmt
}

// query runs the hot statement q (with ? placeholders) in the transaction:
// prepared on PostgreSQL, as text on SQLite.
func (s *Store) query(ctx context.Context, t *txn, q string, args ...any) (*sql.Rows, error) {
	if !s.d.postgres() || t.foreign {
		return t.QueryContext(ctx, s.d.rebind(q), args...)
	}
	st, err := s.prepared(ctx, q)
	if err != nil {
		return nil, err
	}
	return t.sqlTx.StmtContext(ctx, st).QueryContext(ctx, args...)
}

// execute is query for a statement that returns no rows.
func (s *Store) execute(ctx context.Context, t *txn, q string, args ...any) (sql.Result, error) {
	if !s.d.postgres() || t.foreign {
		return t.ExecContext(ctx, s.d.rebind(q), args...)
	}
	st, err := s.prepared(ctx, q)
	if err != nil {
		return nil, err
	}
	return t.sqlTx.StmtContext(ctx, st).ExecContext(ctx, args...)
}

// prepared returns the pool's statement for q, preparing it once.
func (s *Store) prepared(ctx context.Context, q string) (*sql.Stmt, error) {
	s.stmts.mu.Lock()
	defer s.stmts.mu.Unlock()
	if st := s.stmts.byText[q]; st != nil {
		return st, nil
	}
	st, err := s.db.PrepareContext(ctx, s.d.rebind(q))
	if err != nil {
		return nil, err
	}
	if s.stmts.byText == nil {
		s.stmts.byText = map[string]*sql.Stmt{}
	}
	s.stmts.byText[q] = st
	return st, nil
}

// taskColumns is every column of tasks this binary knows, qualified by
// table, for RETURNING: named, not *, so that a prepared statement keeps
// its result when another node's newer schema adds a column.
func taskColumns(table string) string {
	cols := make([]string, len(task.Columns))
	for i, c := range task.Columns {
		cols[i] = table + "." + c
	}
	return strings.Join(cols, ", ")
}
