package workflows

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/workflow"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/run"
)

// LineRunWorkflowName is the registered name of LineRunWorkflow.
const LineRunWorkflowName = "LineRun"

// StateQuery is the query that returns a line run's live state.
const StateQuery = "state"

// StageJob is the job version a stage runs, resolved at run start.
type StageJob = manifests.StageJob

// LineRunInput starts (or continues) a line run. State is nil on the first
// turn of a fresh run and carried across continue-as-new after that; a
// retried run starts with the snapshot the API plans (api's retrySnapshot;
// Turn 0).
type LineRunInput struct {
	RunID         string
	LineName      string
	LineVersionID string
	Manifest      manifests.LineManifest
	Jobs          map[string]StageJob // by stage id
	Params        map[string]any
	Trigger       map[string]any
	State         *LineState
	// Version is the workflow code the starter wrote the input for
	// (LineRunInputVersion; see JobRunInput.Version): 0 asks
	// workflow.GetVersion as older code did.
	Version int `json:",omitempty"`
}

// LineRunInputVersion is the Version every start of a line run writes: 1
// takes turnsPerRunChange; 2 holds record writes back to make them together
// (heldWrites).
const LineRunInputVersion = 2

// LineState is what the manager carries from one turn to the next.
type LineState struct {
	Stage       string                           // the stage to visit this turn
	StageParams map[string]any                   // the params bound for it
	Visits      int                              // stage visits so far
	StageOrder  int                              // stage entries so far (stage_order of the last)
	Iterations  map[string]int                   // visits per stage
	Transitions map[string]int                   // times each transition was taken
	Results     map[string]manifests.StageResult // latest result per stage
	CostCents   int64                            // rated total cost so far
	StartedAt   time.Time
	Deadline    *time.Time
	Turn        int // turns of this run so far; 0 before its first
}

// LineRunResult is how a line run ended.
type LineRunResult struct {
	Status  run.Status
	Failure *run.Failure
}

// failure builds a classified failure.
func failure(code run.FailureCode, msg string) *run.Failure { return run.NewFailure(code, msg) }

// LineRunWorkflow is the manager of a line run. One manager turn visits a
// stage (a child JobRunWorkflow, re-run up to the stage's max_attempts),
// records it and routes to the next turn. Turns follow each other in one
// Temporal run; the run continues as new only to bound its history: when
// Temporal suggests it, or after maxTurnsPerRun turns (Temporal holds every
// continue-as-new for history.workflowIdReuseMinimalInterval, 1 s by
// default, so one per turn made every stage cost a second). A stop
// (workflow cancellation) at any point ends the run cancelled with
// user_cancelled.
func LineRunWorkflow(ctx workflow.Context, in LineRunInput) (LineRunResult, error) {
	m := in.Manifest
	st := in.State
	if st == nil {
		st = &LineState{}
		if len(m.Stages) > 0 {
			st.Stage, st.StageParams = m.Stages[0].ID, entryParams(in.Params, in.Jobs[m.Stages[0].ID].Manifest)
		}
	}
	if st.Iterations == nil {
		st.Iterations = map[string]int{}
	}
	if st.Transitions == nil {
		st.Transitions = map[string]int{}
	}
	if st.Results == nil {
		st.Results = map[string]manifests.StageResult{}
	}
	if st.Turn == 0 {
		// The first turn of this run (a fresh one or a retry): the line
		// timeout counts from here.
		st.StartedAt, st.Deadline = workflow.Now(ctx), nil
		if m.Limits != nil && m.Limits.Timeout != "" {
			if d, err := manifests.ParseDuration(m.Limits.Timeout); err == nil {
				dl := st.StartedAt.Add(d)
				st.Deadline = &dl
			}
		}
	}
	state := LineRunState{}
	_ = workflow.SetQueryHandler(ctx, StateQuery, func() (LineRunState, error) { return state, nil })
	// The select Update, answered by the turn that waits (agentic.go);
	// summary is the record as the routing activities return it.
	var summary LineRecord
	wait := registerSelect(ctx, &summary)
	wait.onRecord = func(r LineRecord) {
		state = state.replace(json.RawMessage(r)) //workflowcheck:ignore (JSON decoding is deterministic)
	}
	held := &heldWrites{on: in.Version >= 2}
	for turns := 1; ; turns++ {
		res, err := managerTurn(ctx, &in, st, &state, wait, held)
		if !errors.Is(err, errNextTurn) {
			return res, err
		}
		// Runs started before turns shared a Temporal run (their input has
		// no Version) replay as they ran: one continue-as-new per turn.
		perTurn := in.Version < 1 && workflow.GetVersion(ctx, turnsPerRunChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion
		if perTurn || turns >= maxTurnsPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			// What this run holds back (the transition) is written before
			// the next run takes over.
			if e := newLineTurn(ctx, &in, st, &state, wait, held).flush(); e != nil {
				return e.result()
			}
			in.State = st
			return LineRunResult{}, workflow.NewContinueAsNewError(ctx, LineRunWorkflowName, in)
		}
	}
}

