package store

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// The reads by id the API serves under load (GET /job-runs/{id}, GET
// /factory/line-runs/{id}) and the line-run listing go to database/sql directly with fixed
// statements: GORM's statement building, callbacks and read routing were
// a quarter of such a request's CPU here. On SQLite each statement is
// prepared once per reader connection (the driver has no statement cache
// of its own and parsed the SQL on every read); PostgreSQL's driver caches
// the statements it has prepared per connection. The reads by id on
// PostgreSQL go one step lower, to the pgx connection under database/sql
// (pgReadRow), so a response is built from the connection's buffer with one
// allocation instead of three copies of the document.

// stmtCache holds the prepared statements of the SQLite readers.
type stmtCache struct {
	mu    sync.Mutex
	stmts map[string]*sql.Stmt
}

// readDB is the pool reads by id use: SQLite's read-only connections, or
// the store's one pool.
func (s *Store) readDB() (*sql.DB, error) {
	if s.readers != nil {
		return s.readers, nil
	}
	return s.db.DB()
}

// queryRows runs a read: query is written with ? placeholders (numbered $n
// ones on PostgreSQL, see pgQuery).
func (s *Store) queryRows(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	db, err := s.readDB()
	if err != nil {
		return nil, err
	}
	if s.postgres {
		return db.QueryContext(ctx, pgQueries.of(query), args...)
	}
	stmt, err := s.stmts.prepare(ctx, db, query)
	if err != nil {
		return nil, err
	}
	return stmt.QueryContext(ctx, args...)
}

// queryRow runs a read of one row (? placeholders, as queryRows') on a
// reader: on SQLite prepared once per reader connection.
func (s *Store) queryRow(ctx context.Context, query string, args ...any) (*sql.Row, error) {
	db, err := s.readDB()
	if err != nil {
		return nil, err
	}
	if s.postgres {
		return db.QueryRowContext(ctx, pgQueries.of(query), args...), nil
	}
	stmt, err := s.stmts.prepare(ctx, db, query)
	if err != nil {
		return nil, err
	}
	return stmt.QueryRowContext(ctx, args...), nil
}

// readRow runs query, a read of at most one row by one text argument, and
// hands the raw text of the row's columns (nil for NULL) to f. The bytes are
// valid only during the call: f copies what it keeps, so a read by id
// allocates its response once. found is false when there is no row.
func (s *Store) readRow(ctx context.Context, query, arg string, f func(cols [][]byte) error) (found bool, err error) {
	if s.postgres {
		return s.pgReadRow(ctx, query, arg, f)
	}
	rows, err := s.queryRows(ctx, query, arg)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	if !rows.Next() {
		return false, rows.Err()
	}
	names, err := rows.Columns()
	if err != nil {
		return false, err
	}
	raw := make([]sql.RawBytes, len(names))
	dest := make([]any, len(names))
	for i := range raw {
		dest[i] = &raw[i]
	}
	if err := rows.Scan(dest...); err != nil {
		return false, err
	}
	cols := make([][]byte, len(raw))
	for i, r := range raw {
		cols[i] = r
	}
	if err := f(cols); err != nil {
		return true, err
	}
	return true, rows.Close()
}

// pgReadRow is readRow on PostgreSQL, below database/sql: the statement is
// prepared once per connection (pgx keeps it by its SQL; unless the DSN's
// default_query_exec_mode keeps no statements, as for a pooler in
// transaction mode) and the row is read from the connection's buffer in
// the text format, so no column value is copied into a driver value, then
// into a Go string, then into []byte.
func (s *Store) pgReadRow(ctx context.Context, query, arg string, f func(cols [][]byte) error) (found bool, err error) {
	db, err := s.readDB()
	if err != nil {
		return false, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	query = pgQueries.of(query)
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("store: PostgreSQL connection is a %T, not pgx's", dc)
		}
		pc := c.Conn()
		params := [][]byte{[]byte(arg)}
		var rr *pgconn.ResultReader
		switch pc.Config().DefaultQueryExecMode {
		case pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe:
			sd, err := pc.Prepare(ctx, query, query)
			if err != nil {
				return err
			}
			rr = pc.PgConn().ExecPrepared(ctx, sd.Name, params, nil, nil)
		default:
			// The DSN asks for no statements kept on the server (a
			// pooler in front of PostgreSQL): an unnamed one per read.
			rr = pc.PgConn().ExecParams(ctx, query, params, nil, nil, nil)
		}
		var ferr error
		for rr.NextRow() {
			if !found {
				found = true
				ferr = f(rr.Values())
			}
		}
		if _, err := rr.Close(); err != nil {
			return err
		}
		return ferr
	})
	return found, err
}

func (c *stmtCache) prepare(ctx context.Context, db *sql.DB, query string) (*sql.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.stmts[query]; ok {
		return st, nil
	}
	st, err := db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if c.stmts == nil {
		c.stmts = map[string]*sql.Stmt{}
	}
	c.stmts[query] = st
	return st, nil
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.stmts {
		_ = st.Close()
	}
	c.stmts = nil
}

// pgQueries holds the PostgreSQL text of each fixed statement (a few
// dozen at most: the statements of this file's callers), numbered once
// rather than on every read.
var pgQueries pgQueryCache

type pgQueryCache struct {
	mu sync.RWMutex
	m  map[string]string
}

// of returns pgQuery(query), computed once per query.
func (c *pgQueryCache) of(query string) string {
	c.mu.RLock()
	q, ok := c.m[query]
	c.mu.RUnlock()
	if ok {
		return q
	}
	q = pgQuery(query)
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]string{}
	}
	c.m[query] = q
	c.mu.Unlock()
	return q
}

// pgQuery numbers the ? placeholders of query ($1, $2, …). The queries it
// is given have no ? anywhere else (no string literals holding one, no
// jsonb ? operator).
func pgQuery(query string) string {
	out := make([]byte, 0, len(query)+8)
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] != '?' {
			out = append(out, query[i])
			continue
		}
		n++
		out = strconv.AppendInt(append(out, '$'), int64(n), 10)
	}
	return string(out)
}
