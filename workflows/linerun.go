package workflows

import (
	"errors"
	"fmt"
	"sort"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/store"
)

// LineRunWorkflowName is the registered name of LineRunWorkflow.
const LineRunWorkflowName = "LineRun"

// StateQuery is the query that returns a line run's live state.
const StateQuery = "state"

// LineRunWorkflowID is the workflow ID of a line run.
func LineRunWorkflowID(runID string) string { return "linerun/" + runID }

// StageJob is the job version a stage runs, resolved at run start.
type StageJob = activities.StageJob

// LineRunInput starts (or continues) a line run. State is nil on the first
// turn and carried across continue-as-new after that.
type LineRunInput struct {
	RunID         string
	LineName      string
	LineVersionID string
	Manifest      manifests.LineManifest
	Jobs          map[string]StageJob // by stage id
	Params        map[string]any
	Trigger       map[string]any
	State         *LineState
}

// LineState is what the manager carries from one turn to the next.
type LineState struct {
	Stage       string                           // the stage to visit this turn
	StageParams map[string]any                   // the params bound for it
	Visits      int                              // stage visits so far
	StageOrder  int                              // visit counter for stage_order
	Iterations  map[string]int                   // visits per stage
	Transitions map[string]int                   // times each transition was taken
	Results     map[string]manifests.StageResult // latest result per stage
	CostCents   int64
	StartedAt   time.Time
	Deadline    *time.Time
	Turn        int
}

// LineRunResult is how a line run ended.
type LineRunResult struct {
	Status  string
	Failure *activities.Failure
}

// failure builds a classified failure.
func failure(code, msg string) *activities.Failure {
	return &activities.Failure{Code: code, Domain: activities.FailureDomain(code, ""), ErrorMessage: msg}
}

