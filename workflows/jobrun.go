package workflows

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/run"
)

// TaskQueue is the task queue of every Linefactory workflow and activity.
const TaskQueue = "linefactory"

// JobRunWorkflowName is the registered name of JobRunWorkflow (a wire
// contract: rename only with a plan).
const JobRunWorkflowName = "JobRun"

// JobRunInput starts a job run: the job version's manifest snapshot and the
// params, already validated with defaults applied.
type JobRunInput struct {
	RunID        string
	JobName      string
	JobVersionID string
	Manifest     manifests.JobManifest
	Params       map[string]any
	// Resume is where a run that continued as new goes on from (chain.go);
	// nil when the run starts.
	Resume *JobRunResume `json:",omitempty"`
	// Version is the workflow code the starter wrote the input for
	// (JobRunInputVersion). A run whose input carries it takes the changes
	// versioned up to it without asking workflow.GetVersion, so its history
	// has no version marker and Temporal no TemporalChangeVersion update
	// (a visibility write per run). 0 is the input of older code: the run
	// asks GetVersion, as it did, and replays as it ran.
	Version int `json:",omitempty"`
}

// JobRunInputVersion is the Version every start of a job run writes: 1
// takes localSandboxChange (and the changes it stands for); 2 also makes
// the first task's quick provision while StartRun writes the record
// (startAndAcquire) instead of after it.
const JobRunInputVersion = 2

// JobRunResult is how a job run ended.
type JobRunResult = activities.FinishRunResult

// defaultStepTimeout bounds a step that sets no timeout of its own.
const defaultStepTimeout = 24 * time.Hour

// stepRetryWindow bounds the attempts of a step with the given timeout,
// all together: enough for its timeout twice over plus restarts.
func stepRetryWindow(timeout time.Duration) time.Duration {
	return 2*timeout + 10*time.Minute
}

var a *activities.Activities

// bookkeeping gives ctx the options of the run-record writes. They run as
// local activities, inside the workflow task that needs them: a store write
// takes milliseconds, and a regular activity would add a task round trip
// through the server for each. Regular activity options are kept on the
// context for the bookkeeping that is not sub-second (sandbox teardown).
//
// The timeouts are short so that a write lost with a killed worker is
// retried within seconds of a restart (a local activity is re-run with the
// workflow task; a regular one when its StartToClose expires).
func bookkeeping(ctx workflow.Context) workflow.Context {
	retry := &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumAttempts: 10}
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second, RetryPolicy: retry})
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second, RetryPolicy: retry})
}

// StopSignal is the signal that tells a job run why it is about to be
// cancelled, when the canceller is not a user (a line's timeout).
const StopSignal = "stop-note"

// StopNote is why a job run is cancelled: its error code, failure class and
// message.
type StopNote struct {
	Code    string
	Class   run.FailureClass
	Message string
}

// cancelled is the outcome of a run cancelled for this note.
func (n StopNote) cancelled() run.Outcome {
	return run.Outcome{Status: run.Cancelled, ErrorCode: n.Code, FailureClass: n.Class, ErrorMessage: n.Message}
}

// stopNote is the StopNote signalled to the run (or to an earlier run of
// its chain, carried), or a user's stop.
func (jr *jobRun) stopNote(ctx workflow.Context) StopNote {
	if got, ok := receivedStopNote(ctx); ok {
		return got
	}
	if r := jr.in.Resume; r != nil && r.Stop != nil {
		return *r.Stop
	}
	return StopNote{Code: run.CodeCancelled, Class: run.ClassUser, Message: "the run was stopped"}
}

// receivedStopNote is a StopNote signalled to this Temporal run, if any.
func receivedStopNote(ctx workflow.Context) (StopNote, bool) {
	var got StopNote
	ok := workflow.GetSignalChannel(ctx, StopSignal).ReceiveAsync(&got) && got.Code != ""
	return got, ok
}

