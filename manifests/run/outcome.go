package run

// FailureClass says who must act on a failed job run or step, equal to its
// wire value (failure_class).
type FailureClass string

// Failure classes.
const (
	ClassInfra    FailureClass = "infra"    // the machine or sandbox failed
	ClassConfig   FailureClass = "config"   // the manifest or its params are wrong
	ClassContract FailureClass = "contract" // a step broke the job's output contract
	ClassAgent    FailureClass = "agent"    // an agent failed
	ClassUser     FailureClass = "user"     // a user stopped it
	ClassPlatform FailureClass = "platform" // Linefactory itself failed
)

// Valid says whether c is one of the failure classes.
func (c FailureClass) Valid() bool {
	switch c {
	case ClassInfra, ClassConfig, ClassContract, ClassAgent, ClassUser, ClassPlatform:
		return true
	}
	return false
}

// Outcome is how a step, job run or stage visit ended. Empty strings mean
// "none" (the records show them as null).
type Outcome struct {
	Status       Status
	ErrorCode    string         `json:",omitempty"`
	ErrorMessage string         `json:",omitempty"`
	FailureClass FailureClass   `json:",omitempty"`
	ErrorDetails map[string]any `json:",omitempty"`
}

// StopMessage is the error message of a run a stop ended: "stopped: " and
// the stop's reason, however the run ended (its workflow, the reconciler,
// or a stop of a run whose workflow is gone).
func StopMessage(reason string) string { return "stopped: " + reason }

// Fail is the outcome of something that failed with code, class and msg.
func Fail(code string, class FailureClass, msg string) Outcome {
	return Outcome{Status: Failed, ErrorCode: code, FailureClass: class, ErrorMessage: msg}
}

// Error codes of job runs and steps (error_code) that Linefactory sets
// itself; sandbox drivers add their own (SANDBOX_*, COMMAND_NOT_FOUND, …).
const (
	CodeExecFailed       = "EXEC_FAILED"
	CodeTimeout          = "TIMEOUT"
	CodeHeartbeatTimeout = "HEARTBEAT_TIMEOUT"
	CodeCancelled        = "CANCELLED"
	CodeBadGateway       = "BAD_GATEWAY"
	CodeInternalError    = "INTERNAL_ERROR"
	CodeTemplateInvalid  = "TEMPLATE_INVALID"
	CodeStepUnsupported  = "STEP_UNSUPPORTED"
	// Agent steps (AGENTS.md) and artifacts: the harness exited non-zero
	// (class agent); a session's output object is missing or malformed
	// (contract); the step's harness is not configured (config); a
	// $SVC_ARTIFACTS line is invalid (contract); a bound knowledge item did
	// not resolve when the run started (config).
	CodeAgentFailed          = "AGENT_FAILED"
	CodeOutputInvalid        = "OUTPUT_INVALID"
	CodeHarnessNotConfigured = "HARNESS_NOT_CONFIGURED"
	CodeArtifactInvalid      = "ARTIFACT_INVALID"
	CodeKnowledgeNotFound    = "KNOWLEDGE_NOT_FOUND"
	// CodeLineTimeout: the job run was stopped by its line's timeout.
	CodeLineTimeout = "LINE_TIMEOUT"
	// CodeDispatchFailed: the engine would not start the job run.
	CodeDispatchFailed = "DISPATCH_FAILED"
	// CodeJobResultInvalid: the job run's result could not be read.
	CodeJobResultInvalid = "JOB_RESULT_INVALID"
)
