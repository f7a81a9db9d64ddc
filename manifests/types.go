package manifests

// The manifest types. One schema serves TOML and JSON: every field carries a
// snake_case json tag and parsing goes through that tag for both formats.
//
// Variants (triggers, transitions, conditions, operands, bindings, selectors,
// sandbox init, run_agent modes) are flat structs with a discriminator field;
// Validate rejects fields that do not belong to the chosen variant. Fields with
// a default are pointers so Normalize can tell "absent" from "set to zero".

// ParamType is the type of a job parameter, a line input param or a job output.
type ParamType string

// Param and output types.
const (
	TypeString  ParamType = "string"
	TypeInteger ParamType = "integer"
	TypeNumber  ParamType = "number"
	TypeBoolean ParamType = "boolean"
	TypeArray   ParamType = "array"
)

// ---------------------------------------------------------------- jobs

// JobManifest is a job: tasks of ordered steps, params and an output contract.
type JobManifest struct {
	Job          JobSection               `json:"job"`
	Run          RunSection               `json:"run"`
	Schedule     *ScheduleSection         `json:"schedule,omitempty"`
	Verification *VerificationSection     `json:"verification,omitempty"`
	Outputs      map[string]JobOutputSpec `json:"outputs,omitempty"`
}

// JobSection names and describes the job and declares its params.
type JobSection struct {
	Name        string                  `json:"name"`
	Version     string                  `json:"version,omitempty"`
	Description string                  `json:"description,omitempty"`
	Params      map[string]JobParamSpec `json:"params,omitempty"`
}

// JobParamSpec declares one run parameter of a job.
type JobParamSpec struct {
	Type        ParamType `json:"type"`
	Items       ParamType `json:"items,omitempty"`
	Required    *bool     `json:"required,omitempty"`
	Description string    `json:"description,omitempty"`
	Pattern     string    `json:"pattern,omitempty"`
	Prefix      string    `json:"prefix,omitempty"`
	Enum        []any     `json:"enum,omitempty"`
	Default     any       `json:"default,omitempty"`
}

// JobParamDefinition describes one param a line run accepts (a deployment's
// input_params).
type JobParamDefinition struct {
	Name        string     `json:"name"`
	Type        ParamType  `json:"type"`
	Items       *ParamType `json:"items"`
	Required    bool       `json:"required"`
	Description *string    `json:"description"`
	Pattern     *string    `json:"pattern"`
	Prefix      *string    `json:"prefix"`
	Enum        []any      `json:"enum"`
}

// RunSection holds the tasks and how they run.
type RunSection struct {
	Tasks              []Task         `json:"tasks"`
	FailFast           *bool          `json:"fail_fast,omitempty"`   // default true
	Fanout             *bool          `json:"fanout,omitempty"`      // default false
	Concurrency        *int           `json:"concurrency,omitempty"` // default 1
	Workdir            string         `json:"workdir,omitempty"`
	Timeout            string         `json:"timeout,omitempty"` // Go duration string
	Region             string         `json:"region,omitempty"`
	TeardownOnComplete *bool          `json:"teardown_on_complete,omitempty"`
	ResumeOnStart      *bool          `json:"resume_on_start,omitempty"`
	Sandbox            *SandboxConfig `json:"sandbox,omitempty"`
}

// RegionOrNil is the region a job run of this manifest records from its
// creation on (SPEC's job run `region`): nil when the manifest names none.
func (r RunSection) RegionOrNil() *string {
	if r.Region == "" {
		return nil
	}
	reg := r.Region
	return &reg
}

// Task is a named list of ordered steps, optionally with its own sandbox.
type Task struct {
	Name    string         `json:"name"`
	Steps   []Step         `json:"steps"`
	Sandbox *SandboxConfig `json:"sandbox,omitempty"`
}

// Step is one compute action. Exactly one of Exec, RunAgent, Snapshot, Pause,
// Resume, Delete is set.
type Step struct {
	Name     string        `json:"name,omitempty"`
	Workdir  string        `json:"workdir,omitempty"`
	Timeout  *int          `json:"timeout,omitempty"` // seconds
	User     string        `json:"user,omitempty"`
	Exec     []string      `json:"exec,omitempty"`
	RunAgent *RunAgent     `json:"run_agent,omitempty"`
	Snapshot *SnapshotStep `json:"snapshot,omitempty"`
	Pause    *bool         `json:"pause,omitempty"`
	Resume   *bool         `json:"resume,omitempty"`
	Delete   *bool         `json:"delete,omitempty"`
	Upload   *string       `json:"upload,omitempty"`   // not implemented: rejected by Validate
	Download *string       `json:"download,omitempty"` // not implemented: rejected by Validate
	Outputs  *StepOutputs  `json:"outputs,omitempty"`
}