// timeoutOutcome is the outcome of a run or step cut off by run.timeout.
func timeoutOutcome(msg string) run.Outcome {
	return run.Outcome{Status: run.TimedOut, ErrorCode: run.CodeTimeout, FailureClass: run.ClassConfig, ErrorMessage: msg}
}

// taskOutcome is what running one task produced.
type taskOutcome struct {
	failed  bool
	failure activities.RunStepResult
	writes  []manifests.OutputWrite
	sandbox activities.AcquireSandboxResult
	cost    float64
	// generated is the name a provision without a name would have made,
	// recorded even when acquiring failed, so teardown finds the sandbox.
	generated string
	// interrupted is the step in flight when the task was cancelled.
	interrupted string
	// lost: the sandbox's worker is gone.
	lost bool
	// state: not begun, paused at step next for the run to continue as
	// new, or done.
	state taskState
	next  int
}

// JobRunWorkflow runs a job's tasks (in order, or in parallel up to
// concurrency with fanout), each step an activity, then publishes the
// reduced outputs. It records everything in the run record as it goes.
// A long run continues as new between steps (chain.go): the runs of the
// chain share the workflow ID, and the last one finishes the record.
func JobRunWorkflow(ctx workflow.Context, in JobRunInput) (JobRunResult, error) {
	jr := newJobRun(ctx, in)
	if in.Resume == nil {
		if err := jr.startAndAcquire(ctx); err != nil {
			fin := jr.outcome(ctx) // what is to be torn down: the first task's sandbox, if made
			fin.Outcome = run.Fail(run.CodeInternalError, run.ClassPlatform, "the run could not be started: "+err.Error())
			if ctx.Err() != nil { // stopped before it started: the record must not stay queued
				fin.Outcome = jr.stopNote(ctx).cancelled()
			}
			return jr.finish(fin)
		}
	}
	jr.watchTimeout(ctx)
	if *jr.m.Run.Fanout {
		jr.runTasksInParallel(ctx)
	} else {
		jr.runTasksInOrder()
	}
	if jr.pausing && ctx.Err() == nil && jr.runCtx.Err() == nil {
		return JobRunResult{}, jr.continueAsNew(ctx)
	}
	return jr.finish(jr.outcome(ctx))
}

// jobRun is the state of a running JobRunWorkflow.
type jobRun struct {
	in     JobRunInput
	m      manifests.JobManifest // normalized
	params map[string]any        // the run's params with run_id
	// bookCtx carries the options of the run-record writes.
	bookCtx workflow.Context
	// runCtx is cancelled by run.timeout and, with fail_fast, by a failed task.
	runCtx    workflow.Context
	cancelRun workflow.CancelFunc
	timedOut  bool
	claims    map[string]map[string][]string
	outcomes  []taskOutcome
	anyFailed bool
	// remote are the sandboxes on workers' own queues.
	remote []activities.AcquireSandboxResult
	// local: the run acquires quick provisions and tears down as local
	// activities (localSandboxChange), and takes the changes before it.
	local bool
	// ends are steps' ends not written durably yet (runTaskStep).
	ends stepEnds
	// first is the first task's quick provision, started with StartRun
	// (startAndAcquire); nil when it was not.
	first workflow.Future
	chain
}

func newJobRun(ctx workflow.Context, in JobRunInput) *jobRun {
	m := in.Manifest
	// Map iterations below only fill maps, so their order cannot leak.
	manifests.NormalizeJob(&m) //workflowcheck:ignore
	params := map[string]any{manifests.ReservedRunID: in.RunID}
	//workflowcheck:ignore
	for k, v := range in.Params {
		params[k] = v
	}
	claims := manifests.Claims(&m) //workflowcheck:ignore (keys are sorted)
	jr := &jobRun{in: in, m: m, params: params, bookCtx: bookkeeping(ctx), claims: claims,
		outcomes: make([]taskOutcome, len(m.Run.Tasks))}
	jr.local = in.Version >= 1 || workflow.GetVersion(ctx, localSandboxChange, workflow.DefaultVersion, 1) == 1
	jr.resume(ctx)
	return jr
}

