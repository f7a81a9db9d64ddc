package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/linefactory/linefactory/manifests/run"
	"gorm.io/gorm/schema"
	sqlitedrv "modernc.org/sqlite" // registers the "sqlite" database/sql driver, shared with the embedded Temporal server
	sqlite3 "modernc.org/sqlite/lib"
)

// Sentinel errors; callers branch on them with errors.Is.
var (
	// ErrNotFound: no such record.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the record exists already or the change conflicts with another.
	ErrConflict = errors.New("conflict")
)

// Store is the persistence layer: definitions, versions, run records,
// knowledge, tokens and schedules, on SQLite or PostgreSQL.
type Store struct {
	db       *gorm.DB
	readers  *sql.DB // SQLite's read-only connections (nil on PostgreSQL)
	stmts    stmtCache
	wstmts   stmtCache // the SQLite writer's (steps.go)
	postgres bool
	docs     *docCache // finished runs' documents (nil: none kept)
	// Now is the clock; tests may replace it.
	Now func() time.Time
}

// Open connects to the store the DSN names and migrates it. A DSN starting
// with postgres:// or postgresql:// is PostgreSQL; anything else is a SQLite
// file: a path, sqlite://path or file:path. The pools are DefaultPool's.
func Open(ctx context.Context, dsn string) (*Store, error) {
	return OpenPool(ctx, dsn, DefaultPool())
}

