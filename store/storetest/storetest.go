// Package storetest opens real stores for tests: a SQLite file in a temporary
// directory, and PostgreSQL (a fresh schema per test) when
// FACTORY_TEST_POSTGRES_DSN is set.
package storetest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/linefactory/linefactory/store"
)

// PostgresEnv names the variable holding the PostgreSQL DSN for tests.
const PostgresEnv = "FACTORY_TEST_POSTGRES_DSN"

// SQLite opens a store on a fresh SQLite file.
func SQLite(t testing.TB) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "factory.db"))
	if err != nil {
		t.Fatalf("open sqlite store: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

var warnOnce sync.Once

// Postgres opens a store in a fresh schema of the database named by
// FACTORY_TEST_POSTGRES_DSN, dropped when the test ends. It skips the test,
// loudly, when the variable is unset.
func Postgres(t testing.TB) *store.Store {
	t.Helper()
	dsn := os.Getenv(PostgresEnv)
	if dsn == "" {
		warnOnce.Do(func() { fmt.Fprintf(os.Stderr, "WARNING: %s is unset: PostgreSQL tests are SKIPPED\n", PostgresEnv) })
		t.Skipf("SKIPPING PostgreSQL: %s is unset", PostgresEnv)
	}
	s, err := store.Open(context.Background(), FreshSchema(t, dsn, "t"))
	if err != nil {
		t.Fatalf("open postgres store: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// FreshSchema makes a schema (its name starting with prefix) in the
// PostgreSQL database dsn names, dropped when the test ends, and returns
// dsn with that schema as its search path.
func FreshSchema(t testing.TB, dsn, prefix string) string {
	t.Helper()
	schema := fmt.Sprintf("%s_%d_%d", prefix, time.Now().UnixNano(), os.Getpid())
	admin, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	if err := admin.Exec("CREATE SCHEMA " + schema).Error; err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		admin.Exec("DROP SCHEMA " + schema + " CASCADE")
		if db, err := admin.DB(); err == nil {
			_ = db.Close()
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("parse the PostgreSQL DSN: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// ForEach runs a test on a SQLite store and on a PostgreSQL store.
func ForEach(t *testing.T, test func(t *testing.T, s *store.Store)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) { test(t, SQLite(t)) })
	t.Run("postgres", func(t *testing.T) { test(t, Postgres(t)) })
}