// startAndAcquire marks the run record running. From input Version 2, a
// run whose tasks run in order and whose first task's sandbox is a quick
// provision (local activities) makes that sandbox meanwhile: the two local
// activities run at once, not one after the other (the first workflow task
// about 0.4 ms shorter: every job run's start, every stage of a line).
func (jr *jobRun) startAndAcquire(ctx workflow.Context) error {
	fut := workflow.ExecuteLocalActivity(jr.bookCtx, a.StartRun, activities.StartRunInput{RunID: jr.in.RunID, Manifest: jr.m})
	if jr.in.Version >= 2 && jr.local && !*jr.m.Run.Fanout && len(jr.m.Run.Tasks) > 0 {
		if sbCfg := jr.taskSandbox(0); quickProvision(sbCfg) {
			jr.first = startAcquireHere(ctx, jr.acquireInput(0, sbCfg))
		}
	}
	return fut.Get(jr.bookCtx, nil)
}

// settleFirst waits for the first task's quick provision that
// startAndAcquire started and task 0 never took (the run could not start,
// or was stopped first), and records it as task 0's sandbox, so that the
// run tears it down.
func (jr *jobRun) settleFirst(ctx workflow.Context) {
	if jr.first == nil {
		return
	}
	o := &jr.outcomes[0]
	o.generated = jr.generatedName(0) // a half-made one goes too
	if err := jr.first.Get(ctx, &o.sandbox); err != nil {
		o.sandbox = activities.AcquireSandboxResult{}
	}
	jr.first = nil
}

// generatedName is the name task ti's sandbox is made with when its
// configuration names none (a provision), else "".
func (jr *jobRun) generatedName(ti int) string {
	if c := jr.taskSandbox(ti); c == nil || (c.Name == "" && (c.Mode == "" || c.Mode == manifests.SandboxProvision)) {
		return activities.ProvisionName(jr.in.RunID, ti)
	}
	return ""
}

// taskSandbox is task ti's sandbox configuration (the run's when the task
// has none; nil when neither has).
func (jr *jobRun) taskSandbox(ti int) *manifests.SandboxConfig {
	if c := jr.m.Run.Tasks[ti].Sandbox; c != nil {
		return c
	}
	return jr.m.Run.Sandbox
}

// acquireInput is the AcquireSandbox input of task ti.
func (jr *jobRun) acquireInput(ti int, sbCfg *manifests.SandboxConfig) activities.AcquireSandboxInput {
	m := &jr.m
	return activities.AcquireSandboxInput{RunID: jr.in.RunID, Task: m.Run.Tasks[ti].Name, TaskIndex: ti, Config: sbCfg, Params: jr.params,
		ResumeOnStart: m.Run.ResumeOnStart != nil && *m.Run.ResumeOnStart}
}

// finish tears down what the run leaves behind and records how it ended.
func (jr *jobRun) finish(fin activities.FinishRunInput) (JobRunResult, error) {
	dctx, _ := workflow.NewDisconnectedContext(jr.bookCtx)
	fin.RunID, fin.Manifest, fin.Ends = jr.in.RunID, jr.m, jr.ends.all()
	teardown := jr.m.Run.TeardownOnComplete != nil && *jr.m.Run.TeardownOnComplete
	if teardown {
		teardownRouted(dctx, jr.remote, "")
	} else if jr.m.Run.TeardownOnComplete == nil && len(jr.remote) > 0 &&
		(jr.local || workflow.GetVersion(dctx, remoteDefaultTeardownVersion, workflow.DefaultVersion, 1) == 1) {
		// Unset: what the run provisioned goes, on the workers holding it
		// (FinishRun sees only the sandboxes of the worker it runs on):
		// those of this worker by a local activity, the others on theirs.
		left := jr.remote
		if jr.local {
			left = teardownHere(dctx, jr.remote, jr.in.RunID)
		}
		teardownRouted(dctx, left, jr.in.RunID)
	}
	var res JobRunResult
	var fut workflow.Future
	if teardown && len(fin.Sandboxes) > 0 {
		// Deleting sandboxes is not sub-second bookkeeping: a regular
		// activity, so a slow teardown holds no workflow task.
		fut = workflow.ExecuteActivity(dctx, a.FinishRun, fin)
	} else {
		fut = workflow.ExecuteLocalActivity(dctx, a.FinishRun, fin)
	}
	err := fut.Get(dctx, &res)
	return res, err
}

