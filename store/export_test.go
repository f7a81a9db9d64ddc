package store

import (
	"context"

	"gorm.io/gorm"
)

// DBForTest exposes the connection to the store's external tests.
func DBForTest(s *Store) *gorm.DB { return s.db }

// MigrateForTest runs the store's migrations again, as opening an existing
// data directory does.
func MigrateForTest(s *Store) error { return s.migrate(context.Background()) }

// MigrateJobRunStepsForTest runs the job_run_steps migration alone (the
// whole migrate is not safe to run concurrently in one process: GORM's
// schema cache).
func MigrateJobRunStepsForTest(s *Store) error { return s.migrateJobRunSteps(context.Background()) }
