package main

import (
	"context"
	"errors"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/linefactory/linefactory/activities"
)

// DescribeWorkflow tells the reconciler and stops what Temporal knows of a
// workflow: its latest run's state (a continued-as-new chain is followed to
// its end), the failure or termination detail, and a completed run's result.
func (rt *runtime) DescribeWorkflow(ctx context.Context, workflowID string) (activities.WorkflowState, error) {
	resp, err := rt.client.DescribeWorkflowExecution(ctx, workflowID, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return activities.WorkflowState{State: activities.WorkflowMissing}, nil
	}
	if err != nil {
		return activities.WorkflowState{}, err
	}
	info := resp.GetWorkflowExecutionInfo()
	runID := info.GetExecution().GetRunId()
	switch info.GetStatus() {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
		return activities.WorkflowState{State: activities.WorkflowRunning}, nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		return activities.WorkflowState{State: activities.WorkflowCompleted, Result: func(ptr any) error {
			return rt.client.GetWorkflow(ctx, workflowID, runID).Get(ctx, ptr)
		}}, nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		return activities.WorkflowState{State: activities.WorkflowCancelled}, nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:
		return activities.WorkflowState{State: activities.WorkflowTerminated, Detail: rt.closeDetail(ctx, workflowID, runID)}, nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		return activities.WorkflowState{State: activities.WorkflowTimedOut}, nil
	}
	return activities.WorkflowState{State: activities.WorkflowFailed, Detail: rt.closeDetail(ctx, workflowID, runID)}, nil
}

// closeDetail is the error a closed workflow run ended with, or "".
func (rt *runtime) closeDetail(ctx context.Context, workflowID, runID string) string {
	if err := rt.client.GetWorkflow(ctx, workflowID, runID).Get(ctx, nil); err != nil {
		return err.Error()
	}
	return ""
}
