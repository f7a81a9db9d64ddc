package activities

import (
	"context"
	"errors"
	"time"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/store"
)

// Failure is a classified line-run failure (SPEC's LineRunFailure).
type Failure struct {
	Code         string
	Domain       string
	ErrorMessage string
	StageName    *string
	ErrorCode    *string
	FailureClass *string
	Details      map[string]any
}

// FailureDomain says who must fix a failure: the domain of a failure code,
// and for stage_failed the failing job's failure class.
func FailureDomain(code, jobFailureClass string) string {
	switch code {
	case "no_route", "ambiguous_transition", "max_iterations_exhausted", "transition_params_invalid", "stage_params_invalid",
		"budget_exceeded", "line_timeout", "unknown_stage", "manifest_no_stages", "manifest_trigger_invalid":
		return "config"
	case "job_result_invalid", "job_outputs_invalid":
		return "contract"
	case "dispatch_failed", "line_state_invalid":
		return "platform"
	case "user_cancelled", "control_payload_invalid", "control_target_invalid", "control_missing_id", "control_wait_expired",
		"control_wait_unknown_selection", "control_stop_not_applied", "retry_snapshot_invalid", "routing_wait_expired":
		return "user"
	case "ambiguous_agentic_transition":
		return "agent"
	case "stage_failed":
		switch jobFailureClass {
		case "infra", "agent", "config", "contract", "user", "platform":
			return jobFailureClass
		}
	}
	return "unknown"
}

// RecordTurnInput records one manager turn.
type RecordTurnInput struct {
	RunID         string
	WorkflowRunID string
	State         string
	StartedAt     time.Time
	Turn          int // 1-based turn number
}

// RecordTurn appends a manager turn; the first turn marks the run running.
func (a *Activities) RecordTurn(ctx context.Context, in RecordTurnInput) (store.LineRun, error) {
	return a.Store.UpdateLineRun(ctx, in.RunID, func(r *store.LineRun) error {
		if len(r.ManagerTurns) >= in.Turn {
			return nil // a retried activity
		}
		if n := len(r.ManagerTurns); n > 0 && r.ManagerTurns[n-1].State != "completed" {
			r.ManagerTurns[n-1].State = "continued_as_new"
		}
		at := in.StartedAt.UTC()
		r.ManagerTurns = append(r.ManagerTurns, store.ManagerTurn{WorkflowRunID: in.WorkflowRunID, State: in.State, StartedAt: &at})
		if r.Status == StatusQueued {
			r.Status = StatusRunning
			r.StartedAt = &at
		}
		return nil
	})
}

// CreateStageRunInput makes the job run of a stage visit.
type CreateStageRunInput struct {
	JobRunID     string
	LineRunID    string
	Stage        string
	JobName      string
	JobVersionID string
	ParamSpecs   map[string]manifests.JobParamSpec
	Params       map[string]any
}

// CreateStageRunResult is the created job run, or the problems of its params.
type CreateStageRunResult struct {
	JobRunID string
	Params   map[string]any
	Problems string
}

// CreateStageRun checks the stage's params against its job and stores the
// queued job run (idempotent on its id).
func (a *Activities) CreateStageRun(ctx context.Context, in CreateStageRunInput) (CreateStageRunResult, error) {
	params, ps := manifests.ApplyParams(in.ParamSpecs, in.Params)
	if ps != nil {
		return CreateStageRunResult{Problems: ps.Error()}, nil
	}
	lr, stage := in.LineRunID, in.Stage
	_, err := a.Store.CreateJobRun(ctx, store.JobRun{ID: in.JobRunID, JobName: in.JobName, JobVersionID: in.JobVersionID,
		Status: StatusQueued, RunParams: params, LineRunID: &lr, StageName: &stage, WorkflowID: "jobrun/" + in.JobRunID})
	if err != nil && !errors.Is(err, store.ErrConflict) {
		return CreateStageRunResult{}, err
	}
	return CreateStageRunResult{JobRunID: in.JobRunID, Params: params}, nil
}

// StageVisit is one finished stage visit.
type StageVisit struct {
	Stage        string
	JobRunID     string
	Iteration    int
	Order        int
	Status       string
	Outputs      map[string]any
	CostCents    int64
	ErrorCode    string
	ErrorMessage string
	FailureClass string
}

// RecordStageInput records a stage visit.
type RecordStageInput struct {
	RunID string
	Visit StageVisit
}

