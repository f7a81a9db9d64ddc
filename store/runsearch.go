package store

import (
	"context"
	"fmt"
	"time"

	"github.com/linefactory/linefactory/manifests/run"
)

// RunSearch selects runs across all jobs or lines; empty fields match all.
// Runs come newest first (created_at, then id, descending).
type RunSearch struct {
	// Name is the job name (job runs) or the line name (line runs).
	Name   string
	Status run.Status
	// LineRunID selects the job runs of one line run (job runs only).
	LineRunID string
	// Since keeps runs created at or after it; zero keeps all.
	Since  time.Time
	Limit  int
	Offset int
	// WithoutTimeline leaves each job run's StepTimeline empty, unread
	// (job runs only; see JobRunFilter).
	WithoutTimeline bool
}

// runSearchIndexes serve RunSearch's filters in its order, so a page of
// the newest runs of a status or a name is an index range scan.
var runSearchIndexes = []string{
	"CREATE INDEX IF NOT EXISTS idx_job_runs_created ON job_runs (created_at, id)",
	"CREATE INDEX IF NOT EXISTS idx_job_runs_name_created ON job_runs (job_name, created_at, id)",
	"CREATE INDEX IF NOT EXISTS idx_job_runs_status_created ON job_runs (status, created_at, id)",
	"CREATE INDEX IF NOT EXISTS idx_line_runs_created ON line_runs (created_at, id)",
	"CREATE INDEX IF NOT EXISTS idx_line_runs_name_created ON line_runs (line_name, created_at, id)",
	"CREATE INDEX IF NOT EXISTS idx_line_runs_status_created ON line_runs (status, created_at, id)",
	"CREATE INDEX IF NOT EXISTS idx_step_logs_run_seq ON step_logs (run_id, seq)",
}

func (s *Store) migrateRunSearch(ctx context.Context) error {
	for _, stmt := range runSearchIndexes {
		if err := s.db.WithContext(ctx).Exec(stmt).Error; err != nil {
			return fmt.Errorf("create run search index: %w", err)
		}
	}
	return nil
}

// SearchJobRuns lists job runs of every job, newest first.
func (s *Store) SearchJobRuns(ctx context.Context, f RunSearch) ([]JobRun, error) {
	limit, offset := clampPage(f.Limit, f.Offset)
	q := s.db.WithContext(ctx).Model(&jobRunModel{})
	if f.Name != "" {
		q = q.Where("job_name = ?", f.Name)
	}
	if f.Status != "" {
		q = q.Where("status = ?", f.Status)
	}
	if f.LineRunID != "" {
		q = q.Where("line_run_id = ?", f.LineRunID)
	}
	if !f.Since.IsZero() {
		q = q.Where("created_at >= ?", f.Since.UTC())
	}
	var rows []jobRunModel
	if err := q.Order("created_at desc, id desc").Limit(limit).Offset(offset).Find(&rows).Error; err != nil {
		return nil, translate(err, "search job runs")
	}
	return s.jobRuns(ctx, rows, !f.WithoutTimeline, "search job runs")
}

// SearchLineRuns lists line runs of every line, newest first.
func (s *Store) SearchLineRuns(ctx context.Context, f RunSearch) ([]LineRun, error) {
	limit, offset := clampPage(f.Limit, f.Offset)
	q := s.db.WithContext(ctx).Model(&lineRunModel{}).Select("doc")
	if f.Name != "" {
		q = q.Where("line_name = ?", f.Name)
	}
	if f.Status != "" {
		q = q.Where("status = ?", f.Status)
	}
	if !f.Since.IsZero() {
		q = q.Where("created_at >= ?", f.Since.UTC())
	}
	var rows []lineRunModel
	if err := q.Order("created_at desc, id desc").Limit(limit).Offset(offset).Find(&rows).Error; err != nil {
		return nil, translate(err, "search line runs")
	}
	out := make([]LineRun, len(rows))
	for i, r := range rows {
		out[i] = r.Doc.V
	}
	return out, nil
}

// LineRunJobRunIDs returns the ids of the job runs a line run started
// (every stage visit and attempt), oldest first.
func (s *Store) LineRunJobRunIDs(ctx context.Context, lineRunID string) ([]string, error) {
	var ids []string
	err := s.db.WithContext(ctx).Model(&jobRunModel{}).Where("line_run_id = ?", lineRunID).
		Order("created_at asc, id asc").Pluck("id", &ids).Error
	if err != nil {
		return nil, translate(err, "list a line run's job runs")
	}
	return ids, nil
}

// RunLogChunk is a LogChunk of one of several runs.
type RunLogChunk struct {
	RunID string
	LogChunk
}

// ReadRunsLogs returns the chunks of several runs after sequence number
// afterSeq, in the order they were written (sequence numbers are global,
// so chunks of runs that ran at the same time interleave as they came).
// At most 1000 chunks are returned per call.
func (s *Store) ReadRunsLogs(ctx context.Context, runIDs []string, afterSeq int64) ([]RunLogChunk, error) {
	if len(runIDs) == 0 {
		return nil, nil
	}
	var rows []stepLogModel
	err := s.db.WithContext(ctx).Where("run_id IN ? AND seq > ?", runIDs, afterSeq).Order("seq asc").Limit(1000).Find(&rows).Error
	if err != nil {
		return nil, translate(err, "read run logs")
	}
	out := make([]RunLogChunk, len(rows))
	for i, r := range rows {
		out[i] = RunLogChunk{RunID: r.RunID, LogChunk: LogChunk{Seq: r.Seq, Step: r.Step, Stream: r.Stream, Data: r.Data, CreatedAt: r.CreatedAt.UTC()}}
	}
	return out, nil
}
