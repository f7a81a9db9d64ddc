package workflows

import (
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/linefactory/linefactory/activities"
)

// ScheduleFireWorkflowName is the registered name of ScheduleFireWorkflow.
const ScheduleFireWorkflowName = "ScheduleFire"

// LineScheduleID is the Temporal Schedule ID of a line's schedule.
func LineScheduleID(line string) string { return "lineschedule/" + line }

// ScheduleFireInput is what a line's Temporal Schedule starts with.
type ScheduleFireInput struct {
	LineName   string
	Generation int64
}

// ScheduleFireWorkflow is one firing of a line schedule: it creates the line
// run (unless the firing is stale) and starts its manager, which outlives it.
func ScheduleFireWorkflow(ctx workflow.Context, in ScheduleFireInput) error {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5},
	})
	var res activities.FireScheduleResult
	fire := activities.FireScheduleInput{LineName: in.LineName, Generation: in.Generation, FiredAt: workflow.Now(ctx)}
	if err := workflow.ExecuteActivity(actx, a.FireSchedule, fire).Get(ctx, &res); err != nil {
		return err
	}
	if res.Skipped != "" {
		workflow.GetLogger(ctx).Info("schedule firing skipped", "line", in.LineName, "reason", res.Skipped)
		return nil
	}
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID: LineRunWorkflowID(res.RunID), TaskQueue: TaskQueue,
		ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_ABANDON,
	})
	child := workflow.ExecuteChildWorkflow(cctx, LineRunWorkflowName, LineRunInput{RunID: res.RunID, LineName: in.LineName,
		LineVersionID: res.LineVersionID, Manifest: res.Manifest, Jobs: res.Jobs, Params: res.Params, Trigger: res.Trigger})
	return child.GetChildWorkflowExecution().Get(ctx, nil)
}