// heldWrites are record writes a line manager holds back (input Version 2):
// they go with the next write whose result it needs, as one LineWrites
// local activity. Between two stages that is one local activity and one
// record update (the visit's end, the transition, the next turn, the next
// visit's job run) where there were four of each; the last visit's end goes
// with the run's. A visit's end is written at once when the line has a
// budget (the check needs the rated cost), and everything held before an
// agentic decision (the router reads the record), before the instructions
// are resolved, and before the manager continues as new.
type heldWrites struct {
	on bool // input Version ≥ 2
	activities.LineWritesInput
}

// maxTurnsPerRun bounds the manager turns of one Temporal run of a line
// run (each turn adds a child workflow and a few markers to the history).
// A variable for tests.
var maxTurnsPerRun = 100

// turnsPerRunChange is the workflow.GetVersion change id of several manager
// turns per Temporal run.
const turnsPerRunChange = "manager-turns-per-run"

// errNextTurn ends a manager turn that routed to a next stage.
var errNextTurn = errors.New("next manager turn")

// managerTurn runs one manager turn of a line run: it visits st.Stage,
// records it and routes. It returns errNextTurn with st set for the next
// turn, or how the run ended. state is what the state query answers.
func managerTurn(ctx workflow.Context, in *LineRunInput, st *LineState, state *LineRunState, wait *agentWait, held *heldWrites) (LineRunResult, error) {
	t := newLineTurn(ctx, in, st, state, wait, held)
	st.Turn++
	if e := t.begin(); e != nil {
		return e.result()
	}
	stage, e := t.checkStage()
	if e != nil {
		return e.result()
	}
	visit, e := t.visitStage(stage)
	if e != nil {
		return e.result()
	}
	st.Results[stage.ID] = manifests.StageResult{Status: string(visit.Status), Outputs: visit.Outputs, JobRunID: visit.JobRunID, Iteration: visit.Iteration}
	return t.route(stage, visit).result()
}

// lineTurn is one manager turn of a line run.
type lineTurn struct {
	ctx   workflow.Context
	in    *LineRunInput
	st    *LineState
	state *LineRunState
	wait  *agentWait
	held  *heldWrites
	// bookCtx carries the options of the run-record writes; lastingCtx
	// too, for the bookkeeping that must happen even while the run is
	// being stopped.
	bookCtx, lastingCtx workflow.Context
}

func newLineTurn(ctx workflow.Context, in *LineRunInput, st *LineState, state *LineRunState, wait *agentWait, held *heldWrites) *lineTurn {
	book := bookkeeping(ctx)
	lasting, _ := workflow.NewDisconnectedContext(book)
	return &lineTurn{ctx: ctx, in: in, st: st, state: state, wait: wait, held: held, bookCtx: book, lastingCtx: lasting}
}

// write makes the held-back writes with w's (LineWrites; not cut short by
// a stop) and takes the ended visit it returns into the state and the
// rated cost. The held writes stay held when it fails: the run's end
// writes them.
func (t *lineTurn) write(w activities.LineWritesInput) (activities.LineWritesResult, error) {
	h := &t.held.LineWritesInput
	w.RunID, w.Stage, w.Transition, w.Turn = t.in.RunID, h.Stage, h.Transition, h.Turn
	var res activities.LineWritesResult
	if err := workflow.ExecuteLocalActivity(t.lastingCtx, a.LineWrites, w).Get(t.lastingCtx, &res); err != nil {
		return res, err
	}
	*h = activities.LineWritesInput{}
	if res.Stage != nil {
		t.state.putVisit(res.Stage.Visit) //workflowcheck:ignore (JSON decoding is deterministic)
		t.st.CostCents = res.Stage.TotalCostCents
	}
	return res, nil
}

