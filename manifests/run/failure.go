package run

// FailureCode classifies why a line run failed (failure.code).
type FailureCode string

// Failure codes (SPEC "Line run failure classification", and the two
// limits this server adds: budget_exceeded, line_timeout).
const (
	ManifestNoStages            FailureCode = "manifest_no_stages"
	ManifestTriggerInvalid      FailureCode = "manifest_trigger_invalid"
	UnknownStage                FailureCode = "unknown_stage"
	NoRoute                     FailureCode = "no_route"
	AmbiguousTransition         FailureCode = "ambiguous_transition"
	AmbiguousAgenticTransition  FailureCode = "ambiguous_agentic_transition"
	TransitionParamsInvalid     FailureCode = "transition_params_invalid"
	MaxIterationsExhausted      FailureCode = "max_iterations_exhausted"
	JobResultInvalid            FailureCode = "job_result_invalid"
	JobOutputsInvalid           FailureCode = "job_outputs_invalid"
	StageParamsInvalid          FailureCode = "stage_params_invalid"
	LineStateInvalid            FailureCode = "line_state_invalid"
	DispatchFailed              FailureCode = "dispatch_failed"
	ControlPayloadInvalid       FailureCode = "control_payload_invalid"
	ControlTargetInvalid        FailureCode = "control_target_invalid"
	ControlMissingID            FailureCode = "control_missing_id"
	ControlWaitExpired          FailureCode = "control_wait_expired"
	ControlWaitUnknownSelection FailureCode = "control_wait_unknown_selection"
	ControlStopNotApplied       FailureCode = "control_stop_not_applied"
	RetrySnapshotInvalid        FailureCode = "retry_snapshot_invalid"
	StageFailed                 FailureCode = "stage_failed"
	RoutingWaitExpired          FailureCode = "routing_wait_expired"
	UserCancelled               FailureCode = "user_cancelled"
	BudgetExceeded              FailureCode = "budget_exceeded"
	LineTimeout                 FailureCode = "line_timeout"
	UnknownFailure              FailureCode = "unknown"
)

// Domain says who owns the fix of a line-run failure (failure.domain): a
// failure class, or unknown.
type Domain string

// Domains.
const (
	DomainPlatform Domain = Domain(ClassPlatform)
	DomainConfig   Domain = Domain(ClassConfig)
	DomainContract Domain = Domain(ClassContract)
	DomainInfra    Domain = Domain(ClassInfra)
	DomainAgent    Domain = Domain(ClassAgent)
	DomainUser     Domain = Domain(ClassUser)
	DomainUnknown  Domain = "unknown"
)

// Domains lists every domain, unknown last.
func Domains() []Domain {
	return []Domain{DomainPlatform, DomainConfig, DomainContract, DomainInfra, DomainAgent, DomainUser, DomainUnknown}
}

var domains = map[FailureCode]Domain{
	NoRoute: DomainConfig, AmbiguousTransition: DomainConfig, MaxIterationsExhausted: DomainConfig,
	TransitionParamsInvalid: DomainConfig, StageParamsInvalid: DomainConfig, BudgetExceeded: DomainConfig,
	LineTimeout: DomainConfig, UnknownStage: DomainConfig, ManifestNoStages: DomainConfig, ManifestTriggerInvalid: DomainConfig,
	JobResultInvalid: DomainContract, JobOutputsInvalid: DomainContract,
	DispatchFailed: DomainPlatform, LineStateInvalid: DomainPlatform,
	UserCancelled: DomainUser, ControlPayloadInvalid: DomainUser, ControlTargetInvalid: DomainUser,
	ControlMissingID: DomainUser, ControlWaitExpired: DomainUser, ControlWaitUnknownSelection: DomainUser,
	ControlStopNotApplied: DomainUser, RetrySnapshotInvalid: DomainUser, RoutingWaitExpired: DomainUser,
	AmbiguousAgenticTransition: DomainAgent,
}

// FailureDomain says who must fix a failure: the domain of its code, and
// for stage_failed the failing job's failure class.
func FailureDomain(code FailureCode, jobClass FailureClass) Domain {
	if code == StageFailed {
		if jobClass.Valid() {
			return Domain(jobClass)
		}
		return DomainUnknown
	}
	if d, ok := domains[code]; ok {
		return d
	}
	return DomainUnknown
}

// Failure is a classified line-run failure (SPEC's LineRunFailure) as the
// line-run workflow decides it; the record adds the failing step's
// diagnostics. Empty strings mean "none".
type Failure struct {
	Code         FailureCode
	Domain       Domain
	ErrorMessage string
	StageName    string
	ErrorCode    string
	FailureClass FailureClass
	Details      map[string]any
}

// NewFailure is a failure with code, its domain and msg.
func NewFailure(code FailureCode, msg string) *Failure {
	return &Failure{Code: code, Domain: FailureDomain(code, ""), ErrorMessage: msg}
}
