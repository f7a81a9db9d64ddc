package workflows

import (
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/linefactory/linefactory/activities"
)

// Register registers every workflow and the activities with a worker.
// Activity names are the method names of *activities.Activities.
func Register(r worker.Registry, acts *activities.Activities) {
	RegisterWorkflows(r)
	r.RegisterActivity(acts)
}

// WorkflowRegistry is where workflows are registered: a worker, or a
// replayer that checks recorded histories against the code.
type WorkflowRegistry interface {
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
}

// RegisterWorkflows registers every workflow under its wire name.
func RegisterWorkflows(r WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(JobRunWorkflow, workflowOptions())
	r.RegisterWorkflowWithOptions(LineRunWorkflow, workflow.RegisterOptions{Name: LineRunWorkflowName})
	r.RegisterWorkflowWithOptions(ScheduleFireWorkflow, workflow.RegisterOptions{Name: ScheduleFireWorkflowName})
	r.RegisterWorkflowWithOptions(JobScheduleFireWorkflow, workflow.RegisterOptions{Name: JobScheduleFireWorkflowName})
}

func workflowOptions() workflow.RegisterOptions {
	return workflow.RegisterOptions{Name: JobRunWorkflowName}
}