// remoteDefaultTeardownVersion marks job runs that delete, with
// teardown_on_complete unset, the sandboxes they provisioned on other
// workers (runs before it left them on disk).
const remoteDefaultTeardownVersion = "remote-default-teardown"

// watchTimeout makes the run's context, cancelled when run.timeout passes:
// at the deadline set when the chain's first run began.
func (jr *jobRun) watchTimeout(ctx workflow.Context) {
	jr.runCtx, jr.cancelRun = workflow.WithCancel(ctx)
	if jr.in.Resume == nil && jr.m.Run.Timeout != "" {
		if d, err := manifests.ParseDuration(jr.m.Run.Timeout); err == nil {
			dl := workflow.Now(ctx).Add(d)
			jr.deadline = &dl
		}
	}
	if jr.deadline == nil {
		return
	}
	left := jr.deadline.Sub(workflow.Now(ctx))
	if left <= 0 { // passed while the chain continued as new
		jr.timedOut = true
		jr.cancelRun()
		return
	}
	workflow.Go(jr.runCtx, func(gctx workflow.Context) {
		if workflow.NewTimer(gctx, left).Get(gctx, nil) == nil {
			jr.timedOut = true
			jr.cancelRun()
		}
	})
}

// runTask runs task i (on from where an earlier run of the chain paused
// it) and records its outcome; with fail_fast a failed task cancels the
// others.
func (jr *jobRun) runTask(tctx workflow.Context, i int) {
	jr.outcomes[i] = jr.runTaskFrom(tctx, i, jr.outcomes[i])
	if jr.outcomes[i].failed {
		jr.anyFailed = true
		if *jr.m.Run.FailFast {
			jr.cancelRun()
		}
	}
}

// runTasksInOrder runs the tasks one after the other until the run is
// cancelled or pauses to continue as new.
func (jr *jobRun) runTasksInOrder() {
	for i := range jr.m.Run.Tasks {
		if jr.runCtx.Err() != nil {
			break
		}
		if jr.outcomes[i].state == taskDone { // in an earlier run of the chain
			continue
		}
		if jr.outcomes[i].state == taskNotBegun && jr.pause(jr.runCtx) {
			break
		}
		jr.runTask(jr.runCtx, i)
	}
}

// runTasksInParallel runs the tasks up to run.concurrency at a time
// (fanout) until the run is cancelled or pauses to continue as new, and
// waits for those started.
func (jr *jobRun) runTasksInParallel(ctx workflow.Context) {
	limit := *jr.m.Run.Concurrency
	running := 0
	done := workflow.NewBufferedChannel(ctx, len(jr.m.Run.Tasks))
	for i := range jr.m.Run.Tasks {
		if jr.outcomes[i].state == taskDone { // in an earlier run of the chain
			continue
		}
		if running >= limit {
			done.Receive(ctx, nil)
			running--
		}
		if jr.runCtx.Err() != nil {
			break
		}
		if jr.outcomes[i].state == taskNotBegun && jr.pause(jr.runCtx) {
			break
		}
		running++
		i := i
		workflow.Go(jr.runCtx, func(gctx workflow.Context) {
			jr.runTask(gctx, i)
			done.Send(gctx, struct{}{})
		})
	}
	for ; running > 0; running-- {
		done.Receive(ctx, nil)
	}
}

