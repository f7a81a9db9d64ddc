package store

import (
	"database/sql"
	"fmt"
	"time"

	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/plugin/dbresolver"
)

// Pool sizes the store's connection pools and its cache of finished runs.
type Pool struct {
	// MaxOpenConns caps the PostgreSQL connections; MaxIdleConns is how
	// many connections of a pool stay open while idle.
	// Go's default of 2 idle connections makes a busy API open and close a
	// backend per request.
	MaxOpenConns int
	MaxIdleConns int
	// ConnMaxLifetime and ConnMaxIdleTime retire connections (0 = never).
	ConnMaxLifetime time.Duration
	ConnMaxIdleTime time.Duration
	// SQLiteReaders is the number of SQLite read-only connections beside the
	// single writer: SQLite in WAL mode lets readers run while one writer
	// writes, so reads do not queue behind writes.
	SQLiteReaders int
	// FinishedRunCacheTTL is how long a finished run's document, once
	// read, is served from memory (0 = never; see doccache.go): how stale
	// a write to a finished run by another process may be seen.
	FinishedRunCacheTTL time.Duration
}

// DefaultPool is the pool Open uses.
func DefaultPool() Pool {
	return Pool{MaxOpenConns: 32, MaxIdleConns: 32, ConnMaxLifetime: 30 * time.Minute, ConnMaxIdleTime: 5 * time.Minute, SQLiteReaders: 4,
		FinishedRunCacheTTL: time.Second}
}

func (p Pool) apply(db *sql.DB, maxOpen int) {
	db.SetMaxOpenConns(maxOpen)
	db.SetMaxIdleConns(min(max(p.MaxIdleConns, 0), maxOpen))
	db.SetConnMaxLifetime(p.ConnMaxLifetime)
	db.SetConnMaxIdleTime(p.ConnMaxIdleTime)
}

// Validate rejects a pool that cannot work.
func (p Pool) Validate() error {
	switch {
	case p.MaxOpenConns < 1:
		return fmt.Errorf("max open connections %d: at least 1", p.MaxOpenConns)
	case p.MaxIdleConns < 0:
		return fmt.Errorf("max idle connections %d: not negative", p.MaxIdleConns)
	case p.SQLiteReaders < 0:
		return fmt.Errorf("SQLite readers %d: not negative", p.SQLiteReaders)
	case p.ConnMaxLifetime < 0 || p.ConnMaxIdleTime < 0:
		return fmt.Errorf("connection lifetimes must not be negative")
	case p.FinishedRunCacheTTL < 0:
		return fmt.Errorf("finished run cache TTL %s: not negative", p.FinishedRunCacheTTL)
	}
	return nil
}

// sqliteReaders routes the reads of db (outside transactions) to a pool of
// query-only connections on the same file; writes and transactions keep the
// single writer connection. It returns the readers' pool for Close.
func sqliteReaders(db *gorm.DB, dsn string, p Pool) (*sql.DB, error) {
	if p.SQLiteReaders == 0 {
		return nil, nil
	}
	readers, err := sql.Open("sqlite", dsn+"&_pragma=query_only(1)")
	if err != nil {
		return nil, fmt.Errorf("open SQLite readers: %w", err)
	}
	p.apply(readers, p.SQLiteReaders)
	err = db.Use(dbresolver.Register(dbresolver.Config{Replicas: []gorm.Dialector{sqlite.Dialector{DriverName: "sqlite", Conn: readers}}}))
	if err != nil {
		_ = readers.Close()
		return nil, fmt.Errorf("route SQLite reads: %w", err)
	}
	return readers, nil
}
