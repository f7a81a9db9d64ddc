package activities

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// RecordTurnInput records one manager turn.
type RecordTurnInput struct {
	RunID         string
	WorkflowRunID string
	State         string
	StartedAt     time.Time
	Turn          int // 1-based turn number
}

// RecordTurnResult is the line run as the turn starts.
type RecordTurnResult struct {
	Status run.Status
	// Record is the line run record as JSON without what grows with the
	// run: its stages, transitions, stage outputs and artifacts are empty
	// and manager_turns holds this turn only, so a turn's history does not
	// grow with the visits before it.
	Record json.RawMessage
}

// RecordTurn appends a manager turn; the first turn marks the run running.
// Several turns share a Temporal run (workflow_run_id) until the manager
// continues as new.
func (a *Activities) RecordTurn(ctx context.Context, in RecordTurnInput) (RecordTurnResult, error) {
	res, err := a.LineWrites(ctx, LineWritesInput{RunID: in.RunID, Turn: &in})
	if err != nil {
		return RecordTurnResult{}, err
	}
	return *res.Turn, nil
}

// applyTurn appends turn to r (once: a retried write finds it there).
func applyTurn(r *store.LineRun, in RecordTurnInput) {
	if len(r.ManagerTurns) >= in.Turn {
		return // a retried activity
	}
	if n := len(r.ManagerTurns); n > 0 && r.ManagerTurns[n-1].State != "completed" {
		// The turn before ended by routing here: in the same Temporal
		// run, or by continuing as new.
		r.ManagerTurns[n-1].State = "continued_as_new"
		if r.ManagerTurns[n-1].WorkflowRunID == in.WorkflowRunID {
			r.ManagerTurns[n-1].State = "continued"
		}
	}
	at := in.StartedAt.UTC()
	r.ManagerTurns = append(r.ManagerTurns, store.ManagerTurn{WorkflowRunID: in.WorkflowRunID, State: in.State, StartedAt: &at})
	if r.Status == run.Queued {
		r.Status = run.Running
		r.StartedAt = &at
	}
}

// turnHead is the record as a turn's result carries it (RecordTurnResult).
func turnHead(r store.LineRun) (json.RawMessage, error) {
	head := r
	head.Stages, head.Transitions, head.Artifacts = []store.LineRunStage{}, []store.TakenTransition{}, []map[string]any{}
	head.StageOutputs = map[string]map[string]any{}
	head.ManagerTurns = r.ManagerTurns[max(0, len(r.ManagerTurns)-1):]
	return json.Marshal(head)
}

// CreateStageRunInput makes the job run of a stage visit.
type CreateStageRunInput struct {
	JobRunID     string
	LineRunID    string
	Stage        string
	JobName      string
	JobVersionID string
	// Region is the job's run.region, recorded from the job run's creation.
	Region string
	// Steps is the number of the job's steps: its params travel with each.
	Steps      int
	ParamSpecs map[string]manifests.JobParamSpec
	Params     map[string]any
	Iteration  int
	Order      int
	At         time.Time
}

// CreateStageRunResult is the created job run, or the problems of its params.
type CreateStageRunResult struct {
	JobRunID string
	Params   map[string]any
	Problems string
	// Visit is the running visit as recorded (SPEC's LineRunStageSummary,
	// as JSON).
	Visit json.RawMessage
}

// stageParamsLimit checks a stage job run's params against the limits a
// job run's start checks (README, Limits): their size, each param's, and
// their size times the job's steps.
func stageParamsLimit(params map[string]any, steps int) *manifests.LimitError {
	if le := manifests.CheckParamsSize(params); le != nil {
		return le
	}
	raw, err := json.Marshal(params)
	if err != nil {
		return nil
	}
	return manifests.CheckStepsHistory(steps, len(raw))
}

// CreateStageRun checks the stage's params against its job, stores the
// queued job run and records the visit as running on the line run
// (idempotent on the job run id).
func (a *Activities) CreateStageRun(ctx context.Context, in CreateStageRunInput) (CreateStageRunResult, error) {
	res, err := a.LineWrites(ctx, LineWritesInput{RunID: in.LineRunID, Create: &in})
	if err != nil {
		return CreateStageRunResult{}, err
	}
	return *res.Create, nil
}