// flush makes the held-back writes now; the turn's end when they fail or
// find the run ended.
func (t *lineTurn) flush() *turnEnd {
	h := &t.held.LineWritesInput
	if h.Stage == nil && h.Transition == nil && h.Turn == nil {
		return nil
	}
	res, err := t.write(activities.LineWritesInput{})
	if err != nil {
		return t.fail(err)
	}
	if res.Turn != nil {
		return t.begun(*res.Turn)
	}
	return nil
}

// begun takes the turn's start as recorded into the state; the turn's end
// when the run had ended (a replayed turn).
func (t *lineTurn) begun(r activities.RecordTurnResult) *turnEnd {
	*t.state = t.state.replace(r.Record) //workflowcheck:ignore (JSON decoding is deterministic)
	if run.LineRun.Terminal(r.Status) {
		return &turnEnd{res: LineRunResult{Status: r.Status}} // already ended (a replayed turn)
	}
	return nil
}

// turnEnd is how a turn ends: the result and error of managerTurn.
type turnEnd struct {
	res LineRunResult
	err error
}

func (e *turnEnd) result() (LineRunResult, error) { return e.res, e.err }

// end ends the run with status (cancelled when the run is being stopped)
// and failure f, and records it.
func (t *lineTurn) end(status run.Status, f *run.Failure) *turnEnd {
	if t.ctx.Err() != nil && status != run.Succeeded {
		status, f = run.Cancelled, failure(run.UserCancelled, "the line run was stopped")
	}
	if f != nil && f.StageName == "" && f.Code != run.ManifestNoStages {
		f.StageName = t.st.Stage
	}
	var final activities.FinishLineRunResult
	fin := activities.FinishLineRunInput{RunID: t.in.RunID, Status: status, Failure: f}
	var err error
	if t.held.on {
		var res activities.LineWritesResult
		if res, err = t.write(activities.LineWritesInput{Finish: &fin}); err == nil && res.Turn != nil {
			if e := t.begun(*res.Turn); e != nil {
				return e
			}
		}
		if res.Finish != nil {
			final = *res.Finish
		}
	} else {
		err = workflow.ExecuteLocalActivity(t.lastingCtx, a.FinishLineRun, fin).Get(t.lastingCtx, &final)
	}
	if err == nil {
		*t.state = t.state.replace(final.Record) //workflowcheck:ignore (JSON decoding is deterministic)
		if final.Failure != nil && final.Status == status {
			f = failureOf(*final.Failure, f)
		}
	}
	return &turnEnd{LineRunResult{Status: status, Failure: f}, err}
}

// fail handles an activity error: under a stop it ends the run cancelled
// instead of leaving the record behind.
func (t *lineTurn) fail(err error) *turnEnd {
	if t.ctx.Err() != nil {
		return t.end(run.Cancelled, nil)
	}
	return &turnEnd{err: err}
}

// timedOut ends the run that ran past its limits.timeout.
func (t *lineTurn) timedOut() *turnEnd {
	return t.end(run.Failed, failure(run.LineTimeout, fmt.Sprintf("the line ran past its timeout %s", t.in.Manifest.Limits.Timeout)))
}

// begin records the turn's start; on the first turn it resolves the
// line's instructions. Nil when the turn goes on.
func (t *lineTurn) begin() *turnEnd {
	ctx, st := t.ctx, t.st
	info := workflow.GetInfo(ctx)
	turn := activities.RecordTurnInput{RunID: t.in.RunID, WorkflowRunID: info.WorkflowExecution.RunID, State: "visiting " + st.Stage, StartedAt: workflow.Now(ctx), Turn: st.Turn}
	if t.held.on {
		t.held.Turn = &turn // written with the visit's job run (attemptStage)
	} else {
		var begun activities.RecordTurnResult
		if err := workflow.ExecuteLocalActivity(t.lastingCtx, a.RecordTurn, turn).Get(t.lastingCtx, &begun); err != nil {
			return t.fail(err)
		}
		if e := t.begun(begun); e != nil {
			return e
		}
	}
	if ctx.Err() != nil {
		return t.end(run.Cancelled, nil)
	}
	if st.Turn == 1 && needsInstructions(t.in.Manifest) {
		if e := t.flush(); e != nil {
			return e
		}
		if f, err := resolveInstructions(t.lastingCtx, *t.in, t.wait.summary); err != nil {
			return t.fail(err)
		} else if f != nil {
			return t.end(run.Failed, f)
		}
	}
	return nil
}

