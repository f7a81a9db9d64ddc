package activities

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/linefactory/linefactory/activities/sandbox"
	"github.com/linefactory/linefactory/admit"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/agentconf"
	"github.com/linefactory/linefactory/manifests/inference"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// PermanentErrorTypes are activity error types never worth a retry.
var PermanentErrorTypes = []string{
	sandbox.CodeNotFound, sandbox.CodeAlreadyExists, sandbox.CodeInvalidState, sandbox.CodeProvisioningFailed,
	sandbox.CodeCommandNotFound, sandbox.CodeFileOperation, run.CodeTemplateInvalid,
}

// Store is what the activities need of the store.
type Store interface {
	GetJobRun(ctx context.Context, id string) (store.JobRun, error)
	UpdateJobRun(ctx context.Context, id string, change func(*store.JobRun) error) (store.JobRun, error)
	AppendStepLog(ctx context.Context, runID, step, stream string, data []byte) error
	CreateJobRun(ctx context.Context, r store.JobRun) (store.JobRun, error)
	UpdateLineRun(ctx context.Context, id string, change func(*store.LineRun) error) (store.LineRun, error)
}

// CostRates price sandbox time.
type CostRates struct {
	CentsPerVCPUHour float64
	CentsPerGBHour   float64
}

// Cost is the price in (fractional) cents of d of sandbox time.
func (r CostRates) Cost(d time.Duration, vcpus, memoryMB int) float64 {
	return d.Hours() * (float64(vcpus)*r.CentsPerVCPUHour + float64(memoryMB)/1024*r.CentsPerGBHour)
}

// DefaultCostRates are used when none are configured.
var DefaultCostRates = CostRates{CentsPerVCPUHour: 4, CentsPerGBHour: 0.5}

// Activities are the activities of job runs.
type Activities struct {
	Store Store
	// Definitions serves schedule firings; nil on workers that fire none.
	// Admit records the runs firings make and Starts starts their
	// workflows (package admit; cmd wires the store and the engine).
	Definitions Definitions
	Admit       *admit.Admitter
	Starts      RunStarts
	Sandboxes   sandbox.Driver
	Now         func() time.Time
	Logger      *slog.Logger
	Rates       CostRates
	// OutputDir is where $SVC_OUTPUT files are made; default /tmp.
	OutputDir string
	// HeartbeatInterval is how often a running step heartbeats; default 500ms.
	HeartbeatInterval time.Duration
	// Placements records which worker holds each sandbox, and Worker is
	// this process's worker (see placement.go); nil and zero without
	// sandbox affinity.
	Placements Placements
	Worker     Worker
	// Agents is the server configuration file: the harnesses run_agent
	// steps run and their model prices; nil configures none.
	Agents *agentconf.Config
	// AgentStore serves knowledge and agent sessions; nil uses Store when
	// it has them.
	AgentStore AgentStore
	// LogRetry is how long an append of step output is retried; default
	// DefaultLogRetry.
	LogRetry time.Duration
	// Inference is the router's endpoint and prices (router.go); nil
	// without [inference]. Knowledge resolves routing instructions, and
	// InferenceTokens keeps the gateway's tokens (gateway.go).
	Inference       *inference.Config
	Knowledge       KnowledgeReader
	InferenceTokens InferenceTokens
}

func (a *Activities) now() time.Time {
	if a.Now == nil {
		return time.Now().UTC()
	}
	return a.Now().UTC()
}

// StartRunInput marks a run as started.
type StartRunInput struct {
	RunID    string
	Manifest manifests.JobManifest
}

// StartRun marks the run running and lists every step as pending.
func (a *Activities) StartRun(ctx context.Context, in StartRunInput) error {
	now := a.now()
	knowledge, err := a.resolveKnowledge(ctx, in.Manifest)
	if err != nil {
		return err
	}
	_, err = a.Store.UpdateJobRun(ctx, in.RunID, func(r *store.JobRun) error {
		if r.Status != run.Queued && r.Status != "" {
			return nil // a retried activity: already started
		}
		r.Status = run.Running
		r.StartedAt = &now
		r.KnowledgeVersions = knowledge
		if reg := in.Manifest.Run.Region; reg != "" {
			r.Region = &reg
		}
		r.StepTimeline = nil
		for _, t := range in.Manifest.Run.Tasks {
			for j, s := range t.Steps {
				r.StepTimeline = append(r.StepTimeline, store.StepTimelineEntry{
					Name: manifests.StepName(t, j), Action: action(s), Status: run.Pending, TaskName: t.Name,
				})
			}
		}
		return nil
	})
	return err
}

func action(s manifests.Step) string {
	switch {
	case s.Exec != nil:
		return manifests.ActionExec
	case s.RunAgent != nil:
		return manifests.ActionRunAgent
	case s.Snapshot != nil:
		return manifests.ActionSnapshot
	case s.Pause != nil:
		return manifests.ActionPause
	case s.Resume != nil:
		return manifests.ActionResume
	case s.Delete != nil:
		return manifests.ActionDelete
	}
	return "unknown"
}