// outcome gathers the tasks' outcomes into how the run ends: stopped,
// timed out, failed by its first failed task, or succeeded; with the
// outputs written, the compute cost, the failed steps and the sandboxes
// to tear down.
func (jr *jobRun) outcome(ctx workflow.Context) activities.FinishRunInput {
	jr.settleFirst(ctx)
	m := &jr.m
	fin := activities.FinishRunInput{Outcome: run.Outcome{Status: run.Succeeded}}
	for i, o := range jr.outcomes {
		fin.Writes = append(fin.Writes, o.writes...)
		fin.ComputeCostCents += o.cost
		if o.lost {
			// its worker is gone, and the sandbox with it: nothing to tear down
		} else if o.sandbox.Name != "" && o.sandbox.Created && o.sandbox.Queue != "" {
			jr.remote = append(jr.remote, o.sandbox) // torn down on its worker
		} else if o.sandbox.Name != "" && o.sandbox.Created {
			fin.Sandboxes = append(fin.Sandboxes, o.sandbox.Name)
		} else if o.generated != "" {
			fin.Sandboxes = append(fin.Sandboxes, o.generated)
		}
		if o.failed {
			fin.Steps = append(fin.Steps, o.failure)
		}
		if o.interrupted != "" && jr.timedOut {
			fin.Steps = append(fin.Steps, activities.RunStepResult{Task: m.Run.Tasks[i].Name, Step: o.interrupted,
				Outcome: timeoutOutcome(fmt.Sprintf("interrupted by run.timeout %s", m.Run.Timeout))})
		}
	}
	switch {
	case ctx.Err() != nil: // the run was stopped
		fin.Outcome = jr.stopNote(ctx).cancelled()
	case jr.timedOut:
		fin.Outcome = timeoutOutcome(fmt.Sprintf("the run exceeded run.timeout %s", m.Run.Timeout))
	case jr.anyFailed:
		for _, o := range jr.outcomes {
			if o.failed {
				f := o.failure
				fin.Outcome = run.Fail(f.ErrorCode, f.FailureClass, f.ErrorMessage)
				fin.FailedTask, fin.FailedStep = f.Task, f.Step
				break
			}
		}
	}
	return fin
}

// runTaskFrom acquires the task's sandbox and runs its steps in order; the
// first failed step fails the task and skips the rest. A task paused by an
// earlier run of the chain (out) goes on in the sandbox it acquired, from
// its next step; a task pauses between steps when the run is to continue
// as new.
func (jr *jobRun) runTaskFrom(ctx workflow.Context, ti int, out taskOutcome) taskOutcome {
	in, m, params, claims := jr.in, &jr.m, jr.params, jr.claims[jr.m.Run.Tasks[ti].Name]
	task := m.Run.Tasks[ti]
	sbCfg := jr.taskSandbox(ti)
	resumed := out.state == taskPaused
	out.state = taskDone // unless it pauses
	var first workflow.Future
	if ti == 0 {
		first, jr.first = jr.first, nil
	}
	if !resumed && !jr.acquireTaskSandbox(ctx, ti, sbCfg, first, &out) {
		return out
	}
	for si := out.next; si < len(task.Steps); si++ {
		if ctx.Err() != nil {
			return out
		}
		if jr.pause(ctx) {
			out.state, out.next = taskPaused, si
			return out
		}
		ok := runTaskStep(ctx, in, m, ti, si, sbCfg, params, claims, &out, &jr.ends)
		jr.stepsRun++
		if !ok {
			return out
		}
	}
	return out
}

