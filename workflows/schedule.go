package workflows

import (
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/manifests/run"
)

// ScheduleFireWorkflowName is the registered name of ScheduleFireWorkflow.
const ScheduleFireWorkflowName = "ScheduleFire"

// ScheduleFireInput is what a line's Temporal Schedule starts with.
type ScheduleFireInput struct {
	LineName   string
	Generation int64
}

// ScheduleFireWorkflow is one firing of a line schedule: it admits the line
// run (unless the firing is stale), which starts its manager, which
// outlives it. The run id is fixed by this workflow, so retries make one
// run; a manager that cannot be started leaves the run failed with
// dispatch_failed (package admit).
func ScheduleFireWorkflow(ctx workflow.Context, in ScheduleFireInput) error {
	actx := fireOptions(ctx)
	var runID string
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return run.NewLineRunID() }).Get(&runID); err != nil {
		return err
	}
	fire := activities.FireScheduleInput{LineName: in.LineName, Generation: in.Generation, FiredAt: workflow.Now(ctx), RunID: runID}
	if workflow.GetVersion(ctx, admitInActivity, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return fireScheduleStartingChild(ctx, actx, fire)
	}
	fire.Admit = true
	var res activities.FireScheduleResult
	if err := workflow.ExecuteActivity(actx, a.FireSchedule, fire).Get(ctx, &res); err != nil {
		return err
	}
	logFiring(ctx, "schedule firing", "line", in.LineName, res.Skipped, res.Failed, res.RunID)
	return nil
}

// admitInActivity is the change after which a firing's activity admits the
// run (records it and starts its workflow); before it, the firing started
// the workflow as a child and recorded a refusal itself.
const admitInActivity = "admit-in-activity"

// logFiring logs how a firing ended.
func logFiring(ctx workflow.Context, what, key, name, skipped, failed, runID string) {
	log := workflow.GetLogger(ctx)
	switch {
	case skipped != "":
		log.Info(what+" skipped", key, name, "reason", skipped)
	case failed != "":
		log.Warn(what+" failed", key, name, "run_id", runID, "reason", failed)
	}
}

// fireScheduleStartingChild is a line schedule firing begun before
// admitInActivity, kept so that such firings replay: the activity records
// the run and the manager is started here as a child.
func fireScheduleStartingChild(ctx, actx workflow.Context, fire activities.FireScheduleInput) error {
	var res activities.FireScheduleResult
	if err := workflow.ExecuteActivity(actx, a.FireSchedule, fire).Get(ctx, &res); err != nil {
		return err
	}
	if res.Skipped != "" || res.Failed != "" {
		logFiring(ctx, "schedule firing", "line", fire.LineName, res.Skipped, res.Failed, res.RunID)
		return nil
	}
	err := startDetached(ctx, run.LineRunWorkflowID(res.RunID), LineRunWorkflowName, LineRunInput{Version: LineRunInputVersion, RunID: res.RunID, LineName: fire.LineName,
		LineVersionID: res.LineVersionID, Manifest: res.Manifest, Jobs: res.Jobs, Params: res.Params, Trigger: res.Trigger})
	if err == nil {
		return nil
	}
	f := run.NewFailure(run.DispatchFailed, "the line run could not be dispatched: "+err.Error())
	if ferr := workflow.ExecuteActivity(actx, a.FinishLineRun, activities.FinishLineRunInput{RunID: res.RunID, Status: run.Failed, Failure: f}).Get(ctx, nil); ferr != nil {
		return ferr
	}
	return err
}

// fireOptions gives ctx the activity options of a schedule firing.
func fireOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5},
	})
}

// startDetached starts a child workflow that outlives the firing that
// starts it; one already started (by an earlier try of the firing) is no
// error. Only firings begun before admitInActivity use it.
func startDetached(ctx workflow.Context, id, name string, input any) error {
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID: id, TaskQueue: TaskQueue, ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_ABANDON,
	})
	err := workflow.ExecuteChildWorkflow(cctx, name, input).GetChildWorkflowExecution().Get(ctx, nil)
	if temporal.IsWorkflowExecutionAlreadyStartedError(err) {
		return nil
	}
	return err
}
