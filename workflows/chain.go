package workflows

import (
	"encoding/json"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/manifests"
)

// A long job run is a chain of Temporal runs of one workflow (the ID stays
// jobrun/<id>): every step adds about six events to a run's history, and
// Temporal ends a run at 51,200 events (and slows down well before). So a
// run continues as new between steps, after MaxStepsPerRun steps or when
// Temporal suggests it, handing the next run what it needs to go on
// (JobRunResume): each task's progress (done, paused at a step with the
// sandbox it acquired, or not begun), the outputs, costs and failures so
// far, the absolute run.timeout deadline and a stop note already signalled.
//
// It happens only at a boundary, when no step or sandbox activity is in
// flight: once the run decides to continue, every task pauses before its
// next step and no task begins; the run continues when the tasks running
// (fanout runs up to concurrency of them) have paused or ended. A fanout
// run's tasks thus wait for the slowest step in flight at that moment. A
// run that is stopped, timed out or failed fast meanwhile ends instead, as
// it would have.

// continueAsNewChange is the workflow.GetVersion change id of job runs that
// continue as new (runs started before replay as they ran, in one run).
const continueAsNewChange = "jobrun-continue-as-new"

// MaxStepsPerRun bounds the steps one Temporal run of a job run runs (about
// 3,000 history events). A variable for tests, which lower it. Each run
// records the bounds it runs with (a side effect in its history), so a
// change of them does not change how runs in flight replay.
var MaxStepsPerRun = 500

// maxResumeBytes bounds the JSON encoding of the input a run continues as
// new with (the manifest, the params and the progress): Temporal refuses a
// payload over 2 MB. A run whose carry would be larger goes on in the same
// Temporal run, and says so in the worker's log. A variable for tests.
var maxResumeBytes = 3 << 19 // 1.5 MB

// chainBounds are the bounds a Temporal run of a job run continues as new
// by, recorded in its history.
type chainBounds struct {
	Steps, ResumeBytes int
}

// JobRunResume is where a job run that continued as new goes on from.
type JobRunResume struct {
	// Tasks is each task's progress, by index.
	Tasks []TaskProgress
	// Deadline is when run.timeout ends the run (nil without one).
	Deadline *time.Time `json:",omitempty"`
	// Stop is a stop note signalled to an earlier run.
	Stop *StopNote `json:",omitempty"`
	// Runs counts the Temporal runs of the chain before this one, Steps the
	// steps they ran.
	Runs, Steps int
	// Ends are steps' ends not written durably yet (stepEnds).
	Ends []activities.StepEnd `json:",omitempty"`
}

// TaskProgress is a task's progress carried to the next run of the chain.
type TaskProgress struct {
	// State: 0 not begun, 1 paused before step Next, 2 done.
	State taskState `json:",omitempty"`
	Next  int       `json:",omitempty"`
	// What the task did so far (taskOutcome).
	Failed    bool                      `json:",omitempty"`
	Failure   *activities.RunStepResult `json:",omitempty"`
	Writes    []manifests.OutputWrite   `json:",omitempty"`
	Sandbox   activities.AcquireSandboxResult
	Cost      float64 `json:",omitempty"`
	Generated string  `json:",omitempty"`
	Lost      bool    `json:",omitempty"`
}

// taskState is how far a task got.
type taskState int

const (
	taskNotBegun taskState = iota
	taskPaused
	taskDone
)

// chain is a job run's part in its chain of Temporal runs.
type chain struct {
	// chained: this run may continue as new (continueAsNewChange), by
	// bounds.
	chained bool
	bounds  chainBounds
	// deadline is when run.timeout ends the run, for the whole chain.
	deadline *time.Time
	// stepsRun counts the steps this Temporal run ran.
	stepsRun int
	// pausing: the run continues as new once its tasks have paused.
	pausing bool
	// tooLarge: the carry would not fit a continue-as-new.
	tooLarge bool
}