// createStageRun checks the params of a stage visit's job run and stores it
// queued; Problems when the params do not hold.
func (a *Activities) createStageRun(ctx context.Context, in CreateStageRunInput) (CreateStageRunResult, error) {
	params, ps := manifests.ApplyParams(in.ParamSpecs, in.Params)
	if ps != nil {
		return CreateStageRunResult{Problems: ps.Error()}, nil
	}
	if le := stageParamsLimit(params, in.Steps); le != nil { // as a job run's start checks them
		return CreateStageRunResult{Problems: le.Error()}, nil
	}
	lr, stage := in.LineRunID, in.Stage
	_, err := a.Store.CreateJobRun(ctx, store.JobRun{ID: in.JobRunID, JobName: in.JobName, JobVersionID: in.JobVersionID,
		Status: run.Queued, RunParams: params, Region: manifests.RunSection{Region: in.Region}.RegionOrNil(), LineRunID: &lr, StageName: &stage, WorkflowID: run.JobRunWorkflowID(in.JobRunID)})
	if err != nil && !errors.Is(err, store.ErrConflict) {
		return CreateStageRunResult{}, err
	}
	return CreateStageRunResult{JobRunID: in.JobRunID, Params: params}, nil
}

// applyCreate records the visit of a created job run as running on r.
func applyCreate(r *store.LineRun, in CreateStageRunInput) {
	for _, s := range r.Stages {
		if s.JobRunID != nil && *s.JobRunID == in.JobRunID {
			return // a retried activity
		}
	}
	id, at := in.JobRunID, in.At.UTC()
	r.Stages = append(r.Stages, store.LineRunStage{StageName: in.Stage, StageOrder: in.Order, Iteration: in.Iteration,
		Status: run.Running, JobRunID: &id, StartedAt: &at})
}

// findVisit is the stage visit of job run id, or nil.
func findVisit(r store.LineRun, jobRunID string) *store.LineRunStage {
	for i := len(r.Stages) - 1; i >= 0; i-- {
		if id := r.Stages[i].JobRunID; id != nil && *id == jobRunID {
			return &r.Stages[i]
		}
	}
	return nil
}

// StageVisit is one finished stage visit.
type StageVisit struct {
	Stage     string
	JobRunID  string
	Iteration int
	Order     int
	run.Outcome
	Outputs   map[string]any
	CostCents int64
}

// RecordStageInput records a stage visit.
type RecordStageInput struct {
	RunID string
	Visit StageVisit
}

// RecordStageResult is the ended visit as recorded and the line run's
// rated cost so far.
type RecordStageResult struct {
	Visit          json.RawMessage
	TotalCostCents int64
}

// RecordStage ends a stage visit on the line run (updating its running
// entry in place) with the job run's costs, outputs and artifacts. A job run
// that never started (its start failed or a stop came first) is closed with
// the visit's status so nothing stays queued.
func (a *Activities) RecordStage(ctx context.Context, in RecordStageInput) (RecordStageResult, error) {
	res, err := a.LineWrites(ctx, LineWritesInput{RunID: in.RunID, Stage: &in.Visit})
	if err != nil {
		return RecordStageResult{}, err
	}
	return *res.Stage, nil
}

// endedVisit is a stage visit's entry as it ended and its job run's
// artifacts.
type endedVisit struct {
	visit     StageVisit
	entry     store.LineRunStage
	artifacts []map[string]any
}

// endVisit reads the job run of an ended visit, closing it when it never
// recorded its end, and makes the visit's entry.
func (a *Activities) endVisit(ctx context.Context, v StageVisit) (endedVisit, error) {
	now := a.now()
	jr, err := a.Store.GetJobRun(ctx, v.JobRunID)
	found := err == nil
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return endedVisit{}, err
	}
	// The child has closed by now, so a job run that is not final never
	// recorded its end (its start failed, or it was stopped first).
	if found && !run.JobRun.Terminal(jr.Status) && v.Status != run.Succeeded {
		jr, err = a.Store.UpdateJobRun(ctx, v.JobRunID, func(r *store.JobRun) error {
			if run.JobRun.Terminal(r.Status) {
				return nil
			}
			o := v.Outcome
			o.ErrorMessage = cmp.Or(o.ErrorMessage, "the job run never started")
			r.SetOutcome(o)
			r.CompletedAt = &now
			r.CostRatedAt = &now
			return nil
		})
		if err != nil {
			return endedVisit{}, err
		}
	}
	entry := store.LineRunStage{StageName: v.Stage, StageOrder: v.Order, Iteration: v.Iteration, Status: v.Status,
		ComputeCostCents: v.CostCents, TotalCostCents: v.CostCents, CostRatedAt: &now, CompletedAt: &now}
	var artifacts []map[string]any
	if found {
		artifacts = jr.ArtifactRefs
		entry.StartedAt = jr.StartedAt
		entry.ComputeCostCents, entry.InferenceCostCents = jr.ComputeCostCents, jr.InferenceCostCents
		entry.TotalCostCents = jr.ComputeCostCents + jr.InferenceCostCents
		if jr.CostRatedAt != nil {
			entry.CostRatedAt = jr.CostRatedAt
		}
		if jr.CompletedAt != nil {
			entry.CompletedAt = jr.CompletedAt
		}
	}
	entry.ArtifactCount = len(artifacts)
	return endedVisit{visit: v, entry: entry, artifacts: artifacts}, nil
}