// Step actions, as recorded in a step timeline.
const (
	ActionExec     = "exec"
	ActionRunAgent = "run_agent"
	ActionSnapshot = "snapshot"
	ActionPause    = "pause"
	ActionResume   = "resume"
	ActionDelete   = "delete"
)

// SnapshotStep snapshots the task's sandbox under a name.
type SnapshotStep struct {
	Name string `json:"name"`
}

// StepOutputs are the output keys a step claims: authored either as a list of
// key names or as a table keyed by output key. List keeps the authored form so
// the manifest round-trips.
type StepOutputs struct {
	List   bool                       `json:"-"`
	Claims map[string]StepOutputClaim `json:"-"`
}

// StepOutputClaim is one entry of the table form of StepOutputs.
type StepOutputClaim struct {
	From     string `json:"from,omitempty"`
	Required *bool  `json:"required,omitempty"`
}

// Run agent modes and harnesses.
const (
	AgentModeExec    = "exec"
	AgentModeSession = "session"
)

// RunAgent runs an agent harness; Mode is the discriminator.
type RunAgent struct {
	Mode          string         `json:"mode"`
	Harness       string         `json:"harness"`
	Command       []string       `json:"command,omitempty"`
	Model         string         `json:"model,omitempty"`
	Effort        string         `json:"effort,omitempty"`
	Knowledge     []KnowledgeRef `json:"knowledge,omitempty"`
	MCP           []MCPServer    `json:"mcp,omitempty"`
	ModelProvider string         `json:"model_provider,omitempty"`
	Prompt        *Binding       `json:"prompt,omitempty"`
	ResumePrompt  *Binding       `json:"resume_prompt,omitempty"`
	Session       string         `json:"session,omitempty"`
}

// KnowledgeRef names a knowledge item by slug.
type KnowledgeRef struct {
	Slug string `json:"slug"`
}

// MCPServer is one MCP server given to an agent session.
type MCPServer struct {
	Key string `json:"key"`
	URL string `json:"url"`
}

// Binding kinds for instructions and prompts.
const (
	BindingKnowledge = "knowledge"
	BindingLiteral   = "literal"
)

// Binding is text bound from a knowledge item (Slug) or a literal (Value).
type Binding struct {
	Type  string `json:"type"`
	Slug  string `json:"slug,omitempty"`
	Value any    `json:"value,omitempty"`
}

// Sandbox modes.
const (
	SandboxProvision = "provision"
	SandboxEnsure    = "ensure"
	SandboxReuse     = "reuse"
)

// SandboxConfig says where a task's steps run.
type SandboxConfig struct {
	Mode            string            `json:"mode,omitempty"` // default provision
	Name            string            `json:"name,omitempty"`
	Image           string            `json:"image,omitempty"`
	Vcpus           *int              `json:"vcpus,omitempty"`     // default 2
	MemoryMB        *int              `json:"memory_mb,omitempty"` // default 2048
	DiskGB          *int              `json:"disk_gb,omitempty"`   // default 10
	SnapshotName    string            `json:"snapshot_name,omitempty"`
	GatewayProfile  string            `json:"gateway_profile,omitempty"`
	Environment     string            `json:"environment,omitempty"`
	CacheKey        string            `json:"cache_key,omitempty"`
	Init            *SandboxInit      `json:"init,omitempty"`
	InternetEnabled *bool             `json:"internet_enabled,omitempty"` // default true
	Workdir         string            `json:"workdir,omitempty"`
	Env             map[string]string `json:"env,omitempty"`
	Sources         []GitSource       `json:"sources,omitempty"`
	SetupScripts    []SetupScript     `json:"setup_scripts,omitempty"`
	Lifecycle       *Lifecycle        `json:"lifecycle,omitempty"`
}

// SandboxInit is the sandbox init variant: custom, full or minimal.
type SandboxInit struct {
	Type         string   `json:"type"`
	AwaitReady   *bool    `json:"await_ready,omitempty"` // custom only, default false
	Capabilities []string `json:"capabilities,omitempty"`
}