// AcquireSandboxInput asks for a task's sandbox.
type AcquireSandboxInput struct {
	RunID     string
	Task      string
	TaskIndex int
	Config    *manifests.SandboxConfig
	Params    map[string]any
	// ResumeOnStart is run.resume_on_start: a paused ensure/reuse sandbox
	// is resumed. Without it only lifecycle.auto_resume = "on_activity"
	// wakes one; otherwise the task fails with SANDBOX_INVALID_STATE.
	ResumeOnStart bool
}

// ProvisionName is the name of the sandbox a provision without a name makes
// for a run's task. It is a pure function of its inputs, so a retried
// AcquireSandbox finds the sandbox an earlier attempt made, and the
// workflow knows what to tear down even when no attempt reported back.
func ProvisionName(runID string, taskIndex int) string {
	name := fmt.Sprintf("sbx-%s-%d", runID, taskIndex)
	if len(name) <= 128 && provisionNameRE.MatchString(name) {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return fmt.Sprintf("sbx-%s-%d", hex.EncodeToString(sum[:8]), taskIndex)
}

var provisionNameRE = regexp.MustCompile(`^sbx-[A-Za-z0-9._-]+$`)

// heartbeat records a heartbeat every interval until the returned stop is
// called; cancellation reaches an activity only through heartbeats.
func (a *Activities) heartbeat(ctx context.Context, detail string) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	interval := a.HeartbeatInterval
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	hbCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx, detail)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// AcquireSandboxResult names the task's sandbox.
type AcquireSandboxResult struct {
	Name     string
	Created  bool
	Vcpus    int
	MemoryMB int
	// WorkerID and Queue name the worker holding the sandbox and its own
	// task queue, where the task's steps go ("" without affinity).
	WorkerID string
	Queue    string
}

// permanent wraps an error that retrying cannot fix.
func permanent(code string, err error) error {
	return temporal.NewNonRetryableApplicationError(err.Error(), code, err)
}

// sandboxError turns a driver error into an activity error whose type is
// its code.
func sandboxError(err error) error {
	if code := sandbox.CodeOf(err); code != "" {
		return temporal.NewNonRetryableApplicationError(err.Error(), code, err)
	}
	return err
}

// AcquireSandbox provisions, ensures or reuses the task's sandbox. It
// heartbeats throughout, so setup scripts may run long and a stop kills
// them.
func (a *Activities) AcquireSandbox(ctx context.Context, in AcquireSandboxInput) (AcquireSandboxResult, error) {
	defer a.heartbeat(ctx, "acquire "+in.Task)()
	cfg := manifests.SandboxConfig{}
	if in.Config != nil {
		cfg = *in.Config
	}
	manifests.NormalizeJob(&manifests.JobManifest{Run: manifests.RunSection{Sandbox: &cfg}})
	name, err := manifests.Render(cfg.Name, in.Params)
	if err != nil {
		return AcquireSandboxResult{}, permanent(run.CodeTemplateInvalid, err)
	}
	env := map[string]string{}
	for k, v := range cfg.Env {
		if env[k], err = manifests.Render(v, in.Params); err != nil {
			return AcquireSandboxResult{}, permanent(run.CodeTemplateInvalid, err)
		}
	}
	scripts := make([]manifests.SetupScript, len(cfg.SetupScripts))
	for i, sc := range cfg.SetupScripts {
		scripts[i] = sc
		if scripts[i].Script, err = manifests.RenderShell(sc.Script, in.Params); err != nil { // values are data
			return AcquireSandboxResult{}, permanent(run.CodeTemplateInvalid, err)
		}
	}
	sources := make([]manifests.GitSource, len(cfg.Sources))
	for i, src := range cfg.Sources {
		for _, f := range []struct {
			dst *string
			src string
		}{
			{&sources[i].RepoURL, src.RepoURL}, {&sources[i].Branch, src.Branch}, {&sources[i].TargetPath, src.TargetPath},
		} {
			if *f.dst, err = manifests.Render(f.src, in.Params); err != nil {
				return AcquireSandboxResult{}, permanent(run.CodeTemplateInvalid, fmt.Errorf("sources[%d]: %w", i, err))
			}
		}
	}
	snapshot, err := manifests.Render(cfg.SnapshotName, in.Params)
	if err != nil {
		return AcquireSandboxResult{}, permanent(run.CodeTemplateInvalid, fmt.Errorf("snapshot_name: %w", err))
	}
	key := fmt.Sprintf("%s/%d", in.RunID, in.TaskIndex)
	if cfg.Mode == manifests.SandboxProvision && name == "" {
		name = ProvisionName(in.RunID, in.TaskIndex)
	}
	if err := a.claimSandbox(ctx, name, cfg.Mode); err != nil {
		return AcquireSandboxResult{}, err
	}
	sb, err := a.Sandboxes.Acquire(ctx, sandbox.Spec{
		Mode: cfg.Mode, Name: name, Image: cfg.Image, Vcpus: *cfg.Vcpus, MemoryMB: *cfg.MemoryMB, DiskGB: *cfg.DiskGB,
		InternetEnabled: *cfg.InternetEnabled, Env: env, Sources: sources, SetupScripts: scripts,
		SnapshotName: snapshot, Lifecycle: cfg.Lifecycle, RunID: in.RunID, Key: key, SetupEnv: manifests.ParamEnv(in.Params),
	})
	if err != nil {
		a.unplaceIfGone(ctx, name, cfg.Mode)
		if ctx.Err() != nil {
			return AcquireSandboxResult{}, ctx.Err()
		}
		if sandbox.CodeOf(err) != "" {
			a.recordTaskFailure(ctx, in.RunID, in.Task, AcquireFailure(in.Task, sandboxError(err)))
		}
		return AcquireSandboxResult{}, sandboxError(err)
	}
	if cfg.Mode != manifests.SandboxProvision && sb.State == sandbox.StatePaused {
		autoResume := cfg.Lifecycle != nil && cfg.Lifecycle.AutoResume == "on_activity"
		if !in.ResumeOnStart && !autoResume {
			err := &sandbox.Error{Code: sandbox.CodeInvalidState, Msg: fmt.Sprintf(
				"sandbox %q is paused (set run.resume_on_start = true or lifecycle.auto_resume = \"on_activity\")", sb.Name)}
			a.recordTaskFailure(ctx, in.RunID, in.Task, AcquireFailure(in.Task, sandboxError(err)))
			return AcquireSandboxResult{}, sandboxError(err)
		}
		if err := a.Sandboxes.Resume(ctx, sb.Name); err != nil {
			return AcquireSandboxResult{}, sandboxError(err)
		}
	}
	return AcquireSandboxResult{Name: sb.Name, Created: sb.Created, Vcpus: sb.Vcpus, MemoryMB: sb.MemoryMB,
		WorkerID: a.Worker.ID, Queue: a.Worker.Queue}, nil
}