// acquireTaskSandbox acquires task ti's sandbox into out; false when the
// task cannot go on (out says why, or the run was stopped). With jr.local
// (localSandboxChange), a quick provision is made by a local activity:
// first, when startAndAcquire started it already.
func (jr *jobRun) acquireTaskSandbox(ctx workflow.Context, ti int, sbCfg *manifests.SandboxConfig, first workflow.Future, out *taskOutcome) bool {
	m, local := &jr.m, jr.local
	task := m.Run.Tasks[ti]
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Minute,
		// AcquireSandbox heartbeats while sources clone and setup scripts
		// run; a short timeout lets a stop reach them within seconds.
		HeartbeatTimeout:    5 * time.Second,
		WaitForCancellation: true,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 3,
			NonRetryableErrorTypes: activities.PermanentErrorTypes},
	})
	out.generated = jr.generatedName(ti)
	acq := jr.acquireInput(ti, sbCfg)
	var err error
	done := false
	switch {
	case first != nil:
		done, err = acquiredHere(ctx, first, &out.sandbox)
	case local && quickProvision(sbCfg):
		done, err = acquireHere(ctx, acq, &out.sandbox)
	}
	if done {
		// made here, or failed
	} else if local || affinity(ctx) {
		var gone *activities.LocateSandboxResult
		if gone, err = acquireRouted(actx, sbCfg, acq, out.generated, &out.sandbox); gone != nil {
			out.failed = true
			out.failure = activities.WorkerGone(task.Name, manifests.StepName(task, 0), gone.Name, gone.WorkerID, gone.SeenAt)
			return false
		}
	} else {
		err = workflow.ExecuteActivity(actx, a.AcquireSandbox, acq).Get(actx, &out.sandbox)
	}
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		out.failed = true
		out.failure = activities.AcquireFailure(task.Name, err)
		if len(task.Steps) > 0 { // the failure is shown on the task's first step
			out.failure.Step = manifests.StepName(task, 0)
		}
		return false
	}
	return true
}

// stepContext gives ctx the activity options of a step with the given
// timeout.
func stepContext(ctx workflow.Context, timeout time.Duration) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: timeout + time.Minute,
		// Cancellation reaches a step only through heartbeats, which the
		// SDK sends at most every 0.8 × HeartbeatTimeout: keep it short so
		// a stop ends the step within seconds.
		HeartbeatTimeout:    3 * time.Second,
		WaitForCancellation: true,
		// Attempts are not counted: a worker restart (a rolling deploy)
		// re-runs the step without using one up. Infrastructure retries
		// are bounded in time by the step's own timeout instead.
		ScheduleToCloseTimeout: stepRetryWindow(timeout),
		// No NonRetryableErrorTypes: RunStep turns what retrying cannot fix
		// into the step's outcome or a non-retryable error where it is made
		// (activities.sandboxError, permanent), and the list would be
		// written into every step's ActivityTaskScheduled event (~150 bytes
		// of a ~650-byte event).
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second},
	})
}

// maxLazyEnds is how many steps' ends a job run keeps written but not
// durably (stepEnds) before a step's write is made durable.
const maxLazyEnds = 16

// stepEnds are a job run's steps' ends (activities.StepEnd) until written
// durably: pending no write has carried yet; lazy carried by a write that a
// database crash may lose (activities.RunStepInput.Durable), written again
// (a no-op unless lost) by the next durable write: a step's once there are
// maxLazyEnds of them, or FinishRun's.
type stepEnds struct {
	pending, lazy []activities.StepEnd
}

// take returns the ends a step's write carries and whether it is durable.
func (e *stepEnds) take() ([]activities.StepEnd, bool) {
	if len(e.lazy) >= maxLazyEnds {
		return e.all(), true
	}
	return slices.Clone(e.pending), false
}

