package run

// WorkflowState is what the workflow engine knows of a run's workflow, as
// the reconciler and stops see it.
type WorkflowState struct {
	// State is one of the Workflow* constants.
	State string
	// Detail says more: a failure's message, a termination's reason.
	Detail string
	// Result decodes a completed workflow's result; nil otherwise.
	Result func(ptr any) error
}

// Workflow states.
const (
	WorkflowMissing    = "missing"
	WorkflowRunning    = "running"
	WorkflowCompleted  = "completed"
	WorkflowFailed     = "failed"
	WorkflowCancelled  = "cancelled"
	WorkflowTerminated = "terminated"
	WorkflowTimedOut   = "timed_out"
)

// CodeUnknown is the error code (and failure class) of a job run whose
// workflow was lost, terminated or failed in the engine: nothing says why
// the run itself ended (the line-run failure code unknown, domain unknown).
const CodeUnknown = "unknown"
