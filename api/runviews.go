package api

import (
	"maps"
	"time"

	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// Runs as the API shows them: the response types of job runs and line runs,
// built from store records here and nowhere else. Their JSON is the stored
// run document's (runviews_test.go proves it field by field), which is why
// GET by id may serve the stored document as is and a line-run listing may
// take its items cut by the database.
//
// Shapes: a job run is JobRunResponse in full, JobRunSummary in a list with
// ?fields=summary; a line run is LineRunResponse alone, LineRunListItem in a
// list or a trigger's answer, LineRunSummary with ?fields=summary.

// ---------------------------------------------------------------- job runs

// JobRunSummary is a job run without its step timeline and result payload
// (the list items of ?fields=summary).
type JobRunSummary struct {
	ID                 string                `json:"id"`
	JobName            string                `json:"job_name"`
	JobVersionID       string                `json:"job_version_id"`
	Status             run.Status            `json:"status"`
	Region             *string               `json:"region"`
	RunParams          map[string]any        `json:"run_params"`
	ArtifactRefs       []map[string]any      `json:"artifact_refs"`
	StartedAt          *time.Time            `json:"started_at"`
	CompletedAt        *time.Time            `json:"completed_at"`
	ErrorMessage       *string               `json:"error_message"`
	CreatedAt          time.Time             `json:"created_at"`
	ComputeCostCents   int64                 `json:"compute_cost_cents"`
	InferenceCostCents int64                 `json:"inference_cost_cents"`
	TotalCostCents     int64                 `json:"total_cost_cents"`
	CostRatedAt        *time.Time            `json:"cost_rated_at"`
	ErrorCode          *string               `json:"error_code"`
	FailureClass       *string               `json:"failure_class"`
	ErrorDetails       map[string]any        `json:"error_details"`
	KnowledgeVersions  []RunKnowledgeVersion `json:"knowledge_versions"`
	LineRunID          *string               `json:"line_run_id,omitempty"`
	StageName          *string               `json:"stage_name,omitempty"`
	WorkflowID         string                `json:"workflow_id,omitempty"`
	StopReason         *string               `json:"stop_reason,omitempty"`
	GatewayUsage       *GatewayUsageResponse `json:"gateway_usage,omitempty"`
}

// JobRunResponse is a job run in full.
type JobRunResponse struct {
	JobRunSummary
	ResultPayload map[string]any `json:"result_payload"`
	StepTimeline  []StepResponse `json:"step_timeline"`
}

// StepResponse is one step of a job run's timeline.
type StepResponse struct {
	Name               string                `json:"name"`
	Action             string                `json:"action"`
	Status             run.Status            `json:"status"`
	TaskName           string                `json:"task_name"`
	SandboxName        *string               `json:"sandbox_name"`
	AgentSessionID     *string               `json:"agent_session_id"`
	StartedAt          *time.Time            `json:"started_at"`
	CompletedAt        *time.Time            `json:"completed_at"`
	ErrorMessage       *string               `json:"error_message"`
	ErrorCode          *string               `json:"error_code"`
	FailureClass       *string               `json:"failure_class"`
	ErrorDetails       map[string]any        `json:"error_details"`
	ExitCode           *int                  `json:"exit_code"`
	ComputeCommandID   *string               `json:"compute_command_id"`
	InferenceCostCents int64                 `json:"inference_cost_cents"`
	Usage              []StepUsage           `json:"usage,omitempty"`
	Attempt            int                   `json:"attempt,omitempty"`
	Attempts           []StepAttemptResponse `json:"attempts,omitempty"`
}

// StepUsage is one usage line of a run_agent step.
type StepUsage struct {
	Model        string `json:"model"`
	InputTokens  int64  `json:"input_tokens"`
	OutputTokens int64  `json:"output_tokens"`
}

// StepAttemptResponse is one attempt of a step.
type StepAttemptResponse struct {
	Attempt   int       `json:"attempt"`
	StartedAt time.Time `json:"started_at"`
}

// RunKnowledgeVersion is a knowledge version a job run's bindings resolved
// to when it started.
type RunKnowledgeVersion struct {
	Slug          string `json:"slug"`
	VersionID     string `json:"version_id"`
	VersionNumber int    `json:"version_number"`
	ContentHash   string `json:"content_hash"`
}

// GatewayUsageResponse is what a job run's steps drew through the
// inference gateway.
type GatewayUsageResponse struct {
	Requests     int64    `json:"requests"`
	InputTokens  int64    `json:"input_tokens"`
	OutputTokens int64    `json:"output_tokens"`
	MicroCents   int64    `json:"micro_cents"`
	Unpriced     []string `json:"unpriced_models,omitempty"`
}

func jobRunSummary(r store.JobRun) JobRunSummary {
	out := JobRunSummary{ID: r.ID, JobName: r.JobName, JobVersionID: r.JobVersionID, Status: r.Status, Region: r.Region,
		RunParams: r.RunParams, ArtifactRefs: r.ArtifactRefs, StartedAt: r.StartedAt, CompletedAt: r.CompletedAt,
		ErrorMessage: r.ErrorMessage, CreatedAt: r.CreatedAt, ComputeCostCents: r.ComputeCostCents,
		InferenceCostCents: r.InferenceCostCents, TotalCostCents: r.TotalCostCents, CostRatedAt: r.CostRatedAt,
		ErrorCode: r.ErrorCode, FailureClass: r.FailureClass, ErrorDetails: r.ErrorDetails,
		KnowledgeVersions: convert(r.KnowledgeVersions, func(k store.KnowledgeVersionRef) RunKnowledgeVersion { return RunKnowledgeVersion(k) }),
		LineRunID:         r.LineRunID, StageName: r.StageName, WorkflowID: r.WorkflowID, StopReason: r.StopReason}
	if g := r.GatewayUsage; g != nil {
		out.GatewayUsage = &GatewayUsageResponse{Requests: g.Requests, InputTokens: g.InputTokens, OutputTokens: g.OutputTokens,
			MicroCents: g.MicroCents, Unpriced: g.Unpriced}
	}
	return out
}

func jobRunResponse(r store.JobRun) JobRunResponse {
	return JobRunResponse{JobRunSummary: jobRunSummary(r), ResultPayload: r.ResultPayload, StepTimeline: convert(r.StepTimeline, stepResponse)}
}

func stepResponse(e store.StepTimelineEntry) StepResponse {
	return StepResponse{Name: e.Name, Action: e.Action, Status: e.Status, TaskName: e.TaskName, SandboxName: e.SandboxName,
		AgentSessionID: e.AgentSessionID, StartedAt: e.StartedAt, CompletedAt: e.CompletedAt, ErrorMessage: e.ErrorMessage,
		ErrorCode: e.ErrorCode, FailureClass: e.FailureClass, ErrorDetails: e.ErrorDetails, ExitCode: e.ExitCode,
		ComputeCommandID: e.ComputeCommandID, InferenceCostCents: e.InferenceCostCents,
		Usage:   convert(e.Usage, func(u store.AgentUsage) StepUsage { return StepUsage(u) }),
		Attempt: e.Attempt, Attempts: convert(e.Attempts, func(a store.StepAttempt) StepAttemptResponse { return StepAttemptResponse(a) })}
}

// ---------------------------------------------------------------- line runs

// LineRunFields are the members every shape of a line run has.
type LineRunFields struct {
	ID                 string                  `json:"id"`
	LineName           string                  `json:"line_name"`
	Status             run.Status              `json:"status"`
	CreatedAt          time.Time               `json:"created_at"`
	LineVersionID      *string                 `json:"line_version_id"`
	Region             *string                 `json:"region"`
	RunParams          map[string]any          `json:"run_params"`
	Stages             []StageVisitResponse    `json:"stages"`
	ArtifactCount      int                     `json:"artifact_count"`
	Artifacts          []map[string]any        `json:"artifacts"`
	ComputeCostCents   int64                   `json:"compute_cost_cents"`
	InferenceCostCents int64                   `json:"inference_cost_cents"`
	TotalCostCents     int64                   `json:"total_cost_cents"`
	CostRatedAt        *time.Time              `json:"cost_rated_at"`
	ErrorMessage       *string                 `json:"error_message"`
	Failure            *LineRunFailureResponse `json:"failure"`
	ManagerTurns       []ManagerTurnResponse   `json:"manager_turns"`
	TriggeredByActor   map[string]any          `json:"triggered_by_actor"`
	StartedAt          *time.Time              `json:"started_at"`
	CompletedAt        *time.Time              `json:"completed_at"`
	RoutingResponse
}

// LineRunSummary is a line run as a list with ?fields=summary shows it:
// its trigger without the payload.
type LineRunSummary struct {
	LineRunFields
	Trigger RunTriggerSource `json:"trigger"`
}

// LineRunListItem is a line run as lists and trigger answers show it:
// without the details of LineRunResponse, and without the raw webhook body
// of its trigger payload.
type LineRunListItem struct {
	LineRunFields
	Trigger RunTrigger `json:"trigger"`
}

// LineRunResponse is one line run with its details.
type LineRunResponse struct {
	LineRunListItem
	Transitions  []TransitionResponse      `json:"transitions"`
	StageOutputs map[string]map[string]any `json:"stage_outputs"`
	WorkflowID   string                    `json:"workflow_id,omitempty"`
	RetryOf      *string                   `json:"retry_of,omitempty"`
	StopReason   *string                   `json:"stop_reason,omitempty"`
}

// RunTriggerSource says what started a line run.
type RunTriggerSource struct {
	Source     string  `json:"source"`
	Provider   *string `json:"provider"`
	EventName  *string `json:"event_name"`
	DeliveryID *string `json:"delivery_id"`
}

// RunTrigger is what started a line run, with the event's payload.
type RunTrigger struct {
	RunTriggerSource
	Payload map[string]any `json:"payload"`
}

// StageVisitResponse is one stage visit of a line run.
type StageVisitResponse struct {
	StageName          string     `json:"stage_name"`
	StageOrder         int        `json:"stage_order"`
	Iteration          int        `json:"iteration"`
	Status             run.Status `json:"status"`
	Outcome            *string    `json:"outcome"`
	JobRunID           *string    `json:"job_run_id"`
	ComputeCostCents   int64      `json:"compute_cost_cents"`
	InferenceCostCents int64      `json:"inference_cost_cents"`
	TotalCostCents     int64      `json:"total_cost_cents"`
	CostRatedAt        *time.Time `json:"cost_rated_at"`
	StartedAt          *time.Time `json:"started_at"`
	CompletedAt        *time.Time `json:"completed_at"`
	ArtifactCount      int        `json:"artifact_count"`
	Carried            bool       `json:"carried,omitempty"`
}

// LineRunFailureResponse is why a line run failed and who must fix it.
type LineRunFailureResponse struct {
	Code         *run.FailureCode `json:"code"`
	Domain       run.Domain       `json:"domain"`
	ErrorCode    *string          `json:"error_code"`
	FailureClass *string          `json:"failure_class"`
	ErrorMessage *string          `json:"error_message"`
	StageName    *string          `json:"stage_name"`
	StageStep    *string          `json:"stage_step"`
	TaskName     *string          `json:"task_name"`
	ErrorDetails map[string]any   `json:"error_details"`
}

// ManagerTurnResponse is one Temporal run of a line's manager workflow.
type ManagerTurnResponse struct {
	WorkflowRunID string     `json:"workflow_run_id"`
	State         string     `json:"state"`
	StartedAt     *time.Time `json:"started_at"`
}

// TransitionResponse is one routing decision a line run took.
type TransitionResponse struct {
	ID        string    `json:"id"`
	From      string    `json:"from"`
	To        string    `json:"to"`
	Option    *string   `json:"option,omitempty"`
	Iteration int       `json:"iteration"`
	TakenAt   time.Time `json:"taken_at"`
	DecisionResponse
}

// DecisionResponse is how an agentic transition was decided (empty for the
// other kinds).
type DecisionResponse struct {
	Reason      *string    `json:"reason,omitempty"`
	DecidedBy   *string    `json:"decided_by,omitempty"`
	DecidedAt   *time.Time `json:"decided_at,omitempty"`
	RouterError *string    `json:"router_error,omitempty"`
}

// RoutingResponse is what a line run shows of its agentic transitions.
type RoutingResponse struct {
	KnowledgeVersions []InstructionsVersionResponse `json:"knowledge_versions,omitempty"`
	// Waiting is always rendered: null when the run waits for no one.
	Waiting         *WaitingResponse     `json:"waiting"`
	RouterCalls     []RouterCallResponse `json:"router_calls,omitempty"`
	RouterCostCents int64                `json:"router_cost_cents,omitempty"`
}

// InstructionsVersionResponse is a knowledge version the run's routing
// instructions used.
type InstructionsVersionResponse struct {
	Slug          string `json:"slug"`
	VersionID     string `json:"version_id"`
	VersionNumber int    `json:"version_number"`
	ContentHash   string `json:"content_hash"`
	Use           string `json:"use,omitempty"`
}

// WaitingResponse is an agentic transition waiting for a person's select.
type WaitingResponse struct {
	TransitionID string                  `json:"transition_id"`
	From         string                  `json:"from"`
	Options      []WaitingOptionResponse `json:"options"`
	Since        time.Time               `json:"since"`
	ExpiresAt    time.Time               `json:"expires_at"`
	RouterError  *string                 `json:"router_error"`
}

// WaitingOptionResponse is one option a waiting run may be answered with.
type WaitingOptionResponse struct {
	Name  string  `json:"name"`
	Label *string `json:"label,omitempty"`
	To    string  `json:"to"`
}

// RouterCallResponse is one call of the router for a decision.
type RouterCallResponse struct {
	TransitionID string    `json:"transition_id"`
	Iteration    int       `json:"iteration"`
	Model        string    `json:"model"`
	InputTokens  int64     `json:"input_tokens"`
	OutputTokens int64     `json:"output_tokens"`
	MicroCents   int64     `json:"micro_cents"`
	Unpriced     bool      `json:"unpriced,omitempty"`
	Option       *string   `json:"option,omitempty"`
	Error        *string   `json:"error,omitempty"`
	At           time.Time `json:"at"`
}

func lineRunFields(r store.LineRun) LineRunFields {
	out := LineRunFields{ID: r.ID, LineName: r.LineName, Status: r.Status, CreatedAt: r.CreatedAt, LineVersionID: r.LineVersionID,
		Region: r.Region, RunParams: r.RunParams, ArtifactCount: r.ArtifactCount, Artifacts: r.Artifacts,
		Stages:           convert(r.Stages, func(v store.LineRunStage) StageVisitResponse { return StageVisitResponse(v) }),
		ComputeCostCents: r.ComputeCostCents, InferenceCostCents: r.InferenceCostCents, TotalCostCents: r.TotalCostCents,
		CostRatedAt: r.CostRatedAt, ErrorMessage: r.ErrorMessage, TriggeredByActor: r.TriggeredByActor,
		ManagerTurns: convert(r.ManagerTurns, func(t store.ManagerTurn) ManagerTurnResponse { return ManagerTurnResponse(t) }),
		StartedAt:    r.StartedAt, CompletedAt: r.CompletedAt, RoutingResponse: routingResponse(r.Routing)}
	if f := r.Failure; f != nil {
		out.Failure = &LineRunFailureResponse{Code: f.Code, Domain: f.Domain, ErrorCode: f.ErrorCode, FailureClass: f.FailureClass,
			ErrorMessage: f.ErrorMessage, StageName: f.StageName, StageStep: f.StageStep, TaskName: f.TaskName, ErrorDetails: f.ErrorDetails}
	}
	return out
}

func routingResponse(r store.Routing) RoutingResponse {
	out := RoutingResponse{RouterCostCents: r.RouterCostCents,
		KnowledgeVersions: convert(r.KnowledgeVersions, func(k store.InstructionsVersion) InstructionsVersionResponse { return InstructionsVersionResponse(k) }),
		RouterCalls:       convert(r.RouterCalls, func(c store.RouterCall) RouterCallResponse { return RouterCallResponse(c) })}
	if w := r.Waiting; w != nil {
		out.Waiting = &WaitingResponse{TransitionID: w.TransitionID, From: w.From, Since: w.Since, ExpiresAt: w.ExpiresAt, RouterError: w.RouterError,
			Options: convert(w.Options, func(o store.WaitingOption) WaitingOptionResponse { return WaitingOptionResponse(o) })}
	}
	return out
}

func runTriggerSource(t store.TriggerSummary) RunTriggerSource {
	return RunTriggerSource{Source: t.Source, Provider: t.Provider, EventName: t.EventName, DeliveryID: t.DeliveryID}
}

// lineRunListItem leaves out the details and the trigger payload's raw
// webhook body.
func lineRunListItem(r store.LineRun) LineRunListItem {
	payload := r.Trigger.Payload
	if _, ok := payload["body"]; ok {
		payload = maps.Clone(payload)
		delete(payload, "body")
	}
	return LineRunListItem{LineRunFields: lineRunFields(r), Trigger: RunTrigger{RunTriggerSource: runTriggerSource(r.Trigger), Payload: payload}}
}

func lineRunSummary(r store.LineRun) LineRunSummary {
	return LineRunSummary{LineRunFields: lineRunFields(r), Trigger: runTriggerSource(r.Trigger)}
}

func lineRunResponse(r store.LineRun) LineRunResponse {
	item := LineRunListItem{LineRunFields: lineRunFields(r), Trigger: RunTrigger{RunTriggerSource: runTriggerSource(r.Trigger), Payload: r.Trigger.Payload}}
	return LineRunResponse{LineRunListItem: item, StageOutputs: r.StageOutputs, WorkflowID: r.WorkflowID, RetryOf: r.RetryOf, StopReason: r.StopReason,
		Transitions: convert(r.Transitions, func(t store.TakenTransition) TransitionResponse {
			return TransitionResponse{ID: t.ID, From: t.From, To: t.To, Option: t.Option, Iteration: t.Iteration, TakenAt: t.TakenAt,
				DecisionResponse: DecisionResponse(t.AgenticDecision)}
		})}
}

// convert maps a slice, keeping nil nil (null) and empty empty ([]).
func convert[S, D any](in []S, f func(S) D) []D {
	if in == nil {
		return nil
	}
	out := make([]D, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}