// AcquireFailure describes a task whose sandbox could not be had: the
// sandbox error's code (SANDBOX_PROVISIONING_FAILED for anything else, such
// as a timeout) with failure class infra; a bad template is config. Step is
// empty: the failure belongs to the task's first step.
func AcquireFailure(task string, err error) RunStepResult {
	res := RunStepResult{Task: task, Outcome: run.Fail(sandbox.CodeProvisioningFailed, run.ClassInfra, "sandbox: "+err.Error())}
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.Type() != "" && ae.Type() != "GenericError" {
		res.ErrorCode, res.ErrorMessage = ae.Type(), ae.Message()
		if ae.Type() == run.CodeTemplateInvalid {
			res.FailureClass = run.ClassConfig
		}
	}
	return res
}

// recordTaskFailure records a failure on a task's step: the named one, or
// the first when Step is empty (its sandbox could not be had).
func (a *Activities) recordTaskFailure(ctx context.Context, runID, task string, f RunStepResult) {
	now := a.now()
	_, err := a.Store.UpdateJobRun(context.WithoutCancel(ctx), runID, func(r *store.JobRun) error {
		applyFailure(r, f, now)
		return nil
	})
	if err != nil && a.Logger != nil {
		a.Logger.Warn("record task failure", slog.String("run_id", runID), slog.String("task", task), slog.String("error", err.Error()))
	}
}

// applyFailure writes f onto its timeline entry unless that entry already
// holds a final outcome of its own.
func applyFailure(r *store.JobRun, f RunStepResult, now time.Time) {
	for i := range r.StepTimeline {
		e := &r.StepTimeline[i]
		if e.TaskName != f.Task || (f.Step != "" && e.Name != f.Step) {
			continue
		}
		if e.Status != run.Pending && e.Status != run.Running && e.Status != run.Cancelled {
			return
		}
		e.SetOutcome(run.Outcome{Status: f.Status, ErrorCode: f.ErrorCode, ErrorMessage: f.ErrorMessage, FailureClass: f.FailureClass})
		if e.StartedAt == nil {
			e.StartedAt = &now
		}
		if e.CompletedAt == nil {
			e.CompletedAt = &now
		}
		e.ExitCode = f.ExitCode
		if f.ErrorCode != "" {
			e.ErrorDetails = map[string]any{"task": f.Task, "step": e.Name}
		}
		return
	}
}

// RunStepInput runs one step.
type RunStepInput struct {
	RunID          string
	Task           string
	TaskIndex      int `json:",omitempty"`
	Step           string
	StepIndex      int `json:",omitempty"`
	Action         manifests.Step
	Sandbox        string
	Workdir        string                             `json:",omitempty"`
	Params         map[string]any                     `json:",omitempty"`
	Claimed        []string                           `json:",omitempty"`
	OutputSpecs    map[string]manifests.JobOutputSpec `json:",omitempty"`
	TimeoutSeconds int
	Vcpus          int `json:",omitempty"`
	MemoryMB       int `json:",omitempty"`
	// NextStep: another step of the task follows this one (the sandbox
	// prepares its cgroup for it, sandbox.ExecRequest.NextSoon).
	NextStep bool `json:",omitempty"`
	// FinishNext: the run's FinishRun follows this step (the last step of
	// the last task of a run whose tasks run in order).
	FinishNext bool `json:",omitempty"`
	// DeferEnd: when the step succeeds and NextStep or FinishNext, its end
	// is not written here but returned (RunStepResult.End) for the run's
	// next write, the next step's start (Ends) or FinishRun's, to carry. A
	// worker that does not know it writes the end itself, as before.
	DeferEnd bool `json:",omitempty"`
	// Ends are earlier steps' ends this step writes while its command
	// starts, with its own start. On PostgreSQL that write's commit does
	// not wait for the disk (store.MarkJobRunSteps) unless Durable: the
	// workflow keeps the ends so written and hands them again to a later
	// write that waits, a Durable step's or FinishRun's, so a database
	// crash loses none of them for good. A worker that does not know
	// Durable writes them durably, as before.
	Ends    []StepEnd `json:",omitempty"`
	Durable bool      `json:",omitempty"`
}

