package store

import (
	"context"
	"time"

	"github.com/linefactory/linefactory/manifests/run"
)

// UnfinishedJobRuns lists job runs still running, and those still queued
// that were created before queuedBefore, oldest first (the reconciler's
// work).
func (s *Store) UnfinishedJobRuns(ctx context.Context, queuedBefore time.Time, limit int) ([]JobRun, error) {
	var rows []jobRunModel
	err := s.db.WithContext(ctx).Where("status = ? OR (status = ? AND created_at < ?)", string(run.Running), string(run.Queued), queuedBefore).
		Order("created_at, id").Limit(limit).Find(&rows).Error
	if err != nil {
		return nil, translate(err, "list unfinished job runs")
	}
	return s.jobRuns(ctx, rows, true, "list unfinished job runs")
}

// UnfinishedLineRuns lists line runs still running or waiting, and those
// still queued that were created before queuedBefore, oldest first.
func (s *Store) UnfinishedLineRuns(ctx context.Context, queuedBefore time.Time, limit int) ([]LineRun, error) {
	var rows []lineRunModel
	err := s.db.WithContext(ctx).Select("doc").Where("status IN ? OR (status = ? AND created_at < ?)", []string{string(run.Running), string(run.Waiting)}, string(run.Queued), queuedBefore).
		Order("created_at, id").Limit(limit).Find(&rows).Error
	if err != nil {
		return nil, translate(err, "list unfinished line runs")
	}
	out := make([]LineRun, len(rows))
	for i, r := range rows {
		out[i] = r.Doc.V
	}
	return out, nil
}

// EndUnfinished ends a job run record that nothing else will end (its
// workflow is gone) with o, at now: its running steps end with it (failed,
// or cancelled when o is), its pending steps are skipped.
func (r *JobRun) EndUnfinished(o run.Outcome, now time.Time) {
	r.SetOutcome(o)
	r.CompletedAt = &now
	for i := range r.StepTimeline {
		e := &r.StepTimeline[i]
		switch e.Status {
		case run.Running:
			st := run.Failed
			if o.Status == run.Cancelled {
				st = run.Cancelled
			}
			e.SetOutcome(run.Outcome{Status: st, ErrorCode: o.ErrorCode, ErrorMessage: o.ErrorMessage, FailureClass: o.FailureClass})
			e.CompletedAt = &now
		case run.Pending:
			e.Status = run.Skipped
		}
	}
}

// EndUnfinished ends a line run record that nothing else will end with
// status and, unless it succeeded, failure f, at now. Nothing of it stays
// live, as when its manager ends it: its running stage visits end with it
// (failed, or cancelled when it is), a wait is over, the last manager turn
// is completed.
func (l *LineRun) EndUnfinished(status run.Status, f *run.Failure, now time.Time) {
	l.Status, l.CompletedAt = status, &now
	if l.StartedAt == nil {
		l.StartedAt = &now
	}
	l.Waiting = nil
	if n := len(l.ManagerTurns); n > 0 {
		l.ManagerTurns[n-1].State = "completed"
	}
	for i := range l.Stages {
		if v := &l.Stages[i]; v.Status == run.Running {
			v.Status, v.CompletedAt = run.Failed, &now
			if status == run.Cancelled {
				v.Status = run.Cancelled
			}
		}
	}
	if status == run.Succeeded || f == nil {
		return
	}
	msg := f.ErrorMessage
	l.ErrorMessage = &msg
	l.Failure = NewLineRunFailure(*f)
}