// checkStage finds the stage to visit and checks the run may visit it
// (max_iterations, timeout).
func (t *lineTurn) checkStage() (manifests.LineStage, *turnEnd) {
	m, st := t.in.Manifest, t.st
	if len(m.Stages) == 0 {
		return manifests.LineStage{}, t.end(run.Failed, failure(run.ManifestNoStages, "the line has no stages"))
	}
	stage, ok := findStage(m, st.Stage)
	if !ok {
		return stage, t.end(run.Failed, failure(run.UnknownStage, fmt.Sprintf("stage %q is not in the line", st.Stage)))
	}
	if m.Limits != nil && m.Limits.MaxIterations != nil && st.Visits >= *m.Limits.MaxIterations {
		return stage, t.end(run.Failed, failure(run.MaxIterationsExhausted, fmt.Sprintf("the line's max_iterations (%d) is reached", *m.Limits.MaxIterations)))
	}
	if st.Deadline != nil && !workflow.Now(t.ctx).Before(*st.Deadline) {
		return stage, t.timedOut()
	}
	return stage, nil
}

// visitStage visits the stage: one child job run per attempt, until one
// succeeds or its attempts are used up.
func (t *lineTurn) visitStage(stage manifests.LineStage) (activities.StageVisit, *turnEnd) {
	attempts := 1
	if stage.MaxAttempts != nil {
		attempts = *stage.MaxAttempts
	}
	t.st.Visits++
	t.st.Iterations[stage.ID]++
	var visit activities.StageVisit
	for attempt := 1; attempt <= attempts; attempt++ {
		var e *turnEnd
		if visit, e = t.attemptStage(stage); e != nil {
			return visit, e
		}
		if visit.Status == run.Succeeded {
			break
		}
	}
	return visit, nil
}

// attemptStage makes one job run of the stage, waits for it and records
// it; the turn ends when the run cannot go on.
func (t *lineTurn) attemptStage(stage manifests.LineStage) (activities.StageVisit, *turnEnd) {
	ctx, st, in := t.ctx, t.st, t.in
	job := in.Jobs[stage.ID]
	var visit activities.StageVisit
	var jobRunID string
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return run.NewJobRunID() }).Get(&jobRunID); err != nil {
		return visit, t.fail(err)
	}
	st.StageOrder++
	var created activities.CreateStageRunResult
	req := activities.CreateStageRunInput{JobRunID: jobRunID, LineRunID: in.RunID, Stage: stage.ID, JobName: job.JobName, JobVersionID: job.JobVersionID,
		Region: job.Manifest.Run.Region, Steps: stepCount(&job.Manifest), ParamSpecs: job.Manifest.Job.Params, Params: st.StageParams, Iteration: st.Iterations[stage.ID], Order: st.StageOrder, At: workflow.Now(ctx)}
	// Not cut short by a stop: it makes the job run, then records the
	// visit, and a stop between the two would leave the job run queued
	// with no visit to close it.
	if t.held.on {
		res, err := t.write(activities.LineWritesInput{Create: &req})
		if err != nil {
			return visit, t.fail(err)
		}
		if res.Turn != nil {
			if e := t.begun(*res.Turn); e != nil {
				return visit, e
			}
		}
		created = *res.Create
	} else if err := workflow.ExecuteLocalActivity(t.lastingCtx, a.CreateStageRun, req).Get(t.lastingCtx, &created); err != nil {
		return visit, t.fail(err)
	}
	if created.Problems != "" {
		return visit, t.end(run.Failed, failure(run.StageParamsInvalid, fmt.Sprintf("stage %s: %s", stage.ID, created.Problems)))
	}
	t.state.putVisit(created.Visit) //workflowcheck:ignore (JSON decoding is deterministic)
	visit = visitStage(ctx, st, stage, job, created)
	// Recorded even when the run is being stopped.
	if t.held.on {
		t.held.Stage = &visit
		if m := in.Manifest; m.Limits != nil && m.Limits.BudgetUSD != nil {
			if e := t.flush(); e != nil { // checkVisit checks the rated cost
				return visit, e
			}
		}
		return visit, t.checkVisit(stage, visit)
	}
	var recorded activities.RecordStageResult
	if err := workflow.ExecuteLocalActivity(t.lastingCtx, a.RecordStage, activities.RecordStageInput{RunID: in.RunID, Visit: visit}).Get(t.lastingCtx, &recorded); err != nil {
		return visit, t.fail(err)
	}
	t.state.putVisit(recorded.Visit) //workflowcheck:ignore (JSON decoding is deterministic)
	st.CostCents = recorded.TotalCostCents
	return visit, t.checkVisit(stage, visit)
}