// StepEnd is how a step that succeeded ended, written to its timeline
// entry by the run's next write instead of by a write of its own: a job's
// step then costs one write of the run record on the step's path (its
// start, while its command starts) instead of two (the end, after it, on
// PostgreSQL a commit that waits for the disk). The workflow keeps it until
// a write that carries it has completed, so a lost activity loses no end,
// and then until a durable write has carried it (RunStepInput.Durable).
type StepEnd struct {
	Task, Step  string
	CompletedAt time.Time
	ExitCode    *int `json:",omitempty"`
	run.Outcome
}

// apply writes the end into the step's entry unless the entry has ended
// already.
func (end StepEnd) apply(e *store.StepTimelineEntry) {
	if e.Status != run.Pending && e.Status != run.Running {
		return
	}
	completed := end.CompletedAt
	e.SetOutcome(end.Outcome)
	e.CompletedAt, e.ExitCode = &completed, end.ExitCode
}

// RunStepResult is a step's outcome; a failed command is a result, not an
// activity error.
type RunStepResult struct {
	Task string
	Step string
	run.Outcome
	ExitCode         *int           `json:",omitempty"`
	Outputs          map[string]any `json:",omitempty"`
	ComputeCostCents float64        `json:",omitempty"`
	// End is the step's end when RunStepInput.DeferEnd left it to the run's
	// next write.
	End *StepEnd `json:",omitempty"`
}

// StepFailureFromError describes a step that could not run; a step whose
// StartToClose timeout fired is timed_out.
func StepFailureFromError(task, step string, err error) RunStepResult {
	res := RunStepResult{Task: task, Step: step, Outcome: run.Fail(run.CodeExecFailed, run.ClassInfra, err.Error())}
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.Type() != "" {
		res.ErrorCode = ae.Type()
		res.ErrorMessage = ae.Message()
		if ae.Type() == run.CodeTemplateInvalid || ae.Type() == sandbox.CodeCommandNotFound {
			res.FailureClass = run.ClassConfig
		}
	}
	var te *temporal.TimeoutError
	if errors.As(err, &te) {
		switch te.TimeoutType() {
		case enumspb.TIMEOUT_TYPE_HEARTBEAT:
			// the worker stopped answering: infrastructure, not the step
			res.ErrorCode = run.CodeHeartbeatTimeout
			res.ErrorMessage = "the worker running the step stopped heartbeating"
		default:
			res.Outcome = run.Outcome{Status: run.TimedOut, ErrorCode: run.CodeTimeout, FailureClass: run.ClassConfig,
				ErrorMessage: "the step exceeded its timeout"}
		}
	}
	return res
}

// RunStep runs one step in its task's sandbox and records it in the
// timeline; stdout and stderr go to the store as they come. The step's
// start is written while the step runs (the store's round trip overlaps
// the command's start), and its end only once the start is written, so
// the two keep their order.
func (a *Activities) RunStep(ctx context.Context, in RunStepInput) (RunStepResult, error) {
	started := a.now()
	attempt := attemptOf(ctx)
	marked := make(chan struct{})
	go func() {
		defer close(marked)
		mark := func(e *store.StepTimelineEntry) {
			e.SetOutcome(run.Outcome{Status: run.Running})
			e.StartedAt, e.SandboxName, e.CompletedAt, e.ExitCode = &started, new(in.Sandbox), nil, nil
			e.Attempt, e.Attempts = attempt, append(e.Attempts, store.StepAttempt{Attempt: attempt, StartedAt: started})
		}
		if len(in.Ends) > 0 {
			a.endAndMark(context.WithoutCancel(ctx), in, mark)
			return
		}
		a.markStep(ctx, in, mark)
	}()
	stopHB := a.heartbeat(ctx, in.Task+"/"+in.Step)
	res, err := a.runAction(ctx, in)
	stopHB()
	<-marked
	if err != nil {
		if ctx.Err() != nil {
			if errors.Is(context.Cause(ctx), worker.ErrWorkerShutdown) {
				// The worker is going away, not the step: the record keeps it
				// running and Temporal retries it on the next worker.
				return RunStepResult{}, err
			}
			now := a.now()
			a.updateStep(context.WithoutCancel(ctx), in, func(e *store.StepTimelineEntry) {
				if e.Status == run.Running { // else ended already: by the reconciler when the workflow is gone
					e.Status, e.CompletedAt = run.Cancelled, &now
				}
			})
			return RunStepResult{}, err
		}
		if code := sandbox.CodeOf(err); code != "" {
			res = RunStepResult{Outcome: run.Fail(code, run.ClassInfra, err.Error())}
			if code == sandbox.CodeCommandNotFound || code == sandbox.CodeFileOperation {
				res.FailureClass = run.ClassConfig
			}
		} else if tmplErr := (*templateError)(nil); errors.As(err, &tmplErr) {
			res = RunStepResult{Outcome: run.Fail(run.CodeTemplateInvalid, run.ClassConfig, err.Error())}
		} else {
			return RunStepResult{}, err // infrastructure: Temporal retries
		}
	}
	res.Task, res.Step = in.Task, in.Step
	done := a.now()
	res.ComputeCostCents = a.Rates.Cost(done.Sub(started), in.Vcpus, in.MemoryMB)
	if in.DeferEnd && (in.NextStep || in.FinishNext) && res.Status == run.Succeeded {
		res.End = &StepEnd{Task: in.Task, Step: in.Step, CompletedAt: done, ExitCode: res.ExitCode, Outcome: res.Outcome}
		return res, nil
	}
	a.updateStep(context.WithoutCancel(ctx), in, func(e *store.StepTimelineEntry) {
		e.SetOutcome(res.Outcome)
		e.CompletedAt, e.ExitCode = &done, res.ExitCode
		if res.ErrorCode != "" {
			if e.ErrorDetails == nil {
				e.ErrorDetails = map[string]any{}
			}
			e.ErrorDetails["task"], e.ErrorDetails["step"] = in.Task, in.Step
			if res.ExitCode != nil {
				e.ErrorDetails["exit_code"] = *res.ExitCode
			}
		}
	})
	return res, nil
}

