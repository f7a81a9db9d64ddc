package store

import (
	"context"
	"database/sql"
	"errors"

	"gorm.io/gorm"
)

// writeTx runs fn in a transaction on the store's writer below GORM (on
// SQLite BEGIN IMMEDIATE, from the DSN's _txlock), with the fixed
// statements queries (? placeholders), which fn runs by index through the
// writeTxn's row and exec: for the hot read-modify-writes, where GORM's
// statement building and reflection cost more than the statements
// themselves. On SQLite the
// statements are prepared once for the writer, before the transaction
// takes its one connection. fn's error rolls the transaction back and is
// returned as it is.
func (s *Store) writeTx(ctx context.Context, queries []string, fn func(*writeTxn) error) error {
	db, err := s.db.DB()
	if err != nil {
		return err
	}
	w := &writeTxn{ctx: ctx, stmts: make([]*sql.Stmt, len(queries)), texts: make([]string, len(queries))}
	for i, q := range queries {
		if s.postgres {
			w.texts[i] = pgQueries.of(q)
		} else if w.stmts[i], err = s.wstmts.prepare(ctx, db, q); err != nil {
			return err
		}
	}
	if w.tx, err = db.BeginTx(ctx, nil); err != nil {
		return err
	}
	if err := fn(w); err != nil {
		_ = w.tx.Rollback()
		return err
	}
	return w.tx.Commit()
}

// writeTxn is a transaction of writeTx with its statements.
type writeTxn struct {
	ctx   context.Context
	tx    *sql.Tx
	stmts []*sql.Stmt // SQLite
	texts []string    // PostgreSQL
}

// row reads one row with statement i into dest; no row is
// gorm.ErrRecordNotFound, which translate makes ErrNotFound.
func (w *writeTxn) row(i int, args []any, dest ...any) error {
	var row *sql.Row
	if w.stmts[i] != nil {
		row = w.tx.StmtContext(w.ctx, w.stmts[i]).QueryRowContext(w.ctx, args...)
	} else {
		row = w.tx.QueryRowContext(w.ctx, w.texts[i], args...)
	}
	if err := row.Scan(dest...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return gorm.ErrRecordNotFound
		}
		return err
	}
	return nil
}

// exec runs statement i, which changes rows.
func (w *writeTxn) exec(i int, args ...any) error {
	var err error
	if w.stmts[i] != nil {
		_, err = w.tx.StmtContext(w.ctx, w.stmts[i]).ExecContext(w.ctx, args...)
	} else {
		_, err = w.tx.ExecContext(w.ctx, w.texts[i], args...)
	}
	return err
}

// rows reads the rows of statement i, each with each.
func (w *writeTxn) rows(i int, args []any, each func(*sql.Rows) error) error {
	var rows *sql.Rows
	var err error
	if w.stmts[i] != nil {
		rows, err = w.tx.StmtContext(w.ctx, w.stmts[i]).QueryContext(w.ctx, args...)
	} else {
		rows, err = w.tx.QueryContext(w.ctx, w.texts[i], args...)
	}
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// execText runs a statement that is not one of the fixed ones (a
// multi-row insert whose size varies), in the database's own placeholders.
func (w *writeTxn) execText(query string, args ...any) error {
	_, err := w.tx.ExecContext(w.ctx, query, args...)
	return err
}