// written records that a step's write carried ends (durably or not) and
// adds the step's own end, if it left one.
func (e *stepEnds) written(ends []activities.StepEnd, durable bool, own *activities.StepEnd) {
	carried := func(x activities.StepEnd) bool { return hasEnd(ends, x) }
	// Those that were taken go (others may have been added meanwhile by
	// steps of other tasks).
	e.pending = slices.DeleteFunc(e.pending, carried)
	if durable {
		e.lazy = slices.DeleteFunc(e.lazy, carried)
	} else {
		for _, x := range ends {
			if !hasEnd(e.lazy, x) { // steps of two tasks may carry the same
				e.lazy = append(e.lazy, x)
			}
		}
	}
	if own != nil {
		e.pending = append(e.pending, *own)
	}
}

// hasEnd tells whether ends holds the end of x's step.
func hasEnd(ends []activities.StepEnd, x activities.StepEnd) bool {
	return slices.ContainsFunc(ends, func(w activities.StepEnd) bool { return w.Task == x.Task && w.Step == x.Step })
}

// all are the ends a durable write carries.
func (e *stepEnds) all() []activities.StepEnd { return slices.Concat(e.lazy, e.pending) }

// runTaskStep runs step si of task ti in the task's sandbox and records it
// in out; false when the task cannot go on (the step failed or was
// interrupted).
//
// ends are steps' ends not written durably yet (activities.StepEnd): this
// step's activity writes them, and a step that succeeds and is followed by
// another of its task leaves its own there. Those this step took stay
// until its activity has completed (one that did not run wrote nothing),
// and then until a durable write has carried them (stepEnds).
func runTaskStep(ctx workflow.Context, in JobRunInput, m *manifests.JobManifest, ti, si int, sbCfg *manifests.SandboxConfig, params map[string]any, claims map[string][]string, out *taskOutcome, ends *stepEnds) bool {
	task := m.Run.Tasks[ti]
	step := task.Steps[si]
	name := manifests.StepName(task, si)
	timeout := defaultStepTimeout
	if step.Timeout != nil {
		timeout = time.Duration(*step.Timeout) * time.Second
	}
	sctx := stepContext(ctx, timeout)
	workdir := step.Workdir
	if workdir == "" {
		workdir = m.Run.Workdir
	}
	if workdir == "" && sbCfg != nil {
		workdir = sbCfg.Workdir
	}
	req := activities.RunStepInput{
		RunID: in.RunID, Task: task.Name, TaskIndex: ti, Step: name, StepIndex: si, Action: step,
		Sandbox: out.sandbox.Name, Workdir: workdir, Params: params, Claimed: claims[name],
		OutputSpecs: m.Outputs, TimeoutSeconds: int(timeout / time.Second),
		Vcpus: out.sandbox.Vcpus, MemoryMB: out.sandbox.MemoryMB, NextStep: si+1 < len(task.Steps),
		FinishNext: !*m.Run.Fanout && ti == len(m.Run.Tasks)-1 && si == len(task.Steps)-1,
		DeferEnd:   true,
	}
	req.Ends, req.Durable = ends.take()
	var res activities.RunStepResult
	err := routed(sctx, out.sandbox.Queue, out.sandbox.WorkerID, a.RunStep, req, &res)
	if err == nil { // the activity completed (not a gone worker's result below)
		ends.written(req.Ends, req.Durable, res.End)
	}
	if wg := (*errWorkerGone)(nil); errors.As(err, &wg) {
		res, err = activities.WorkerGone(task.Name, name, out.sandbox.Name, wg.loc.WorkerID, wg.loc.SeenAt), nil
		out.lost = true
	}
	if err != nil {
		if ctx.Err() != nil {
			out.interrupted = name
			return false
		}
		// failed, or timed_out when its StartToClose fired
		res = activities.StepFailureFromError(task.Name, name, err)
	}
	out.cost += res.ComputeCostCents
	if res.Status != run.Succeeded {
		out.failed = true
		out.failure = res
		return false
	}
	if len(res.Outputs) > 0 || len(req.Claimed) > 0 {
		out.writes = append(out.writes, manifests.OutputWrite{Task: task.Name, TaskIndex: ti, Step: name, StepIndex: si, Succeeded: true, Values: res.Outputs})
	}
	return true
}