// apply ends the visit's running entry on r (or adds it), with its outputs
// and artifacts, and sums the run's costs.
func (e endedVisit) apply(r *store.LineRun) {
	v, entry := e.visit, e.entry
	i := -1
	for j, s := range r.Stages {
		if s.JobRunID != nil && *s.JobRunID == v.JobRunID {
			i = j
		}
	}
	if i >= 0 && r.Stages[i].Status != run.Running {
		return // a retried activity
	}
	id := v.JobRunID
	entry.JobRunID = &id
	if i < 0 {
		r.Stages = append(r.Stages, entry)
	} else {
		if entry.StartedAt == nil {
			entry.StartedAt = r.Stages[i].StartedAt
		}
		r.Stages[i] = entry
	}
	if v.Outputs != nil {
		r.StageOutputs[v.Stage] = v.Outputs
	}
	for _, art := range e.artifacts {
		summary := map[string]any{}
		for _, k := range []string{"type", "provider", "url", "title", "external_ref"} {
			if val, ok := art[k]; ok {
				summary[k] = val
			}
		}
		r.Artifacts = append(r.Artifacts, summary)
	}
	r.ArtifactCount = len(r.Artifacts)
	sumCosts(r)
}

// sumCosts sets a line run's costs to the sums over its stage visits, and
// its cost_rated_at to the latest rating among them.
func sumCosts(r *store.LineRun) {
	r.ComputeCostCents, r.InferenceCostCents = 0, 0
	for _, s := range r.Stages {
		r.ComputeCostCents += s.ComputeCostCents
		r.InferenceCostCents += s.InferenceCostCents
		if s.CostRatedAt != nil && (r.CostRatedAt == nil || s.CostRatedAt.After(*r.CostRatedAt)) {
			t := *s.CostRatedAt
			r.CostRatedAt = &t
		}
	}
	r.InferenceCostCents += r.RouterCostCents // the router's calls (router.go)
	r.TotalCostCents = r.ComputeCostCents + r.InferenceCostCents
}

// RecordTransitionInput records a routing decision.
type RecordTransitionInput struct {
	RunID     string
	ID        string
	From      string
	To        string
	Iteration int
	At        time.Time
	// Option and Decision: an agentic transition's option and how it was
	// decided.
	Option   string
	Decision run.Decision
}

// RecordTransition appends a taken transition and sets the outcome of the
// stage visit it leaves.
func (a *Activities) RecordTransition(ctx context.Context, in RecordTransitionInput) error {
	_, err := a.LineWrites(ctx, LineWritesInput{RunID: in.RunID, Transition: &in})
	return err
}

// applyTransition appends a taken transition to r (once) and sets the
// outcome of the visit it leaves.
func applyTransition(r *store.LineRun, in RecordTransitionInput) {
	for _, t := range r.Transitions {
		if t.ID == in.ID && t.Iteration == in.Iteration {
			return
		}
	}
	r.Transitions = append(r.Transitions, store.TakenTransition{ID: in.ID, From: in.From, To: in.To, Iteration: in.Iteration, TakenAt: in.At.UTC(),
		Option: optString(in.Option), AgenticDecision: in.Decision})
	for i := len(r.Stages) - 1; i >= 0; i-- {
		if r.Stages[i].StageName == in.From {
			id := in.ID
			r.Stages[i].Outcome = &id
			break
		}
	}
}

// FinishLineRunInput ends a line run.
type FinishLineRunInput struct {
	RunID   string
	Status  run.Status
	Failure *run.Failure
}

// FinishLineRunResult is how the line run ended, as recorded.
type FinishLineRunResult struct {
	Status run.Status
	// Failure is the failure as recorded, enriched with the failing step's
	// diagnostics; nil when the run did not fail.
	Failure *run.Failure
	// Record is the final line run record as JSON (once per run).
	Record json.RawMessage
}

// FinishLineRun writes the final status and the classified failure,
// enriched with the failing job run's step diagnostics, and returns the
// final record. A run that has already ended is left as it is.
func (a *Activities) FinishLineRun(ctx context.Context, in FinishLineRunInput) (FinishLineRunResult, error) {
	res, err := a.LineWrites(ctx, LineWritesInput{RunID: in.RunID, Finish: &in})
	if err != nil {
		return FinishLineRunResult{}, err
	}
	return *res.Finish, nil
}