// OpenPool is Open with the given connection pools.
func OpenPool(ctx context.Context, dsn string, pool Pool) (*Store, error) {
	if err := pool.Validate(); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	cfg := &gorm.Config{
		Logger:         logger.Default.LogMode(logger.Silent),
		TranslateError: true,
		NowFunc:        func() time.Time { return time.Now().UTC() },
	}
	var (
		db      *gorm.DB
		err     error
		pg      bool
		readers *sql.DB
	)
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		pg = true
		db, err = gorm.Open(postgres.Open(dsn), cfg)
		if err == nil {
			sqlDB, err2 := db.DB()
			if err2 != nil {
				return nil, err2
			}
			pool.apply(sqlDB, pool.MaxOpenConns)
		}
	default:
		path, err2 := sqlitePath(dsn)
		if err2 != nil {
			return nil, err2
		}
		if dir := filepath.Dir(path); dir != "." {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, fmt.Errorf("create store directory: %w", err)
			}
		}
		full := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)&_txlock=immediate"
		db, err = gorm.Open(sqlite.Dialector{DriverName: "sqlite", DSN: full}, cfg)
		if err == nil {
			sqlDB, err2 := db.DB()
			if err2 != nil {
				return nil, err2
			}
			// One writer at a time: SQLite serializes writes anyway, and more
			// connections only add SQLITE_BUSY. Reads go to readers.
			pool.apply(sqlDB, 1)
			if readers, err = sqliteReaders(db, full, pool); err != nil {
				_ = sqlDB.Close()
				return nil, err
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	s := &Store{db: db, readers: readers, postgres: pg, docs: newDocCache(pool.FinishedRunCacheTTL), Now: func() time.Time { return time.Now().UTC() }}
	if err := s.migrate(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

func sqlitePath(dsn string) (string, error) {
	path := dsn
	for _, p := range []string{"sqlite://", "sqlite3://", "file:"} {
		path = strings.TrimPrefix(path, p)
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	if path == "" {
		return "", fmt.Errorf("open store: empty SQLite path in DSN %q", dsn)
	}
	return path, nil
}

// Close releases the connection pool.
func (s *Store) Close() error {
	sqlDB, err := s.db.DB()
	if err != nil {
		return err
	}
	s.stmts.close()
	if s.readers != nil {
		_ = s.readers.Close()
	}
	return sqlDB.Close()
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	sqlDB, err := s.db.DB()
	if err != nil {
		return err
	}
	return sqlDB.PingContext(ctx)
}

// IsPostgres tells whether the store runs on PostgreSQL.
func (s *Store) IsPostgres() bool { return s.postgres }

func (s *Store) migrate(ctx context.Context) error {
	db := s.db.WithContext(ctx)
	for _, k := range []kind{jobKind, lineKind} {
		if err := db.Table(k.defs).AutoMigrate(&definitionModel{}); err != nil {
			return fmt.Errorf("migrate store: %w", err)
		}
		if err := db.Table(k.versions).AutoMigrate(&versionModel{}); err != nil {
			return fmt.Errorf("migrate store: %w", err)
		}
	}
	err := db.AutoMigrate(
		&knowledgeItemModel{}, &knowledgeVersionModel{}, &tokenModel{},
		&jobRunModel{}, &stepLogModel{}, &lineRunModel{}, &lineScheduleModel{}, &sandboxSessionModel{}, &inferenceTokenModel{},
	)
	if err != nil {
		return fmt.Errorf("migrate store: %w", err)
	}
	for _, stmt := range []string{
		"CREATE UNIQUE INDEX IF NOT EXISTS idx_job_versions_name_number ON job_versions (name, version_number)",
		"CREATE UNIQUE INDEX IF NOT EXISTS idx_line_versions_name_number ON line_versions (name, version_number)",
		"CREATE UNIQUE INDEX IF NOT EXISTS idx_knowledge_versions_item_number ON knowledge_versions (identifier, version_number)",
	} {
		if err := s.db.WithContext(ctx).Exec(stmt).Error; err != nil {
			return fmt.Errorf("migrate store: %w", err)
		}
	}
	if err := s.migrateLineRuns(ctx); err != nil {
		return fmt.Errorf("migrate store: %w", err)
	}
	if err := s.migrateLineRunList(ctx); err != nil {
		return fmt.Errorf("migrate store: %w", err)
	}
	if err := s.migrateRunSearch(ctx); err != nil {
		return fmt.Errorf("migrate store: %w", err)
	}
	if err := s.migrateWorkers(ctx); err != nil {
		return fmt.Errorf("migrate store: %w", err)
	}
	if err := s.migrateJobRunSteps(ctx); err != nil {
		return fmt.Errorf("migrate store: %w", err)
	}
	if err := s.migrateIndexes(ctx); err != nil {
		return fmt.Errorf("migrate store: %w", err)
	}
	return nil
}

func (s *Store) now() time.Time { return s.Now().UTC() }

// NewID returns a new opaque, time-sortable id with the given prefix, such as
// "jr_0190f3c2…".
func NewID(prefix string) string { return run.NewID(prefix) }

// translate maps GORM errors to the store's sentinels.
func translate(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, gorm.ErrRecordNotFound):
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	case isDuplicate(err), errors.Is(err, gorm.ErrForeignKeyViolated):
		return fmt.Errorf("%s: %w", what, ErrConflict)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// isDuplicate tells a unique-constraint violation. GORM translates
// PostgreSQL's on its own path; PostgreSQL's code (writes below GORM,
// writeTx) and the pure-Go SQLite driver's are checked here.
func isDuplicate(err error) bool {
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		return true
	}
	if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "23505" { // unique_violation
		return true
	}
	var se *sqlitedrv.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return true
		}
	}
	return false
}

// forUpdate locks the selected rows on PostgreSQL (SQLite serializes writes
// on its own and has no FOR UPDATE).
func (s *Store) forUpdate(tx *gorm.DB) *gorm.DB {
	if s.postgres {
		return tx.Clauses(clause.Locking{Strength: "UPDATE"})
	}
	return tx
}

// JSON is a column holding a value as JSON: jsonb on PostgreSQL, text on
// SQLite.
type JSON[T any] struct {
	V T
}

// Value encodes the value.
func (j JSON[T]) Value() (driver.Value, error) {
	b, err := json.Marshal(j.V)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// Scan decodes the value.
func (j *JSON[T]) Scan(src any) error {
	var b []byte
	switch x := src.(type) {
	case nil:
		var zero T
		j.V = zero
		return nil
	case []byte:
		b = x
	case string:
		b = []byte(x)
	default:
		return fmt.Errorf("JSON column: unexpected %T", src)
	}
	return json.Unmarshal(b, &j.V)
}

// GormDBDataType picks the column type per database.
func (JSON[T]) GormDBDataType(db *gorm.DB, _ *schema.Field) string {
	if db.Dialector.Name() == "postgres" {
		return "jsonb"
	}
	return "text"
}

// byteOrder is an ascending ORDER BY on a text column in byte order.
// PostgreSQL otherwise follows the database collation ("a-b" after "aB" under
// en_US), SQLite's default BINARY collation is byte order already.
func (s *Store) byteOrder(column string) string {
	if s.postgres {
		return column + ` COLLATE "C" asc`
	}
	return column + " asc"
}

func clampPage(limit, offset int) (int, int) {
	if limit <= 0 {
		limit = 50
	}
	if offset < 0 {
		offset = 0
	}
	return limit, offset
}
