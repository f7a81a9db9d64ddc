package api

import (
	"context"
	"time"

	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// workflowDescriber tells a workflow's state; the engine behind Config.Runs
// implements it (the reconciler's view).
type workflowDescriber interface {
	DescribeWorkflow(ctx context.Context, workflowID string) (run.WorkflowState, error)
}

// orphaned tells whether a run's workflow no longer runs (missing or
// closed), so that nothing but the API will ever end its record.
func (s *Server) orphaned(ctx context.Context, workflowID string) bool {
	d, ok := s.cfg.Runs.(workflowDescriber)
	if !ok || workflowID == "" {
		return false
	}
	ws, err := d.DescribeWorkflow(ctx, workflowID)
	return err == nil && ws.State != run.WorkflowRunning
}

// endStoppedJobRun ends a stopped job run cancelled at once when its
// workflow no longer runs (never started, lost, terminated): a stop always
// ends the run cancelled.
func (s *Server) endStoppedJobRun(ctx context.Context, r store.JobRun, reason string) {
	if !s.orphaned(ctx, r.WorkflowID) {
		return
	}
	now := time.Now().UTC()
	o := run.Outcome{Status: run.Cancelled, ErrorCode: run.CodeCancelled, FailureClass: run.ClassUser, ErrorMessage: run.StopMessage(reason)}
	_, err := s.store.UpdateJobRun(context.WithoutCancel(ctx), r.ID, func(j *store.JobRun) error {
		if !run.JobRun.Terminal(j.Status) {
			j.EndUnfinished(o, now)
		}
		return nil
	})
	if err != nil {
		s.log.Warn("end a stopped job run without a workflow", "run_id", r.ID, "error", err.Error())
	}
}

// endStoppedLineRun is endStoppedJobRun for line runs.
func (s *Server) endStoppedLineRun(ctx context.Context, r store.LineRun, reason string) {
	if !s.orphaned(ctx, r.WorkflowID) {
		return
	}
	now := time.Now().UTC()
	_, err := s.store.UpdateLineRun(context.WithoutCancel(ctx), r.ID, func(l *store.LineRun) error {
		if !run.LineRun.Terminal(l.Status) {
			l.EndUnfinished(run.Cancelled, run.NewFailure(run.UserCancelled, run.StopMessage(reason)), now)
		}
		return nil
	})
	if err != nil {
		s.log.Warn("end a stopped line run without a workflow", "run_id", r.ID, "error", err.Error())
	}
}