// GitSource is a repository cloned into the workspace before setup scripts.
type GitSource struct {
	RepoURL    string `json:"repo_url"`
	Branch     string `json:"branch,omitempty"`
	TargetPath string `json:"target_path,omitempty"`
	Primary    *bool  `json:"primary,omitempty"`
}

// SetupScript runs in the sandbox after sources are cloned.
type SetupScript struct {
	Script string `json:"script"`
	Name   string `json:"name,omitempty"`
}

// Lifecycle bounds how long an idle or finished sandbox lives. Durations are
// seconds.
type Lifecycle struct {
	AutoResume     string `json:"auto_resume,omitempty"` // never | on_activity
	DeleteAfter    *int   `json:"delete_after,omitempty"`
	PauseAfter     *int   `json:"pause_after,omitempty"`
	PauseAfterIdle *int   `json:"pause_after_idle,omitempty"`
}

// ScheduleSection runs the job on a cron schedule.
type ScheduleSection struct {
	Cron     string `json:"cron"`
	Timezone string `json:"timezone,omitempty"` // default UTC
	Enabled  *bool  `json:"enabled,omitempty"`  // default true
}

// VerificationSection configures verification of a job's results.
type VerificationSection struct {
	Enabled *bool             `json:"enabled,omitempty"` // default false
	Gate    *VerificationGate `json:"gate,omitempty"`
}

// VerificationGate is the pass criterion of verification.
type VerificationGate struct {
	CompareTo   string   `json:"compare_to,omitempty"`
	MinPassRate *float64 `json:"min_pass_rate,omitempty"`
}

// Output reduce rules.
const (
	ReduceOne     = "one"
	ReduceLast    = "last"
	ReduceCollect = "collect"
	ReduceGather  = "gather"
)

// JobOutputSpec declares one key of the job's public output contract.
type JobOutputSpec struct {
	Type        ParamType `json:"type"`
	Items       ParamType `json:"items,omitempty"`
	Required    *bool     `json:"required,omitempty"` // default true
	Description string    `json:"description,omitempty"`
	Enum        []any     `json:"enum,omitempty"`
	Reduce      string    `json:"reduce,omitempty"` // default one
}

// ---------------------------------------------------------------- lines

// LineManifest is a line: a graph of stages, each running one job per visit.
type LineManifest struct {
	Line        LineSection      `json:"line"`
	Trigger     Trigger          `json:"trigger"`
	Stages      []LineStage      `json:"stages"`
	Transitions []Transition     `json:"transitions,omitempty"`
	Agent       *LineAgentConfig `json:"agent,omitempty"`
	Limits      *LineLimits      `json:"limits,omitempty"`
}

// LineSection names and describes the line.
type LineSection struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Category    string `json:"category,omitempty"`
}

// LineStage runs one job per visit.
type LineStage struct {
	ID           string `json:"id"`
	Job          string `json:"job"`
	JobVersionID string `json:"job_version_id,omitempty"`
	Description  string `json:"description,omitempty"`
	MaxAttempts  *int   `json:"max_attempts,omitempty"`
}

// LineAgentConfig holds the line's agent instructions.
type LineAgentConfig struct {
	Instructions *Binding `json:"instructions,omitempty"`
}

// LineLimits bound a line run. Timeout is a Go duration string.
type LineLimits struct {
	MaxIterations *int   `json:"max_iterations,omitempty"`
	BudgetUSD     *USD   `json:"budget_usd,omitempty"`
	Timeout       string `json:"timeout,omitempty"`
}

// Trigger types.
const (
	TriggerIntegration = "integration_trigger"
	TriggerManual      = "manual"
	TriggerSchedule    = "schedule"
	TriggerWebhook     = "webhook"
)

// Trigger starts line runs; Type is the discriminator.
type Trigger struct {
	Type string `json:"type"`
	// integration_trigger
	Name     string                        `json:"name,omitempty"`
	Provider string                        `json:"provider,omitempty"`
	Selector *Selector                     `json:"selector,omitempty"`
	Filters  []Condition                   `json:"filters,omitempty"`
	Outputs  map[string]TriggerPathBinding `json:"outputs,omitempty"`
	// schedule
	Cron     string         `json:"cron,omitempty"`
	Inputs   map[string]any `json:"inputs,omitempty"`
	Timezone string         `json:"timezone,omitempty"` // default UTC
	// webhook
	Path string `json:"path,omitempty"`
}