type templateError struct{ err error }

func (e *templateError) Error() string { return e.err.Error() }

// markStep is updateStep for a step's start, which a database crash may
// lose without harm (see store.MarkJobRunStep).
func (a *Activities) markStep(ctx context.Context, in RunStepInput, change func(*store.StepTimelineEntry)) {
	if st, ok := a.Store.(stepPatcher); ok {
		if err := st.MarkJobRunStep(ctx, in.RunID, in.Task, in.Step, change); err != nil && a.Logger != nil {
			a.Logger.Warn("update step timeline", slog.String("run_id", in.RunID), slog.String("error", err.Error()))
		}
		return
	}
	a.updateStep(ctx, in, change)
}

// stepsPatcher is a store that changes several timeline entries in one
// write (store.Store does); MarkJobRunSteps is that write when a database
// crash may lose it.
type stepsPatcher interface {
	UpdateJobRunSteps(ctx context.Context, runID string, changes []store.StepChange) error
	MarkJobRunSteps(ctx context.Context, runID string, changes []store.StepChange) error
}

// endAndMark writes the ends a step carries (StepEnd) and the step's start
// (mark): in one write where the store can (one that may be lost in a
// database crash unless in.Durable: the workflow carries the ends to a
// later durable write), else the ends first. Either way a reader never
// sees the step running while one before it still is.
func (a *Activities) endAndMark(ctx context.Context, in RunStepInput, mark func(*store.StepTimelineEntry)) {
	if st, ok := a.Store.(stepsPatcher); ok {
		changes := make([]store.StepChange, 0, len(in.Ends)+1)
		for _, end := range in.Ends {
			changes = append(changes, store.StepChange{Task: end.Task, Step: end.Step, Change: end.apply})
		}
		changes = append(changes, store.StepChange{Task: in.Task, Step: in.Step, Change: mark})
		write := st.MarkJobRunSteps
		if in.Durable {
			write = st.UpdateJobRunSteps
		}
		if err := write(ctx, in.RunID, changes); err != nil && a.Logger != nil {
			a.Logger.Warn("update step timeline", slog.String("run_id", in.RunID), slog.String("error", err.Error()))
		}
		return
	}
	for _, end := range in.Ends {
		a.updateStep(ctx, RunStepInput{RunID: in.RunID, Task: end.Task, Step: end.Step}, end.apply)
	}
	a.markStep(ctx, in, mark)
}

func (a *Activities) updateStep(ctx context.Context, in RunStepInput, change func(*store.StepTimelineEntry)) {
	if st, ok := a.Store.(stepPatcher); ok {
		if err := st.UpdateJobRunStep(ctx, in.RunID, in.Task, in.Step, change); err != nil && a.Logger != nil {
			a.Logger.Warn("update step timeline", slog.String("run_id", in.RunID), slog.String("error", err.Error()))
		}
		return
	}
	_, err := a.Store.UpdateJobRun(ctx, in.RunID, func(r *store.JobRun) error {
		for i := range r.StepTimeline {
			if e := &r.StepTimeline[i]; e.TaskName == in.Task && e.Name == in.Step {
				change(e)
				return nil
			}
		}
		return nil
	})
	if err != nil && a.Logger != nil {
		a.Logger.Warn("update step timeline", slog.String("run_id", in.RunID), slog.String("error", err.Error()))
	}
}

