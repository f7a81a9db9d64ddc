package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// WorkflowState is what the engine knows of a workflow (run.WorkflowState).
type WorkflowState = run.WorkflowState

// Workflow states, as the engine reports them.
const (
	WorkflowMissing    = run.WorkflowMissing
	WorkflowRunning    = run.WorkflowRunning
	WorkflowCompleted  = run.WorkflowCompleted
	WorkflowFailed     = run.WorkflowFailed
	WorkflowCancelled  = run.WorkflowCancelled
	WorkflowTerminated = run.WorkflowTerminated
	WorkflowTimedOut   = run.WorkflowTimedOut
)

// Engine tells the state of a workflow by its id.
type Engine interface {
	DescribeWorkflow(ctx context.Context, workflowID string) (WorkflowState, error)
}

// ReconcileStore is what the reconciler needs of the store.
type ReconcileStore interface {
	UnfinishedJobRuns(ctx context.Context, queuedBefore time.Time, limit int) ([]store.JobRun, error)
	UnfinishedLineRuns(ctx context.Context, queuedBefore time.Time, limit int) ([]store.LineRun, error)
	UpdateJobRun(ctx context.Context, id string, change func(*store.JobRun) error) (store.JobRun, error)
	UpdateLineRun(ctx context.Context, id string, change func(*store.LineRun) error) (store.LineRun, error)
}

// DefaultReconcileGrace is how old a queued record must be before the
// reconciler looks at it: admission records a run, then starts its
// workflow, and the record is not "never started" in between.
const DefaultReconcileGrace = 15 * time.Second

// Reconciler finishes run records the engine no longer runs: a record
// queued or running whose workflow is missing, closed, terminated or timed
// out ends from the engine's truth (a completed workflow's result applied,
// a missing one failed dispatch_failed when it never started, else
// unknown). Several reconcilers (one per worker process) may run at once:
// each finish is a conditional update of a record still unfinished to the
// outcome the engine dictates, so two of them apply it once.
type Reconciler struct {
	Store  ReconcileStore
	Engine Engine
	Logger *slog.Logger
	Now    func() time.Time
	// Grace: see DefaultReconcileGrace.
	Grace time.Duration
}

// reconcileBatch bounds the records one pass looks at per kind.
const reconcileBatch = 500