// TriggerPathBinding extracts a run param from the trigger envelope.
type TriggerPathBinding struct {
	Type string `json:"type"` // trigger_path
	Path string `json:"path"`
}

// Providers of integration triggers and artifacts.
const (
	ProviderCodeHost      = "code_host"
	ProviderIssueTrackerA = "issue_tracker_a"
	ProviderIssueTrackerB = "issue_tracker_b"
	ProviderChatTool      = "chat_tool"
	ProviderSvc           = "svc"
)

// Selector narrows the events of an integration trigger; its provider is the
// trigger's provider, and it may repeat it.
type Selector struct {
	Provider     string   `json:"provider,omitempty"`
	Kind         string   `json:"kind,omitempty"`
	Scope        string   `json:"scope,omitempty"` // all | selected
	Repositories []string `json:"repositories,omitempty"`
	Labels       []string `json:"labels,omitempty"`
	ProjectIDs   []string `json:"project_ids,omitempty"`
	States       []string `json:"states,omitempty"`
	TeamIDs      []string `json:"team_ids,omitempty"`
	Channels     []string `json:"channels,omitempty"`
}

// Transition types.
const (
	TransitionConditional = "conditional"
	TransitionAgentic     = "agentic"
)

// Transition routes from one stage to the next; Type is the discriminator.
type Transition struct {
	Type  string `json:"type"`
	ID    string `json:"id"`
	From  string `json:"from"`
	Label string `json:"label,omitempty"`
	// conditional
	To            string                  `json:"to,omitempty"`
	When          *Condition              `json:"when,omitempty"`
	MaxIterations *int                    `json:"max_iterations,omitempty"`
	Params        map[string]ParamBinding `json:"params,omitempty"`
	// agentic
	Instructions *Binding                  `json:"instructions,omitempty"`
	Options      []AgenticTransitionOption `json:"options,omitempty"`
}

// AgenticTransitionOption is one choice of an agentic transition.
type AgenticTransitionOption struct {
	Name   string                  `json:"name"`
	To     string                  `json:"to"`
	Label  string                  `json:"label,omitempty"`
	Params map[string]ParamBinding `json:"params,omitempty"`
}

// Param binding types.
const (
	BindInput   = "input"
	BindLiteral = "literal"
	BindOutput  = "output"
)

// ParamBinding gives a stage's job param its value: a line run param (input),
// a literal, or a published output of a stage.
type ParamBinding struct {
	Type  string `json:"type"`
	Name  string `json:"name,omitempty"`  // input, output
	Stage string `json:"stage,omitempty"` // output
	Value any    `json:"value,omitempty"` // literal
}

// Condition operators.
const (
	OpAll         = "all"
	OpAny         = "any"
	OpNot         = "not"
	OpAlways      = "always"
	OpEq          = "eq"
	OpNe          = "ne"
	OpContains    = "contains"
	OpNotContains = "not_contains"
	OpExists      = "exists"
	OpMissing     = "missing"
	OpTruthy      = "truthy"
	OpFalsy       = "falsy"
)

// Condition is a boolean expression over stage results, transition counters
// and the trigger envelope; Op is the discriminator.
type Condition struct {
	Op         string      `json:"op"`
	Conditions []Condition `json:"conditions,omitempty"` // all, any
	Condition  *Condition  `json:"condition,omitempty"`  // not
	Left       *Operand    `json:"left,omitempty"`       // eq, ne, contains, not_contains
	Right      *Operand    `json:"right,omitempty"`
	Operand    *Operand    `json:"operand,omitempty"` // exists, missing, truthy, falsy
}

// Operand types.
const (
	OperandLiteral    = "literal"
	OperandStage      = "stage"
	OperandTransition = "transition"
	OperandTrigger    = "trigger"
)

// Operand is a value in a condition; Type is the discriminator.
type Operand struct {
	Type  string `json:"type"`
	Value any    `json:"value,omitempty"` // literal
	Path  string `json:"path,omitempty"`  // stage, transition, trigger
	Stage string `json:"stage,omitempty"` // stage (default: the transition's from)
	ID    string `json:"id,omitempty"`    // transition
}