// checkVisit ends the run after a stage visit that timed out, was stopped,
// could not start its job run or read its result, or went over the budget
// (checked after every visit, attempts included).
func (t *lineTurn) checkVisit(stage manifests.LineStage, visit activities.StageVisit) *turnEnd {
	m := t.in.Manifest
	if visit.Status == run.Cancelled && visit.ErrorCode == run.CodeLineTimeout {
		return t.timedOut()
	}
	if t.ctx.Err() != nil {
		return t.end(run.Cancelled, nil)
	}
	if visit.Status == run.Failed && visit.FailureClass == run.ClassPlatform && visit.ErrorCode == run.CodeDispatchFailed {
		f := failure(run.DispatchFailed, fmt.Sprintf("stage %s: the job run could not be started: %s", stage.ID, visit.ErrorMessage))
		f.Details = map[string]any{"job_run_id": visit.JobRunID}
		return t.end(run.Failed, f)
	}
	if visit.ErrorCode == run.CodeJobResultInvalid {
		f := failure(run.JobResultInvalid, fmt.Sprintf("stage %s: the job run's result could not be read: %s", stage.ID, visit.ErrorMessage))
		f.Details = map[string]any{"job_run_id": visit.JobRunID}
		return t.end(run.Failed, f)
	}
	if m.Limits != nil && m.Limits.BudgetUSD != nil && t.st.CostCents > m.Limits.BudgetUSD.Cents {
		return t.end(run.Failed, failure(run.BudgetExceeded, fmt.Sprintf("rated cost %d cents is over the budget of %s USD", t.st.CostCents, m.Limits.BudgetUSD)))
	}
	return nil
}

// route picks the next stage after a visit (an agentic transition asks
// the manager), records the transition and sets st for the next turn; or
// ends the run when no transition applies or one fails it.
func (t *lineTurn) route(stage manifests.LineStage, visit activities.StageVisit) *turnEnd {
	ctx, in, st := t.ctx, t.in, t.st
	// route ranges over maps only to copy values or collect keys it sorts.
	next, f := route(in.Manifest, *in, st, stage.ID, visit) //workflowcheck:ignore
	if f == nil && next != nil && next.agentic != nil {
		if e := t.flush(); e != nil { // the router reads the record
			return e
		}
		var err error
		if next, f, err = t.wait.decideAgentic(ctx, t.lastingCtx, *in, st, *next.agentic, visit, t.wait.summary); err != nil {
			return t.fail(err)
		}
	}
	if f != nil {
		if f.Code == run.StageFailed {
			stageFailed(f, stage, visit)
		}
		return t.end(run.Failed, f)
	}
	if next == nil {
		return t.end(run.Succeeded, nil)
	}
	st.Transitions[next.transition]++
	taken := activities.RecordTransitionInput{RunID: in.RunID, ID: next.transition,
		From: stage.ID, To: next.stage, Iteration: st.Transitions[next.transition], At: workflow.Now(ctx),
		Option: next.option, Decision: next.decision}
	if t.held.on {
		t.held.Transition = &taken // written with the next turn
	} else if err := workflow.ExecuteLocalActivity(t.bookCtx, a.RecordTransition, taken).Get(t.bookCtx, nil); err != nil {
		return t.fail(err)
	}
	if ctx.Err() != nil {
		// A stop between turns: a cancel request does not survive
		// continue-as-new, so it ends the run here.
		return t.end(run.Cancelled, nil)
	}
	st.Stage, st.StageParams = next.stage, next.params
	return &turnEnd{err: errNextTurn}
}