// Run reconciles every interval until ctx is done.
func (r *Reconciler) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := r.Once(ctx); err != nil && ctx.Err() == nil && r.Logger != nil {
			r.Logger.Warn("reconcile runs", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *Reconciler) now() time.Time {
	if r.Now == nil {
		return time.Now().UTC()
	}
	return r.Now().UTC()
}

// Once makes one pass and returns how many records it finished.
func (r *Reconciler) Once(ctx context.Context) (int, error) {
	grace := r.Grace
	if grace <= 0 {
		grace = DefaultReconcileGrace
	}
	before := r.now().Add(-grace)
	jobs, err := r.Store.UnfinishedJobRuns(ctx, before, reconcileBatch)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, run := range jobs {
		done, err := r.job(ctx, run)
		if done {
			n++
		}
		errs = append(errs, err)
	}
	lines, err := r.Store.UnfinishedLineRuns(ctx, before, reconcileBatch)
	if err != nil {
		return n, err
	}
	for _, run := range lines {
		done, err := r.line(ctx, run)
		if done {
			n++
		}
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

// ending is how a reconciled run ends: a job run's outcome, a line run's
// failure.
type ending struct {
	job  run.Outcome
	line *run.Failure
}

// endingOf is the end the engine's state dictates for a record, or false
// when its workflow still runs.
func endingOf(ws WorkflowState, queued bool, workflowID string) (ending, bool) {
	unknown := func(msg string) ending {
		return ending{job: run.Fail(run.CodeUnknown, run.FailureClass(run.CodeUnknown), msg),
			line: &run.Failure{Code: run.UnknownFailure, Domain: run.DomainUnknown, ErrorMessage: msg}}
	}
	switch ws.State {
	case WorkflowRunning:
		return ending{}, false
	case WorkflowMissing:
		if queued {
			msg := fmt.Sprintf("the run was never started: the workflow engine has no workflow %s", workflowID)
			return ending{job: run.Fail(run.CodeDispatchFailed, run.ClassPlatform, msg), line: run.NewFailure(run.DispatchFailed, msg)}, true
		}
		return unknown(fmt.Sprintf("the run's workflow %s no longer exists in the workflow engine", workflowID)), true
	case WorkflowCancelled:
		return cancelled("the run's workflow was cancelled"), true
	case WorkflowTerminated:
		return unknown(fmt.Sprintf("the run's workflow %s was terminated in the workflow engine%s", workflowID, detail(ws.Detail))), true
	case WorkflowTimedOut:
		return unknown(fmt.Sprintf("the run's workflow %s timed out in the workflow engine", workflowID)), true
	case WorkflowFailed:
		return unknown(fmt.Sprintf("the run's workflow %s failed%s", workflowID, detail(ws.Detail))), true
	}
	return unknown(fmt.Sprintf("the run's workflow %s completed without recording the run's end", workflowID)), true
}

// cancelled is the end of a stopped run.
func cancelled(msg string) ending {
	return ending{job: run.Outcome{Status: run.Cancelled, ErrorCode: run.CodeCancelled, FailureClass: run.ClassUser, ErrorMessage: msg},
		line: run.NewFailure(run.UserCancelled, msg)}
}

func detail(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

func (r *Reconciler) job(ctx context.Context, rec store.JobRun) (bool, error) {
	ws, err := r.Engine.DescribeWorkflow(ctx, rec.WorkflowID)
	if err != nil {
		return false, fmt.Errorf("describe %s: %w", rec.WorkflowID, err)
	}
	end, done := endingOf(ws, rec.Status == run.Queued, rec.WorkflowID)
	if !done {
		return false, nil
	}
	if ws.State == WorkflowCompleted && ws.Result != nil {
		var res FinishRunResult
		if ws.Result(&res) == nil && run.JobRun.Terminal(res.Status) {
			end.job = res.Outcome
		}
	}
	if rec.StopReason != nil && end.job.Status != run.Succeeded {
		end = cancelled(run.StopMessage(*rec.StopReason)) // a stop was asked: the run ends as it promised
	}
	changed := false
	now := r.now()
	_, err = r.Store.UpdateJobRun(ctx, rec.ID, func(j *store.JobRun) error {
		if run.JobRun.Terminal(j.Status) {
			return nil
		}
		changed = true
		j.EndUnfinished(end.job, now)
		return nil
	})
	if changed && err == nil && r.Logger != nil {
		r.Logger.Warn("reconciled a job run with the workflow engine", slog.String("run_id", rec.ID),
			slog.String("status", string(end.job.Status)), slog.String("reason", end.job.ErrorMessage))
	}
	return changed && err == nil, err
}

func (r *Reconciler) line(ctx context.Context, rec store.LineRun) (bool, error) {
	ws, err := r.Engine.DescribeWorkflow(ctx, rec.WorkflowID)
	if err != nil {
		return false, fmt.Errorf("describe %s: %w", rec.WorkflowID, err)
	}
	end, done := endingOf(ws, rec.Status == run.Queued, rec.WorkflowID)
	if !done {
		return false, nil
	}
	status := end.job.Status
	if ws.State == WorkflowCompleted && ws.Result != nil {
		var res struct {
			Status  run.Status
			Failure *run.Failure
		}
		if ws.Result(&res) == nil && run.LineRun.Terminal(res.Status) {
			status = res.Status
			if res.Failure != nil {
				end.line = res.Failure
			}
		}
	}
	if rec.StopReason != nil && status != run.Succeeded {
		end = cancelled(run.StopMessage(*rec.StopReason))
		status = run.Cancelled
	}
	changed := false
	now := r.now()
	_, err = r.Store.UpdateLineRun(ctx, rec.ID, func(l *store.LineRun) error {
		if run.LineRun.Terminal(l.Status) {
			return nil
		}
		changed = true
		l.EndUnfinished(status, end.line, now)
		return nil
	})
	if changed && err == nil && r.Logger != nil {
		r.Logger.Warn("reconciled a line run with the workflow engine", slog.String("run_id", rec.ID),
			slog.String("status", string(status)), slog.String("reason", end.line.ErrorMessage))
	}
	return changed && err == nil, err
}