// failingJobRun is the job run a failure names in its details, or nil.
func (a *Activities) failingJobRun(ctx context.Context, f *run.Failure) *store.JobRun {
	if f == nil || f.Details == nil {
		return nil
	}
	id, ok := f.Details["job_run_id"].(string)
	if !ok {
		return nil
	}
	r, err := a.Store.GetJobRun(ctx, id)
	if err != nil {
		return nil
	}
	return &r
}

// applyFinish ends r with in's status and failure (jr: the failing job run)
// unless it has ended, and returns the job runs of the visits it cancels.
func applyFinish(r *store.LineRun, in FinishLineRunInput, jr *store.JobRun, now time.Time) (open []string) {
	if run.LineRun.Terminal(r.Status) {
		return nil // a retried activity, or a run ended before
	}
	r.Status = in.Status
	r.CompletedAt = &now
	r.Waiting = nil // a stopped or expired wait
	if n := len(r.ManagerTurns); n > 0 {
		r.ManagerTurns[n-1].State = "completed"
	}
	for i := range r.Stages {
		if r.Stages[i].Status == run.Running { // cannot outlive the run
			r.Stages[i].Status, r.Stages[i].CompletedAt = run.Cancelled, &now
			if id := r.Stages[i].JobRunID; id != nil {
				open = append(open, *id)
			}
		}
	}
	if f := in.Failure; f != nil {
		r.Failure = enrichFailure(f, jr, r.StopReason)
		r.ErrorMessage = r.Failure.ErrorMessage
	}
	return open
}

// cancelUnstarted cancels the job runs still queued: their children never
// ran (the run ended between making the job run and starting it), so
// nothing stays queued.
func (a *Activities) cancelUnstarted(ctx context.Context, ids []string, now time.Time) error {
	for _, id := range ids {
		_, err := a.Store.UpdateJobRun(ctx, id, func(r *store.JobRun) error {
			if r.Status != run.Queued {
				return nil
			}
			msg := "the line run ended before the job run started"
			r.Status, r.CompletedAt, r.ErrorMessage = run.Cancelled, &now, &msg
			return nil
		})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	return nil
}

// enrichFailure turns a classified failure into the record's failure, with
// the failing step's diagnostics and the job run's error details.
func enrichFailure(f *run.Failure, jr *store.JobRun, stopReason *string) *store.LineRunFailure {
	rec := *f
	if stopReason != nil && rec.Code == run.UserCancelled {
		rec.ErrorMessage = run.StopMessage(*stopReason)
	}
	lf := store.NewLineRunFailure(rec)
	if jr == nil {
		return lf
	}
	if lf.ErrorDetails == nil {
		lf.ErrorDetails = map[string]any{}
	}
	if len(jr.ErrorDetails) > 0 {
		lf.ErrorDetails["job_error_details"] = jr.ErrorDetails
	}
	if lf.ErrorCode == nil {
		lf.ErrorCode = jr.ErrorCode
	}
	if lf.FailureClass == nil {
		lf.FailureClass = jr.FailureClass
	}
	for _, e := range jr.StepTimeline {
		if e.Status != run.Failed && e.Status != run.TimedOut {
			continue
		}
		step, task := e.Name, e.TaskName
		lf.StageStep, lf.TaskName = &step, &task
		if e.Action == manifests.ActionRunAgent && (rec.Code == run.StageFailed || rec.Code == run.JobOutputsInvalid) {
			lf.Domain = run.DomainAgent // the stage failed in an agent step (AGENTS.md)
		}
		if e.ExitCode != nil {
			lf.ErrorDetails["exit_code"] = *e.ExitCode
		}
		if e.ErrorMessage != nil {
			lf.ErrorDetails["step_error"] = *e.ErrorMessage
		}
		if e.ErrorCode != nil {
			lf.ErrorDetails["step_error_code"] = *e.ErrorCode
			if lf.ErrorCode == nil {
				lf.ErrorCode = e.ErrorCode
			}
		}
		if e.FailureClass != nil {
			lf.ErrorDetails["step_failure_class"] = *e.FailureClass
			if lf.FailureClass == nil {
				lf.FailureClass = e.FailureClass
			}
		}
		if len(e.ErrorDetails) > 0 {
			lf.ErrorDetails["step_error_details"] = e.ErrorDetails
		}
		break
	}
	if lf.TaskName == nil {
		// A failure outside any step (e.g. the outputs' reduction) names
		// the task and step the job run recorded.
		if t, ok := jr.ErrorDetails["task_name"].(string); ok {
			lf.TaskName = &t
		}
		if s, ok := jr.ErrorDetails["step_name"].(string); ok {
			lf.StageStep = &s
		}
	}
	return lf
}