// stageFailed completes the failure of a run whose stage failed with the
// visit's error; a contract failure is the job's outputs'.
func stageFailed(f *run.Failure, stage manifests.LineStage, visit activities.StageVisit) {
	f.StageName, f.ErrorCode, f.FailureClass = visit.Stage, visit.ErrorCode, visit.FailureClass
	f.Domain = run.FailureDomain(run.StageFailed, visit.FailureClass)
	if visit.FailureClass == run.ClassContract {
		// The job's outputs broke its contract.
		f.Code, f.Domain = run.JobOutputsInvalid, run.FailureDomain(run.JobOutputsInvalid, "")
		f.ErrorMessage = fmt.Sprintf("stage %s: the job's outputs break its contract: %s", stage.ID, visit.ErrorMessage)
	}
	f.Details = map[string]any{"job_run_id": visit.JobRunID}
}

// visitStage runs one attempt of a stage visit as a child JobRunWorkflow and
// returns the visit. A visit cut short by the line timeout is cancelled with
// error code LINE_TIMEOUT.
func visitStage(ctx workflow.Context, st *LineState, stage manifests.LineStage, job StageJob,
	created activities.CreateStageRunResult) activities.StageVisit {
	copts := workflow.ChildWorkflowOptions{WorkflowID: run.JobRunWorkflowID(created.JobRunID), TaskQueue: TaskQueue,
		ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL, WaitForCancellation: true}
	cctx, cancelChild := workflow.WithCancel(workflow.WithChildOptions(ctx, copts))
	defer cancelChild()
	fut := workflow.ExecuteChildWorkflow(cctx, JobRunWorkflowName, JobRunInput{Version: JobRunInputVersion, RunID: created.JobRunID, JobName: job.JobName,
		JobVersionID: job.JobVersionID, Manifest: job.Manifest, Params: created.Params})
	timedOut := false
	if st.Deadline != nil {
		left := st.Deadline.Sub(workflow.Now(ctx))
		tctx, cancelTimer := workflow.WithCancel(ctx)
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(fut, func(workflow.Future) {})
		sel.AddFuture(workflow.NewTimer(tctx, max(left, time.Millisecond)), func(f workflow.Future) {
			if f.Get(tctx, nil) == nil {
				timedOut = true
				// The job run is told why before it is cancelled.
				fut.SignalChildWorkflow(ctx, StopSignal, StopNote{Code: run.CodeLineTimeout, Class: run.ClassConfig,
					Message: "stopped by its line: the line ran past its timeout"})
				cancelChild()
			}
		})
		sel.Select(ctx)
		cancelTimer()
	}
	visit := activities.StageVisit{Stage: stage.ID, JobRunID: created.JobRunID, Iteration: st.Iterations[stage.ID], Order: st.StageOrder}
	var exec workflow.Execution
	startErr := fut.GetChildWorkflowExecution().Get(ctx, &exec)
	err := fut.Get(ctx, nil)
	var res JobRunResult
	if err == nil {
		if derr := fut.Get(ctx, &res); derr != nil {
			res = JobRunResult{Outcome: run.Fail(run.CodeJobResultInvalid, run.ClassContract, derr.Error())}
		} else if !run.JobRun.Terminal(res.Status) {
			res = JobRunResult{Outcome: run.Fail(run.CodeJobResultInvalid, run.ClassContract, fmt.Sprintf("unknown job run status %q", res.Status))}
		}
	}
	visit.Outcome, visit.Outputs, visit.CostCents = res.Outcome, res.Outputs, res.CostCents
	switch {
	case err == nil:
	case timedOut:
		visit.Status, visit.ErrorCode, visit.ErrorMessage = run.Cancelled, run.CodeLineTimeout, "the line timed out"
	case ctx.Err() != nil:
		visit.Outcome = run.Outcome{Status: run.Cancelled, ErrorCode: run.CodeCancelled, FailureClass: run.ClassUser, ErrorMessage: "the line run was stopped"}
	case startErr != nil:
		visit.Outcome = run.Fail(run.CodeDispatchFailed, run.ClassPlatform, startErr.Error())
	default:
		visit.Status, visit.ErrorMessage = run.Failed, err.Error()
	}
	if timedOut && visit.Status != run.Succeeded {
		visit.Status, visit.ErrorCode = run.Cancelled, run.CodeLineTimeout
	}
	if visit.Status == run.TimedOut {
		visit.Status = run.Failed
	}
	return visit
}

