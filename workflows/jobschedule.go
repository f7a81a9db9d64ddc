package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/manifests/run"
)

// JobScheduleFireWorkflowName is the registered name of
// JobScheduleFireWorkflow.
const JobScheduleFireWorkflowName = "JobScheduleFire"

// JobScheduleFireInput is what a job's Temporal Schedule starts with:
// JobVersionID is the version whose deploy made the schedule, so a firing
// made for an older version starts nothing.
type JobScheduleFireInput struct {
	JobName      string
	JobVersionID string
}

// JobSchedule is what the engine needs to fire a job's [schedule]: the
// deployed version that carries it and its normalized cron, timezone and
// enabled.
type JobSchedule struct {
	JobName      string
	JobVersionID string
	Cron         string
	Timezone     string
	Enabled      bool
}

// JobScheduleFireWorkflow is one firing of a job schedule: it admits the
// job run (unless the firing is stale), which starts its workflow, which
// outlives it. The run id is fixed by this workflow, so retries make one
// run; a run whose workflow cannot be started is left failed (package
// admit).
func JobScheduleFireWorkflow(ctx workflow.Context, in JobScheduleFireInput) error {
	actx := fireOptions(ctx)
	var runID string
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return run.NewJobRunID() }).Get(&runID); err != nil {
		return err
	}
	fire := activities.FireJobScheduleInput{JobName: in.JobName, JobVersionID: in.JobVersionID, FiredAt: workflow.Now(ctx), RunID: runID}
	if workflow.GetVersion(ctx, admitInActivity, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return fireJobScheduleStartingChild(ctx, actx, fire)
	}
	fire.Admit = true
	var res activities.FireJobScheduleResult
	if err := workflow.ExecuteActivity(actx, a.FireJobSchedule, fire).Get(ctx, &res); err != nil {
		return err
	}
	logFiring(ctx, "job schedule firing", "job", in.JobName, res.Skipped, res.Failed, res.RunID)
	return nil
}

// fireJobScheduleStartingChild is a job schedule firing begun before
// admitInActivity, kept so that such firings replay: the activity records
// the run and its workflow is started here as a child.
func fireJobScheduleStartingChild(ctx, actx workflow.Context, fire activities.FireJobScheduleInput) error {
	var res activities.FireJobScheduleResult
	if err := workflow.ExecuteActivity(actx, a.FireJobSchedule, fire).Get(ctx, &res); err != nil {
		return err
	}
	if res.Skipped != "" || res.Failed != "" {
		logFiring(ctx, "job schedule firing", "job", fire.JobName, res.Skipped, res.Failed, res.RunID)
		return nil
	}
	err := startDetached(ctx, run.JobRunWorkflowID(res.RunID), JobRunWorkflowName, JobRunInput{Version: JobRunInputVersion, RunID: res.RunID, JobName: fire.JobName,
		JobVersionID: res.JobVersionID, Manifest: res.Manifest, Params: res.Params})
	if err == nil {
		return nil
	}
	msg := "the run could not be dispatched: " + err.Error()
	if ferr := workflow.ExecuteActivity(actx, a.FailScheduledJobRun, activities.FailScheduledJobRunInput{RunID: res.RunID, Message: msg}).Get(ctx, nil); ferr != nil {
		return ferr
	}
	return err
}

// FiredJobRunInput is the workflow input of a job run a schedule fired.
func FiredJobRunInput(r activities.FiredJobRun) JobRunInput {
	return JobRunInput{Version: JobRunInputVersion, RunID: r.RunID, JobName: r.JobName, JobVersionID: r.JobVersionID, Manifest: r.Manifest, Params: r.Params}
}

// FiredLineRunInput is the manager's input of a line run a schedule fired.
func FiredLineRunInput(r activities.FiredLineRun) LineRunInput {
	return LineRunInput{Version: LineRunInputVersion, RunID: r.RunID, LineName: r.LineName, LineVersionID: r.LineVersionID, Manifest: r.Manifest, Jobs: r.Jobs,
		Params: r.Params, Trigger: r.Trigger}
}