// RecordStage appends a stage visit to the line run with its costs,
// outputs and artifacts.
func (a *Activities) RecordStage(ctx context.Context, in RecordStageInput) (store.LineRun, error) {
	v := in.Visit
	var (
		artifacts []map[string]any
		started   *time.Time
	)
	if jr, err := a.Store.GetJobRun(ctx, v.JobRunID); err == nil {
		artifacts, started = jr.ArtifactRefs, jr.StartedAt
	}
	now := a.now()
	return a.Store.UpdateLineRun(ctx, in.RunID, func(r *store.LineRun) error {
		for _, s := range r.Stages {
			if s.JobRunID != nil && *s.JobRunID == v.JobRunID {
				return nil // a retried activity
			}
		}
		id := v.JobRunID
		r.Stages = append(r.Stages, store.LineRunStage{StageName: v.Stage, StageOrder: v.Order, Iteration: v.Iteration,
			Status: v.Status, JobRunID: &id, ComputeCostCents: v.CostCents, TotalCostCents: v.CostCents, CostRatedAt: &now,
			StartedAt: started, CompletedAt: &now, ArtifactCount: len(artifacts)})
		if v.Outputs != nil {
			r.StageOutputs[v.Stage] = v.Outputs
		}
		for _, art := range artifacts {
			summary := map[string]any{}
			for _, k := range []string{"type", "provider", "url", "title", "external_ref"} {
				if val, ok := art[k]; ok {
					summary[k] = val
				}
			}
			r.Artifacts = append(r.Artifacts, summary)
		}
		r.ArtifactCount = len(r.Artifacts)
		r.ComputeCostCents += v.CostCents
		r.TotalCostCents = r.ComputeCostCents + r.InferenceCostCents
		r.CostRatedAt = &now
		return nil
	})
}

// RecordTransitionInput records a routing decision.
type RecordTransitionInput struct {
	RunID     string
	ID        string
	From      string
	To        string
	Iteration int
	At        time.Time
}

// RecordTransition appends a taken transition and sets the outcome of the
// stage visit it leaves.
func (a *Activities) RecordTransition(ctx context.Context, in RecordTransitionInput) (store.LineRun, error) {
	return a.Store.UpdateLineRun(ctx, in.RunID, func(r *store.LineRun) error {
		for _, t := range r.Transitions {
			if t.ID == in.ID && t.Iteration == in.Iteration {
				return nil
			}
		}
		r.Transitions = append(r.Transitions, store.TakenTransition{ID: in.ID, From: in.From, To: in.To, Iteration: in.Iteration, TakenAt: in.At.UTC()})
		for i := len(r.Stages) - 1; i >= 0; i-- {
			if r.Stages[i].StageName == in.From {
				id := in.ID
				r.Stages[i].Outcome = &id
				break
			}
		}
		return nil
	})
}

// FinishLineRunInput ends a line run.
type FinishLineRunInput struct {
	RunID   string
	Status  string
	Failure *Failure
}

// FinishLineRun writes the final status and the classified failure,
// enriched with the failing job run's step diagnostics.
func (a *Activities) FinishLineRun(ctx context.Context, in FinishLineRunInput) error {
	var jr *store.JobRun
	if f := in.Failure; f != nil && f.Details != nil {
		if id, ok := f.Details["job_run_id"].(string); ok {
			if r, err := a.Store.GetJobRun(ctx, id); err == nil {
				jr = &r
			}
		}
	}
	now := a.now()
	_, err := a.Store.UpdateLineRun(ctx, in.RunID, func(r *store.LineRun) error {
		r.Status = in.Status
		r.CompletedAt = &now
		if n := len(r.ManagerTurns); n > 0 {
			r.ManagerTurns[n-1].State = "completed"
		}
		if f := in.Failure; f != nil {
			code := f.Code
			msg := f.ErrorMessage
			if r.StopReason != nil && code == "user_cancelled" {
				msg = "stopped: " + *r.StopReason
			}
			lf := &store.LineRunFailure{Code: &code, Domain: f.Domain, ErrorMessage: &msg, StageName: f.StageName,
				ErrorCode: f.ErrorCode, FailureClass: f.FailureClass, ErrorDetails: f.Details}
			if jr != nil {
				for _, e := range jr.StepTimeline {
					if e.Status == StatusFailed || e.Status == StatusTimedOut {
						step, task := e.Name, e.TaskName
						lf.StageStep, lf.TaskName = &step, &task
						if lf.ErrorDetails == nil {
							lf.ErrorDetails = map[string]any{}
						}
						if e.ExitCode != nil {
							lf.ErrorDetails["exit_code"] = *e.ExitCode
						}
						if e.ErrorMessage != nil {
							lf.ErrorDetails["step_error"] = *e.ErrorMessage
						}
						break
					}
				}
			}
			r.Failure = lf
			r.ErrorMessage = &msg
		}
		return nil
	})
	return err
}
