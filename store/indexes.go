package store

import (
	"context"
	"fmt"
)

// listingIndexes serve the listing orders the run-search indexes
// (runsearch.go: by name or status, then created_at and id, read backwards
// for newest first) do not: a line's runs by status, a job's runs by
// status, a line run's job runs, and a step's log chunks. Without such
// indexes PostgreSQL scanned the created_at index backwards and filtered out
// tens of thousands of rows of other lines.
var listingIndexes = []string{
	"CREATE INDEX IF NOT EXISTS idx_line_runs_line_status_created ON line_runs (line_name, status, created_at DESC, id DESC)",
	"CREATE INDEX IF NOT EXISTS idx_job_runs_job_status_created ON job_runs (job_name, status, created_at DESC, id DESC)",
	"CREATE INDEX IF NOT EXISTS idx_job_runs_line_run_created ON job_runs (line_run_id, created_at DESC, id DESC)",
	"CREATE INDEX IF NOT EXISTS idx_step_logs_run_step_stream ON step_logs (run_id, step, stream)",
}

// byteOrderIndexes serve the name-ordered listings on PostgreSQL, which sort
// in byte order (COLLATE "C", see byteOrder); SQLite's BINARY collation is
// byte order already and its unique indexes serve them.
var byteOrderIndexes = []string{
	`CREATE INDEX IF NOT EXISTS idx_jobs_name_c ON jobs (name COLLATE "C")`,
	`CREATE INDEX IF NOT EXISTS idx_lines_name_c ON lines (name COLLATE "C")`,
	`CREATE INDEX IF NOT EXISTS idx_knowledge_items_identifier_c ON knowledge_items (identifier COLLATE "C")`,
	`CREATE INDEX IF NOT EXISTS idx_tokens_name_c ON tokens (name COLLATE "C")`,
}

func (s *Store) migrateIndexes(ctx context.Context) error {
	stmts := listingIndexes
	if s.postgres {
		stmts = append(append([]string{}, stmts...), byteOrderIndexes...)
	}
	for _, stmt := range stmts {
		if err := s.db.WithContext(ctx).Exec(stmt).Error; err != nil {
			return fmt.Errorf("create index: %w", err)
		}
	}
	return nil
}