// failureOf returns the classified failure as recorded (enriched with the
// failing step's diagnostics), falling back to f for what it lacks.
func failureOf(rec run.Failure, f *run.Failure) *run.Failure {
	if f == nil {
		return nil
	}
	out := *f
	out.ErrorCode = cmp.Or(rec.ErrorCode, out.ErrorCode)
	out.FailureClass = cmp.Or(rec.FailureClass, out.FailureClass)
	return &out
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
	// agentic: the transition whose option is still to decide; option and
	// decision: the option an agentic transition took (agentic.go).
	agentic  *manifests.Transition
	option   string
	decision run.Decision
}

// route picks the next stage from the stage just visited: exactly one
// matching conditional transition is taken; several are ambiguous; none
// falls to an agentic transition (decided by the caller), else the line ends
// (no outgoing transitions) or has no route.
func route(m manifests.LineManifest, in LineRunInput, st *LineState, from string, visit activities.StageVisit) (*hop, *run.Failure) {
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
			return nil, failure(run.LineStateInvalid, fmt.Sprintf("transition %s: %v", t.ID, err))
		}
		if ok {
			matched = append(matched, t)
		}
	}
	failed := visit.Status != run.Succeeded
	switch {
	case len(matched) > 1:
		ids := make([]string, len(matched))
		for i, t := range matched {
			ids[i] = t.ID
		}
		return nil, failure(run.AmbiguousTransition, fmt.Sprintf("from stage %s several transitions match: %v", from, ids))
	case len(matched) == 0 && agentic != nil:
		return &hop{agentic: agentic}, nil // decided by decideAgentic
	case len(matched) == 0 && len(outgoing) == 0:
		if failed {
			return nil, failure(run.StageFailed, fmt.Sprintf("stage %s %s: %s", from, visit.Status, visit.ErrorMessage))
		}
		return nil, nil
	case len(matched) == 0:
		if failed {
			return nil, failure(run.StageFailed, fmt.Sprintf("stage %s %s: %s", from, visit.Status, visit.ErrorMessage))
		}
		return nil, failure(run.NoRoute, fmt.Sprintf("no transition from stage %s matches", from))
	}
	t := matched[0]
	if t.MaxIterations != nil && st.Transitions[t.ID]+1 > *t.MaxIterations {
		return nil, failure(run.MaxIterationsExhausted, fmt.Sprintf("transition %s was taken %d times (max_iterations %d)", t.ID, st.Transitions[t.ID], *t.MaxIterations))
	}
	params, err := bindParams(t.Params, in, st, in.Jobs[t.To].Manifest)
	if err != nil {
		return nil, failure(run.TransitionParamsInvalid, fmt.Sprintf("transition %s: %v", t.ID, err))
	}
	return &hop{transition: t.ID, stage: t.To, params: params}, nil
}

// entryParams are the entry stage's params: the run params its job
// declares. A run also accepts the names input bindings read and later
// stages' params (manifests.LineInputs); the entry job does not take them.
func entryParams(params map[string]any, job manifests.JobManifest) map[string]any {
	if params == nil {
		return nil
	}
	out := make(map[string]any, len(params))
	//workflowcheck:ignore (a map built from a map: order does not matter)
	for name, v := range params {
		if _, declared := job.Job.Params[name]; declared {
			out[name] = v
		}
	}
	return out
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
				spec, declared := job.Job.Params[name]
				if declared && (spec.Default != nil || spec.Required == nil || !*spec.Required) {
					continue // the job's default applies, or the param stays unset
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

// stepCount is the number of steps of a job, all tasks together.
func stepCount(m *manifests.JobManifest) int {
	n := 0
	for _, t := range m.Run.Tasks {
		n += len(t.Steps)
	}
	return n
}