// LineRunWorkflow is the manager of a line run. One manager turn is one
// Temporal run of this workflow: it visits a stage (a child JobRunWorkflow,
// re-run up to the stage's max_attempts), records it, routes, and continues
// as new into the next turn.
func LineRunWorkflow(ctx workflow.Context, in LineRunInput) (LineRunResult, error) {
	m := in.Manifest
	book := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumAttempts: 10},
	})
	st := in.State
	if st == nil {
		st = &LineState{Iterations: map[string]int{}, Transitions: map[string]int{}, Results: map[string]manifests.StageResult{},
			StartedAt: workflow.Now(ctx)}
		if len(m.Stages) > 0 {
			st.Stage, st.StageParams = m.Stages[0].ID, in.Params
		}
		if m.Limits != nil && m.Limits.Timeout != "" {
			if d, err := manifests.ParseDuration(m.Limits.Timeout); err == nil {
				dl := st.StartedAt.Add(d)
				st.Deadline = &dl
			}
		}
	}
	st.Turn++
	// The state query answers with the line-run record as the activities
	// last wrote it: the same JSON as GET /factory/line-runs/{id}.
	var summary store.LineRun
	_ = workflow.SetQueryHandler(ctx, StateQuery, func() (store.LineRun, error) { return summary, nil })
	end := func(status string, f *activities.Failure) (LineRunResult, error) {
		dctx, _ := workflow.NewDisconnectedContext(book)
		if ctx.Err() != nil && status != activities.StatusSucceeded {
			status, f = activities.StatusCancelled, failure("user_cancelled", "the line run was stopped")
		}
		if f != nil && f.StageName == nil && st.Stage != "" && f.Code != "manifest_no_stages" {
			stage := st.Stage
			f.StageName = &stage
		}
		err := workflow.ExecuteActivity(dctx, a.FinishLineRun, activities.FinishLineRunInput{RunID: in.RunID, Status: status, Failure: f}).Get(dctx, nil)
		return LineRunResult{Status: status, Failure: f}, err
	}
	info := workflow.GetInfo(ctx)
	turn := activities.RecordTurnInput{RunID: in.RunID, WorkflowRunID: info.WorkflowExecution.RunID, State: "visiting " + st.Stage, StartedAt: workflow.Now(ctx), Turn: st.Turn}
	if err := workflow.ExecuteActivity(book, a.RecordTurn, turn).Get(book, &summary); err != nil {
		return LineRunResult{}, err
	}
	if len(m.Stages) == 0 {
		return end(activities.StatusFailed, failure("manifest_no_stages", "the line has no stages"))
	}
	stage, ok := findStage(m, st.Stage)
	if !ok {
		return end(activities.StatusFailed, failure("unknown_stage", fmt.Sprintf("stage %q is not in the line", st.Stage)))
	}
	if m.Limits != nil && m.Limits.MaxIterations != nil && st.Visits >= *m.Limits.MaxIterations {
		return end(activities.StatusFailed, failure("max_iterations_exhausted", fmt.Sprintf("the line's max_iterations (%d) is reached", *m.Limits.MaxIterations)))
	}

	// Visit the stage: one child job run per attempt.
	attempts := 1
	if stage.MaxAttempts != nil {
		attempts = *stage.MaxAttempts
	}
	st.Visits++
	st.StageOrder++
	st.Iterations[stage.ID]++
	job := in.Jobs[stage.ID]
	var visit activities.StageVisit
	for attempt := 1; attempt <= attempts; attempt++ {
		var jobRunID string
		if err := workflow.SideEffect(ctx, func(workflow.Context) any { return store.NewID("jr_") }).Get(&jobRunID); err != nil {
			return LineRunResult{}, err
		}
		var created activities.CreateStageRunResult
		req := activities.CreateStageRunInput{JobRunID: jobRunID, LineRunID: in.RunID, Stage: stage.ID, JobName: job.JobName, JobVersionID: job.JobVersionID,
			ParamSpecs: job.Manifest.Job.Params, Params: st.StageParams}
		if err := workflow.ExecuteActivity(book, a.CreateStageRun, req).Get(book, &created); err != nil {
			return LineRunResult{}, err
		}
		if created.Problems != "" {
			return end(activities.StatusFailed, failure("stage_params_invalid", fmt.Sprintf("stage %s: %s", stage.ID, created.Problems)))
		}
		copts := workflow.ChildWorkflowOptions{WorkflowID: JobRunWorkflowID(created.JobRunID), TaskQueue: TaskQueue,
			ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL, WaitForCancellation: true}
		cctx, cancelChild := workflow.WithCancel(workflow.WithChildOptions(ctx, copts))
		fut := workflow.ExecuteChildWorkflow(cctx, JobRunWorkflowName, JobRunInput{RunID: created.JobRunID, JobName: job.JobName,
			JobVersionID: job.JobVersionID, Manifest: job.Manifest, Params: created.Params})
		timedOut := false
		if st.Deadline != nil {
			left := st.Deadline.Sub(workflow.Now(ctx))
			sel := workflow.NewSelector(ctx)
			sel.AddFuture(fut, func(workflow.Future) {})
			sel.AddFuture(workflow.NewTimer(cctx, max(left, time.Millisecond)), func(workflow.Future) { timedOut = true; cancelChild() })
			sel.Select(ctx)
		}
		var res JobRunResult
		err := fut.Get(ctx, &res)
		cancelChild()
		visit = activities.StageVisit{Stage: stage.ID, JobRunID: created.JobRunID, Iteration: st.Iterations[stage.ID],
			Order: st.StageOrder, Status: res.Status, Outputs: res.Outputs, CostCents: res.CostCents,
			ErrorCode: res.ErrorCode, ErrorMessage: res.ErrorMessage, FailureClass: res.FailureClass}
		if err != nil && res.Status == "" {
			visit.Status = activities.StatusCancelled
			if !timedOut && ctx.Err() == nil {
				visit.Status, visit.ErrorMessage = activities.StatusFailed, err.Error()
			}
		}
		if visit.Status == activities.StatusTimedOut {
			visit.Status = activities.StatusFailed
		}
		st.CostCents += res.CostCents
		// Recorded even when the run is being stopped.
		rctx, _ := workflow.NewDisconnectedContext(book)
		if err := workflow.ExecuteActivity(rctx, a.RecordStage, activities.RecordStageInput{RunID: in.RunID, Visit: visit}).Get(rctx, &summary); err != nil {
			return LineRunResult{}, err
		}
		if timedOut {
			return end(activities.StatusFailed, failure("line_timeout", fmt.Sprintf("the line ran past its timeout %s", m.Limits.Timeout)))
		}
		if ctx.Err() != nil {
			return end(activities.StatusCancelled, failure("user_cancelled", "the line run was stopped"))
		}
		if visit.Status == activities.StatusSucceeded {
			break
		}
	}
	st.Results[stage.ID] = manifests.StageResult{Status: visit.Status, Outputs: visit.Outputs, JobRunID: visit.JobRunID, Iteration: visit.Iteration}

	if m.Limits != nil && m.Limits.BudgetUSD != nil && st.CostCents > m.Limits.BudgetUSD.Cents {
		return end(activities.StatusFailed, failure("budget_exceeded", fmt.Sprintf("rated cost %d cents is over the budget of %s USD", st.CostCents, m.Limits.BudgetUSD)))
	}

	// route ranges over maps only to copy values or collect keys it sorts.
	next, f := route(m, in, st, stage.ID, visit) //workflowcheck:ignore
	if f != nil {
		if f.Code == "stage_failed" {
			f.StageName, f.ErrorCode, f.FailureClass = &visit.Stage, strOrNil(visit.ErrorCode), strOrNil(visit.FailureClass)
			f.Domain = activities.FailureDomain("stage_failed", visit.FailureClass)
			f.Details = map[string]any{"job_run_id": visit.JobRunID}
		}
		return end(activities.StatusFailed, f)
	}
	if next == nil {
		return end(activities.StatusSucceeded, nil)
	}
	st.Transitions[next.transition]++
	if err := workflow.ExecuteActivity(book, a.RecordTransition, activities.RecordTransitionInput{RunID: in.RunID, ID: next.transition,
		From: stage.ID, To: next.stage, Iteration: st.Transitions[next.transition], At: workflow.Now(ctx)}).Get(book, &summary); err != nil {
		return LineRunResult{}, err
	}
	st.Stage, st.StageParams = next.stage, next.params
	in.State = st
	return LineRunResult{}, workflow.NewContinueAsNewError(ctx, LineRunWorkflowName, in)
}

func strOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func findStage(m manifests.LineManifest, id string) (manifests.LineStage, bool) {
	for _, s := range m.Stages {
		if s.ID == id {
			return s, true
		}
	}
	return manifests.LineStage{}, false
}

type hop struct {
	transition string
	stage      string
	params     map[string]any
}

// route picks the next stage from the stage just visited: exactly one
// matching conditional transition is taken; several are ambiguous; none
// falls to an agentic transition (not supported yet), else the line ends
// (no outgoing transitions) or has no route.
func route(m manifests.LineManifest, in LineRunInput, st *LineState, from string, visit activities.StageVisit) (*hop, *activities.Failure) {
	ctx := manifests.EvalContext{From: from, Stages: st.Results, Transitions: st.Transitions, Trigger: in.Trigger}
	var outgoing, matched []manifests.Transition
	var agentic *manifests.Transition
	for _, t := range m.Transitions {
		if t.From != from {
			continue
		}
		outgoing = append(outgoing, t)
		if t.Type == manifests.TransitionAgentic {
			t := t
			agentic = &t
			continue
		}
		ok, err := manifests.Evaluate(*t.When, ctx)
		if err != nil {
			return nil, failure("line_state_invalid", fmt.Sprintf("transition %s: %v", t.ID, err))
		}
		if ok {
			matched = append(matched, t)
		}
	}
	failed := visit.Status != activities.StatusSucceeded
	switch {
	case len(matched) > 1:
		ids := make([]string, len(matched))
		for i, t := range matched {
			ids[i] = t.ID
		}
		return nil, failure("ambiguous_transition", fmt.Sprintf("from stage %s several transitions match: %v", from, ids))
	case len(matched) == 0 && agentic != nil:
		return nil, failure("no_route", fmt.Sprintf("stage %s needs agentic transition %s, and agentic routing is not supported by this server yet", from, agentic.ID))
	case len(matched) == 0 && len(outgoing) == 0:
		if failed {
			return nil, failure("stage_failed", fmt.Sprintf("stage %s %s: %s", from, visit.Status, visit.ErrorMessage))
		}
		return nil, nil
	case len(matched) == 0:
		if failed {
			return nil, failure("stage_failed", fmt.Sprintf("stage %s %s: %s", from, visit.Status, visit.ErrorMessage))
		}
		return nil, failure("no_route", fmt.Sprintf("no transition from stage %s matches", from))
	}
	t := matched[0]
	if t.MaxIterations != nil && st.Transitions[t.ID]+1 > *t.MaxIterations {
		return nil, failure("max_iterations_exhausted", fmt.Sprintf("transition %s was taken %d times (max_iterations %d)", t.ID, st.Transitions[t.ID], *t.MaxIterations))
	}
	params, err := bindParams(t.Params, in, st, in.Jobs[t.To].Manifest)
	if err != nil {
		return nil, failure("transition_params_invalid", fmt.Sprintf("transition %s: %v", t.ID, err))
	}
	return &hop{transition: t.ID, stage: t.To, params: params}, nil
}

// bindParams computes the next stage's params: the transition's bindings,
// then run params of the same name for the job's params left unbound.
func bindParams(bindings map[string]manifests.ParamBinding, in LineRunInput, st *LineState, job manifests.JobManifest) (map[string]any, error) {
	out := map[string]any{}
	names := make([]string, 0, len(bindings))
	//workflowcheck:ignore (keys are sorted)
	for k := range bindings {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		b := bindings[name]
		switch b.Type {
		case manifests.BindLiteral:
			out[name] = b.Value
		case manifests.BindInput:
			v, ok := in.Params[b.Name]
			if !ok {
				if _, declared := job.Job.Params[name]; declared && job.Job.Params[name].Default != nil {
					continue // the job's default applies
				}
				return nil, fmt.Errorf("param %s: the line run has no param %q", name, b.Name)
			}
			out[name] = v
		case manifests.BindOutput:
			res, ok := st.Results[b.Stage]
			if !ok {
				return nil, fmt.Errorf("param %s: stage %q has not run", name, b.Stage)
			}
			v, ok := res.Outputs[b.Name]
			if !ok {
				return nil, fmt.Errorf("param %s: stage %q published no output %q", name, b.Stage, b.Name)
			}
			out[name] = v
		default:
			return nil, errors.New("unknown binding type " + b.Type)
		}
	}
	params := make([]string, 0, len(job.Job.Params))
	//workflowcheck:ignore (keys are sorted)
	for name := range job.Job.Params {
		params = append(params, name)
	}
	sort.Strings(params)
	for _, name := range params {
		if _, bound := out[name]; bound {
			continue
		}
		if v, ok := in.Params[name]; ok {
			out[name] = v
		}
	}
	return out, nil
}