func (a *Activities) runAction(ctx context.Context, in RunStepInput) (RunStepResult, error) {
	s := in.Action
	ok := RunStepResult{Outcome: run.Outcome{Status: run.Succeeded}}
	switch {
	case s.Exec != nil:
		return a.exec(ctx, in)
	case s.RunAgent != nil:
		return a.runAgent(ctx, in)
	case s.Snapshot != nil:
		name, err := manifests.Render(s.Snapshot.Name, in.Params)
		if err != nil {
			return RunStepResult{}, &templateError{err}
		}
		_, err = a.Sandboxes.Snapshot(ctx, in.Sandbox, name)
		return ok, err
	case s.Pause != nil:
		return ok, a.Sandboxes.Pause(ctx, in.Sandbox)
	case s.Resume != nil:
		return ok, a.Sandboxes.Resume(ctx, in.Sandbox)
	case s.Delete != nil:
		err := a.Sandboxes.Delete(ctx, in.Sandbox)
		a.unplaceIfGone(ctx, in.Sandbox, "")
		return ok, err
	}
	return RunStepResult{Outcome: run.Fail(run.CodeStepUnsupported, run.ClassConfig, "this step action is not supported")}, nil
}

func (a *Activities) exec(ctx context.Context, in RunStepInput) (RunStepResult, error) {
	argv, err := manifests.RenderCommand(in.Action.Exec, in.Params) // a shell string gets params as variables
	if err != nil {
		return RunStepResult{}, &templateError{err}
	}
	workdir, err := manifests.Render(in.Workdir, in.Params)
	if err != nil {
		return RunStepResult{}, &templateError{err}
	}
	outPath := os.DevNull
	if len(in.Claimed) > 0 {
		dir := a.OutputDir
		if dir == "" {
			dir = "/tmp"
		}
		var b [8]byte
		_, _ = rand.Read(b[:])
		outPath = filepath.Join(dir, fmt.Sprintf("svc_output.%s.%s", in.RunID, hex.EncodeToString(b[:])))
		defer os.Remove(outPath)
	}
	artifactsEnv, artifacts, cleanup, err := a.artifactsFile(ctx, in)
	if err != nil {
		return RunStepResult{}, err
	}
	defer cleanup()
	stepKey := in.Task + "/" + in.Step
	stdout := a.newLogWriter(ctx, in.RunID, stepKey, "stdout")
	stderr := a.newLogWriter(ctx, in.RunID, stepKey, "stderr")
	if n := attemptOf(ctx); n > 1 {
		_, _ = stdout.Write(attemptMarker(n))
	}

	res, err := a.Sandboxes.Exec(ctx, sandbox.ExecRequest{
		Sandbox: in.Sandbox, Argv: argv, Workdir: workdir, Stdout: stdout, Stderr: stderr,
		Env: stepEnv(outPath, artifactsEnv, in.Params), Timeout: time.Duration(in.TimeoutSeconds) * time.Second, User: in.Action.User,
		NextSoon: in.NextStep,
	})
	stdout.close()
	stderr.close()
	if err != nil {
		return RunStepResult{}, err
	}
	out := RunStepResult{Outcome: run.Outcome{Status: run.Succeeded}, ExitCode: new(res.ExitCode)}
	switch {
	case res.TimedOut:
		out.Outcome = run.Outcome{Status: run.TimedOut, ErrorCode: run.CodeTimeout, FailureClass: run.ClassConfig,
			ErrorMessage: fmt.Sprintf("step %s exceeded its timeout of %ds", in.Step, in.TimeoutSeconds)}
		return out, nil
	case res.ExitCode != 0:
		out.Outcome = run.Fail(run.CodeExecFailed, run.ClassConfig, fmt.Sprintf("step %s exited with code %d", in.Step, res.ExitCode))
		return out, nil
	}
	if len(in.Claimed) == 0 {
		a.collectArtifacts(ctx, in, artifacts, &out)
		return out, nil
	}
	data, err := readOutputFile(outPath, manifests.MaxOutputFileBytes)
	if err != nil {
		var oe *manifests.OutputError
		errors.As(err, &oe)
		out.Outcome = run.Fail(oe.Code, run.ClassContract, err.Error())
		return out, nil
	}
	values, err := parseClaimedOutputs(data, in)
	if err != nil {
		out.Outcome = run.Fail(manifests.OutputErrorCode(err), run.ClassContract, err.Error())
		return out, nil
	}
	out.Outputs = values
	a.collectArtifacts(ctx, in, artifacts, &out)
	return out, nil
}

// CodeOutputUnreadable is the error code of a $SVC_OUTPUT that exists but
// cannot be read as a regular file (a symlink, a FIFO, an I/O error).
const CodeOutputUnreadable = "OUTPUT_UNREADABLE"