// resume sets up the run from what an earlier run of its chain carried.
func (jr *jobRun) resume(ctx workflow.Context) {
	jr.chained = jr.local || workflow.GetVersion(ctx, continueAsNewChange, workflow.DefaultVersion, 1) == 1
	if jr.chained {
		current := chainBounds{Steps: MaxStepsPerRun, ResumeBytes: maxResumeBytes}
		rec := workflow.SideEffect(ctx, func(workflow.Context) any { return current })
		if rec.Get(&jr.bounds) != nil {
			jr.bounds = current
		}
	}
	r := jr.in.Resume
	if r == nil {
		return
	}
	jr.deadline, jr.ends.pending = r.Deadline, r.Ends
	for i, p := range r.Tasks {
		if i < len(jr.outcomes) {
			jr.outcomes[i] = p.outcome()
			jr.anyFailed = jr.anyFailed || p.Failed
		}
	}
}

// pause tells whether a task at a step boundary stops there: the run has
// run enough steps, or Temporal suggests continuing as new (and the carry
// fits). A run that has run no step yet never pauses, so a chain always
// moves on.
func (jr *jobRun) pause(ctx workflow.Context) bool {
	if jr.pausing || !jr.chained || jr.stepsRun == 0 || jr.tooLarge {
		return jr.pausing
	}
	if jr.stepsRun < jr.bounds.Steps && !workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
		return false
	}
	if n := jr.resumeSize(); n > jr.bounds.ResumeBytes {
		jr.tooLarge = true
		workflow.GetLogger(ctx).Warn("job run cannot continue as new: what it carries is too large, it goes on in this run",
			"RunID", jr.in.RunID, "bytes", n, "limit", jr.bounds.ResumeBytes)
		return false
	}
	jr.pausing = true
	return true
}

// resumeSize is the size of the input the run would continue as new with
// now (the tasks running may add their paused step's outputs).
func (jr *jobRun) resumeSize() int {
	in := jr.in
	in.Resume = jr.carry()
	//workflowcheck:ignore (JSON encoding is deterministic)
	b, err := json.Marshal(in)
	if err != nil {
		return jr.bounds.ResumeBytes + 1
	}
	return len(b)
}

// carry is what the next run of the chain needs to go on.
func (jr *jobRun) carry() *JobRunResume {
	r := &JobRunResume{Deadline: jr.deadline, Runs: 1, Steps: jr.stepsRun, Ends: jr.ends.all()}
	if old := jr.in.Resume; old != nil {
		r.Runs, r.Steps, r.Stop = old.Runs+1, old.Steps+jr.stepsRun, old.Stop
	}
	for _, o := range jr.outcomes {
		r.Tasks = append(r.Tasks, o.progress())
	}
	return r
}

// continueAsNew ends this Temporal run, handing the run over to the next
// one. A stop note signalled to this run goes with it (a signal this run
// did not take would be lost).
func (jr *jobRun) continueAsNew(ctx workflow.Context) error {
	r := jr.carry()
	if got, ok := receivedStopNote(ctx); ok {
		r.Stop = &got
	}
	workflow.GetLogger(ctx).Info("job run continues as new", "RunID", jr.in.RunID, "runs", r.Runs, "steps", r.Steps)
	in := jr.in
	in.Resume = r
	return workflow.NewContinueAsNewError(ctx, JobRunWorkflowName, in)
}

// progress is the outcome as carried to the next run.
func (o taskOutcome) progress() TaskProgress {
	p := TaskProgress{State: o.state, Next: o.next, Failed: o.failed, Writes: o.writes, Sandbox: o.sandbox, Cost: o.cost,
		Generated: o.generated, Lost: o.lost}
	if o.failed {
		f := o.failure
		p.Failure = &f
	}
	return p
}

// outcome is the carried progress as the task's outcome.
func (p TaskProgress) outcome() taskOutcome {
	o := taskOutcome{state: p.State, next: p.Next, failed: p.Failed, writes: p.Writes, sandbox: p.Sandbox, cost: p.Cost,
		generated: p.Generated, lost: p.Lost}
	if p.Failure != nil {
		o.failure = *p.Failure
	}
	return o
}
