package workflows

import (
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/linefactory/linefactory/activities"
)

// Register registers every workflow and the activities with a worker.
// Activity names are the method names of *activities.Activities.
func Register(r worker.Registry, acts *activities.Activities) {
	r.RegisterWorkflowWithOptions(JobRunWorkflow, workflowOptions())
	r.RegisterWorkflowWithOptions(LineRunWorkflow, workflow.RegisterOptions{Name: LineRunWorkflowName})
	r.RegisterWorkflowWithOptions(ScheduleFireWorkflow, workflow.RegisterOptions{Name: ScheduleFireWorkflowName})
	r.RegisterWorkflowWithOptions(JobScheduleFireWorkflow, workflow.RegisterOptions{Name: JobScheduleFireWorkflowName})
	r.RegisterActivity(acts)
}

func workflowOptions() workflow.RegisterOptions {
	return workflow.RegisterOptions{Name: JobRunWorkflowName}
}