// readOutputFile reads the output file: a missing file is empty; a file past
// the cap is OUTPUT_TOO_LARGE; a symlink, anything but a regular file, or a
// read error is OUTPUT_UNREADABLE. It never follows a symlink and never
// blocks on a FIFO.
func readOutputFile(path string, limit int) ([]byte, error) {
	unreadable := func(format string, args ...any) error {
		return &manifests.OutputError{Code: CodeOutputUnreadable, Msg: "$SVC_OUTPUT " + fmt.Sprintf(format, args...)}
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if errors.Is(err, syscall.ELOOP) {
		return nil, unreadable("is a symbolic link")
	}
	if err != nil {
		return nil, unreadable("cannot be opened: %v", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, unreadable("cannot be read: %v", err)
	}
	if !st.Mode().IsRegular() {
		return nil, unreadable("is not a regular file (%s)", st.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, unreadable("cannot be read: %v", err)
	}
	if len(data) > limit {
		return nil, &manifests.OutputError{Code: manifests.CodeOutputTooLarge,
			Msg: fmt.Sprintf("$SVC_OUTPUT is %d bytes, over the %d byte cap", max(st.Size(), int64(len(data))), limit)}
	}
	return data, nil
}

// parseClaimedOutputs parses the output file against the step's claims. A
// claim's `from` names the key the step writes in the file for that output
// key; a claim with `required = true` whose key is absent fails the step
// with OUTPUT_MISSING.
func parseClaimedOutputs(data []byte, in RunStepInput) (map[string]any, error) {
	var claims map[string]manifests.StepOutputClaim
	if in.Action.Outputs != nil {
		claims = in.Action.Outputs.Claims
	}
	specs := maps.Clone(in.OutputSpecs)
	if specs == nil {
		specs = map[string]manifests.JobOutputSpec{}
	}
	source := map[string]string{} // output key → the key written in the file
	var fileKeys []string
	for _, key := range in.Claimed {
		from := claims[key].From
		if from == "" {
			from = key
		}
		if from != key {
			if spec, declared := in.OutputSpecs[key]; declared {
				if other, clash := specs[from]; clash && from != key && in.OutputSpecs[from].Type != "" && !reflect.DeepEqual(other, spec) {
					return nil, &manifests.OutputError{Code: manifests.CodeOutputInvalid, Key: key, Msg: fmt.Sprintf("from %q names an output with another spec", from)}
				}
				specs[from] = spec
			}
		}
		source[key] = from
		if !slices.Contains(fileKeys, from) {
			fileKeys = append(fileKeys, from)
		}
	}
	raw, err := manifests.ParseOutputFile(data, specs, fileKeys)
	if err != nil {
		return nil, err
	}
	values := map[string]any{}
	for _, key := range in.Claimed {
		if v, ok := raw[source[key]]; ok {
			values[key] = v
		}
	}
	for _, key := range in.Claimed {
		if r := claims[key].Required; r != nil && *r {
			if _, ok := values[key]; !ok {
				msg := "is required by this step's claim but was not written to $SVC_OUTPUT"
				if from := claims[key].From; from != "" && from != key {
					msg = fmt.Sprintf("is required by this step's claim but %q was not written to $SVC_OUTPUT", from)
				}
				return nil, &manifests.OutputError{Code: manifests.CodeOutputMissing, Key: key, Msg: msg}
			}
		}
	}
	return values, nil
}

// FinishRunInput ends a run.
type FinishRunInput struct {
	RunID    string
	Manifest manifests.JobManifest
	run.Outcome
	FailedTask       string
	FailedStep       string
	Writes           []manifests.OutputWrite
	ComputeCostCents float64
	// Sandboxes provisioned by the run, deleted when teardown_on_complete.
	Sandboxes []string
	// Ends are steps' ends no step carried yet (RunStepInput.Ends).
	Ends []StepEnd `json:",omitempty"`
	// Steps are outcomes the workflow knows better than the timeline: tasks
	// whose sandbox could not be had (Step empty: the task's first step),
	// steps whose activity failed or timed out, steps interrupted by
	// run.timeout. Each is written unless its entry already holds a final
	// outcome of its own.
	Steps []RunStepResult
}

// FinishRunResult is how a job run ended.
type FinishRunResult struct {
	run.Outcome
	Outputs   map[string]any
	CostCents int64
}

// FinishRun reduces the outputs, closes the timeline and writes the final
// status, errors and costs.
func (a *Activities) FinishRun(ctx context.Context, in FinishRunInput) (FinishRunResult, error) {
	res := FinishRunResult{Outcome: in.Outcome}
	if res.Status == run.Succeeded {
		outputs, err := manifests.ReduceOutputs(&in.Manifest, in.Writes)
		if err != nil {
			res.Outcome = run.Fail(manifests.OutputErrorCode(err), run.ClassContract, err.Error())
			// Name the step that owed the output: the first that claims it.
			var oe *manifests.OutputError
			if errors.As(err, &oe) && oe.Key != "" && in.FailedStep == "" {
				in.FailedTask, in.FailedStep = firstClaimer(&in.Manifest, oe.Key)
			}
		} else {
			res.Outputs = outputs
		}
	}
	a.teardown(ctx, in)
	res.CostCents = int64(math.Ceil(in.ComputeCostCents - 1e-9))
	now := a.now()
	_, err := a.Store.UpdateJobRun(ctx, in.RunID, func(r *store.JobRun) error {
		if run.JobRun.Terminal(r.Status) && r.CompletedAt != nil {
			return errAlreadyFinished // a retried FinishRun: keep the first
		}
		r.Status = res.Status // the rest of the outcome below, with the stop reason
		r.CompletedAt = &now
		if r.StartedAt == nil { // stopped before it started
			r.StartedAt = &now
		}
		if res.Status != run.Cancelled {
			r.StopReason = nil // a stop that lost the race to the run's end
		}
		for _, end := range in.Ends {
			for i := range r.StepTimeline {
				if e := &r.StepTimeline[i]; e.TaskName == end.Task && e.Name == end.Step {
					end.apply(e)
					break
				}
			}
		}
		for _, f := range in.Steps {
			applyFailure(r, f, now)
		}
		endUnfinishedSteps(r, res.Status, now)
		// Sandbox time is charged for every step that ran, also those a
		// stop or a timeout cut off (their activity reports no cost).
		if c := a.timelineCost(&in.Manifest, r.StepTimeline); c > in.ComputeCostCents {
			res.CostCents = int64(math.Ceil(c - 1e-9))
		}
		payload := map[string]any{"outputs": map[string]any{}}
		if res.Outputs != nil {
			payload["outputs"] = res.Outputs
		}
		r.ResultPayload = payload
		if res.Status != run.Succeeded {
			recordRunFailure(r, res.Outcome, in.FailedTask, in.FailedStep, payload)
		}
		r.ComputeCostCents = res.CostCents
		r.InferenceCostCents = a.inferenceCents(&in.Manifest, r.StepTimeline) + GatewayCents(r)
		r.TotalCostCents = r.ComputeCostCents + r.InferenceCostCents
		r.CostRatedAt = &now
		return nil
	})
	if errors.Is(err, errAlreadyFinished) {
		return res, nil
	}
	if err != nil {
		return res, err
	}
	return res, nil
}

var errAlreadyFinished = errors.New("the run is already finished")

// endUnfinishedSteps ends the steps of a run that ended with status at now:
// steps that never started are skipped (cancelled by a stop); the ones
// running when the run ended were cut off by it.
func endUnfinishedSteps(r *store.JobRun, status run.Status, now time.Time) {
	leftover, interrupted := run.Skipped, run.Cancelled
	switch status {
	case run.Cancelled:
		leftover = run.Cancelled
	case run.TimedOut:
		interrupted = run.TimedOut
	}
	for i := range r.StepTimeline {
		e := &r.StepTimeline[i]
		switch e.Status {
		case run.Pending:
			e.Status = leftover
		case run.Running:
			e.Status, e.CompletedAt = interrupted, &now
		}
	}
}

// recordRunFailure records how a run that did not succeed ended: its
// outcome (a stop's reason as its message), the task and step that failed,
// and the error in its result payload.
func recordRunFailure(r *store.JobRun, o run.Outcome, failedTask, failedStep string, payload map[string]any) {
	msg := o.ErrorMessage
	if r.StopReason != nil && o.Status == run.Cancelled {
		msg = run.StopMessage(*r.StopReason)
	}
	r.SetOutcome(run.Outcome{Status: o.Status, ErrorCode: o.ErrorCode, ErrorMessage: msg, FailureClass: o.FailureClass})
	details := map[string]any{}
	if failedTask != "" {
		details["task_name"] = failedTask
	}
	if failedStep != "" {
		details["step_name"] = failedStep
	}
	if len(details) > 0 {
		r.ErrorDetails = details
	}
	payload["error"] = map[string]any{"code": o.ErrorCode, "message": msg, "failure_class": o.FailureClass}
}

// firstClaimer is the task and step, in manifest order, that first claims
// output key ("" when none does).
func firstClaimer(m *manifests.JobManifest, key string) (task, step string) {
	claims := manifests.Claims(m)
	for _, t := range m.Run.Tasks {
		for si := range t.Steps {
			name := manifests.StepName(t, si)
			if slices.Contains(claims[t.Name][name], key) {
				return t.Name, name
			}
		}
	}
	return "", ""
}

// timelineCost prices the sandbox time of every step of the timeline that
// has a start and an end, at the size of its task's sandbox.
func (a *Activities) timelineCost(m *manifests.JobManifest, timeline []store.StepTimelineEntry) float64 {
	var cents float64
	for _, e := range timeline {
		if e.StartedAt == nil || e.CompletedAt == nil || !e.CompletedAt.After(*e.StartedAt) {
			continue
		}
		vcpus, mem := taskSandboxSize(m, e.TaskName)
		cents += a.Rates.Cost(e.CompletedAt.Sub(*e.StartedAt), vcpus, mem)
	}
	return cents
}

// taskSandboxSize is the vCPUs and memory a task's sandbox is configured
// with (the task's sandbox over the run's, SPEC's defaults otherwise).
func taskSandboxSize(m *manifests.JobManifest, task string) (vcpus, memoryMB int) {
	vcpus, memoryMB = 2, 2048
	cfg := m.Run.Sandbox
	for _, t := range m.Run.Tasks {
		if t.Name == task && t.Sandbox != nil {
			cfg = t.Sandbox
		}
	}
	if cfg != nil && cfg.Vcpus != nil {
		vcpus = *cfg.Vcpus
	}
	if cfg != nil && cfg.MemoryMB != nil {
		memoryMB = *cfg.MemoryMB
	}
	return vcpus, memoryMB
}

// stepEnv is an exec step's environment: $SVC_OUTPUT and every param as
// SVC_PARAM_<NAME>.
func stepEnv(outPath, artifacts string, params map[string]any) map[string]string {
	env := manifests.ParamEnv(params)
	env[sandbox.OutputEnv] = outPath
	env["SVC_ARTIFACTS"] = artifacts
	return env
}
