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

// JobScheduleFireWorkflow is one firing of a job schedule: it records the
// job run (unless the firing is stale) and starts its workflow, which
// outlives it. The run id is fixed by this workflow, so retries make one
// run; a run whose workflow cannot be started is left failed.
func JobScheduleFireWorkflow(ctx workflow.Context, in JobScheduleFireInput) error {
	actx := fireOptions(ctx)
	var runID string
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return run.NewJobRunID() }).Get(&runID); err != nil {
		return err
	}
	var res activities.FireJobScheduleResult
	fire := activities.FireJobScheduleInput{JobName: in.JobName, JobVersionID: in.JobVersionID, FiredAt: workflow.Now(ctx), RunID: runID}
	if err := workflow.ExecuteActivity(actx, a.FireJobSchedule, fire).Get(ctx, &res); err != nil {
		return err
	}
	log := workflow.GetLogger(ctx)
	if res.Skipped != "" {
		log.Info("job schedule firing skipped", "job", in.JobName, "reason", res.Skipped)
		return nil
	}
	if res.Failed != "" {
		log.Warn("job schedule firing failed", "job", in.JobName, "run_id", res.RunID, "reason", res.Failed)
		return nil
	}
	err := startDetached(ctx, run.JobRunWorkflowID(res.RunID), JobRunWorkflowName, JobRunInput{RunID: res.RunID, JobName: in.JobName,
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
