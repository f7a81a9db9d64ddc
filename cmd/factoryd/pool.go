package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/linefactory/linefactory/store"
)

// poolFromEnv reads the store's connection pools over store.DefaultPool:
//
//	FACTORY_DB_MAX_OPEN_CONNS      PostgreSQL connections at most (32)
//	FACTORY_DB_MAX_IDLE_CONNS      of them kept open while idle (32)
//	FACTORY_DB_CONN_MAX_LIFETIME   a connection is replaced after (30m; 0 = never)
//	FACTORY_DB_CONN_MAX_IDLE_TIME  an idle connection is closed after (5m; 0 = never)
//	FACTORY_SQLITE_READERS         SQLite read-only connections beside the one writer (4)
//	FACTORY_FINISHED_RUN_CACHE_TTL a finished run's document is served from memory for (1s; 0 = never)
func poolFromEnv() (store.Pool, error) {
	p := store.DefaultPool()
	for _, v := range []struct {
		name string
		dst  *int
	}{{"FACTORY_DB_MAX_OPEN_CONNS", &p.MaxOpenConns}, {"FACTORY_DB_MAX_IDLE_CONNS", &p.MaxIdleConns}, {"FACTORY_SQLITE_READERS", &p.SQLiteReaders}} {
		raw := os.Getenv(v.name)
		if raw == "" {
			continue
		}
		n, err := strconv.Atoi(raw)
		if err != nil || n < 0 {
			return p, fmt.Errorf("%s: %q is not a non-negative integer", v.name, raw)
		}
		*v.dst = n
	}
	for _, v := range []struct {
		name string
		dst  *time.Duration
	}{{"FACTORY_DB_CONN_MAX_LIFETIME", &p.ConnMaxLifetime}, {"FACTORY_DB_CONN_MAX_IDLE_TIME", &p.ConnMaxIdleTime}, {"FACTORY_FINISHED_RUN_CACHE_TTL", &p.FinishedRunCacheTTL}} {
		raw := os.Getenv(v.name)
		if raw == "" {
			continue
		}
		d, err := time.ParseDuration(raw)
		if err != nil || d < 0 {
			return p, fmt.Errorf("%s: %q is not a duration such as 30m", v.name, raw)
		}
		*v.dst = d
	}
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("store pool: %w", err)
	}
	return p, nil
}
