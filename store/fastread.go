package store

import (
	"context"
	"database/sql"
	"sync"
)

// The reads by id the API serves under load (GET /job-runs/{id}, GET
// /factory/line-runs/{id}) and the line-run listing go to database/sql directly with fixed
// statements: GORM's statement building, callbacks and read routing were
// a quarter of such a request's CPU here. On SQLite each statement is
// prepared once per reader connection (the driver has no statement cache
// of its own and parsed the SQL on every read); PostgreSQL's driver caches
// the statements it has prepared per connection.

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

// queryRow runs a read of one row: query is written with ? placeholders
// (numbered $n ones on PostgreSQL, see pgQuery).
func (s *Store) queryRow(ctx context.Context, query string, args ...any) (*sql.Row, error) {
	db, err := s.readDB()
	if err != nil {
		return nil, err
	}
	if s.postgres {
		return db.QueryRowContext(ctx, pgQuery(query), args...), nil
	}
	stmt, err := s.stmts.prepare(ctx, db, query)
	if err != nil {
		return nil, err
	}
	return stmt.QueryRowContext(ctx, args...), nil
}

// queryRows is queryRow for a read of several rows.
func (s *Store) queryRows(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	db, err := s.readDB()
	if err != nil {
		return nil, err
	}
	if s.postgres {
		return db.QueryContext(ctx, pgQuery(query), args...)
	}
	stmt, err := s.stmts.prepare(ctx, db, query)
	if err != nil {
		return nil, err
	}
	return stmt.QueryContext(ctx, args...)
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
		out = append(out, '$')
		if n >= 10 {
			out = append(out, byte('0'+n/10))
		}
		out = append(out, byte('0'+n%10))
	}
	return string(out)
}
