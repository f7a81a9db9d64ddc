// Package activities holds every side effect of Linefactory's workflows:
// writing run records, acquiring sandboxes, running steps, rating costs.
// Activities are methods on *Activities, whose fields are their
// dependencies, wired once in cmd.
package activities

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/linefactory/linefactory/activities/sandbox"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/store"
)

// Statuses of job runs and steps (API.md "Statuses").
const (
	StatusQueued    = "queued"
	StatusPending   = "pending"
	StatusRunning   = "running"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
	StatusTimedOut  = "timed_out"
	StatusSkipped   = "skipped"
)

// PermanentErrorTypes are activity error types never worth a retry.
var PermanentErrorTypes = []string{
	sandbox.CodeNotFound, sandbox.CodeAlreadyExists, sandbox.CodeInvalidState, sandbox.CodeProvisioningFailed,
	sandbox.CodeCommandNotFound, sandbox.CodeFileOperation, "TEMPLATE_INVALID",
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

// DefaultCostRates are used when none are configured.
var DefaultCostRates = CostRates{CentsPerVCPUHour: 4, CentsPerGBHour: 0.5}

// Activities are the activities of job runs.
type Activities struct {
	Store Store
	// Definitions serves schedule firings; nil on workers that fire none.
	Definitions Definitions
	Sandboxes   sandbox.Driver
	Now         func() time.Time
	Logger      *slog.Logger
	Rates       CostRates
	// OutputDir is where $SVC_OUTPUT files are made; default /tmp.
	OutputDir string
	// HeartbeatInterval is how often a running step heartbeats; default 500ms.
	HeartbeatInterval time.Duration
}

func (a *Activities) now() time.Time {
	if a.Now == nil {
		return time.Now().UTC()
	}
	return a.Now().UTC()
}

func ptr[T any](v T) *T { return &v }

func strp(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// StartRunInput marks a run as started.
type StartRunInput struct {
	RunID    string
	Manifest manifests.JobManifest
}

// StartRun marks the run running and lists every step as pending.
func (a *Activities) StartRun(ctx context.Context, in StartRunInput) error {
	now := a.now()
	_, err := a.Store.UpdateJobRun(ctx, in.RunID, func(r *store.JobRun) error {
		if r.Status != StatusQueued && r.Status != "" {
			return nil // a retried activity: already started
		}
		r.Status = StatusRunning
		r.StartedAt = &now
		if reg := in.Manifest.Run.Region; reg != "" {
			r.Region = &reg
		}
		r.StepTimeline = nil
		for _, t := range in.Manifest.Run.Tasks {
			for j, s := range t.Steps {
				r.StepTimeline = append(r.StepTimeline, store.StepTimelineEntry{
					Name: manifests.StepName(t, j), Action: action(s), Status: StatusPending, TaskName: t.Name,
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
	RunID  string
	Task   string
	Config *manifests.SandboxConfig
	Params map[string]any
}

// AcquireSandboxResult names the task's sandbox.
type AcquireSandboxResult struct {
	Name     string
	Created  bool
	Vcpus    int
	MemoryMB int
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

// AcquireSandbox provisions, ensures or reuses the task's sandbox.
func (a *Activities) AcquireSandbox(ctx context.Context, in AcquireSandboxInput) (AcquireSandboxResult, error) {
	cfg := manifests.SandboxConfig{}
	if in.Config != nil {
		cfg = *in.Config
	}
	manifests.NormalizeJob(&manifests.JobManifest{Run: manifests.RunSection{Sandbox: &cfg}})
	name, err := manifests.Render(cfg.Name, in.Params)
	if err != nil {
		return AcquireSandboxResult{}, permanent("TEMPLATE_INVALID", err)
	}
	env := map[string]string{}
	for k, v := range cfg.Env {
		if env[k], err = manifests.Render(v, in.Params); err != nil {
			return AcquireSandboxResult{}, permanent("TEMPLATE_INVALID", err)
		}
	}
	scripts := make([]manifests.SetupScript, len(cfg.SetupScripts))
	for i, sc := range cfg.SetupScripts {
		scripts[i] = sc
		if scripts[i].Script, err = manifests.Render(sc.Script, in.Params); err != nil {
			return AcquireSandboxResult{}, permanent("TEMPLATE_INVALID", err)
		}
	}
	sb, err := a.Sandboxes.Acquire(ctx, sandbox.Spec{
		Mode: cfg.Mode, Name: name, Image: cfg.Image, Vcpus: *cfg.Vcpus, MemoryMB: *cfg.MemoryMB, DiskGB: *cfg.DiskGB,
		InternetEnabled: *cfg.InternetEnabled, Env: env, Sources: cfg.Sources, SetupScripts: scripts,
		SnapshotName: cfg.SnapshotName, Lifecycle: cfg.Lifecycle, RunID: in.RunID,
	})
	if err != nil {
		a.recordTaskFailure(ctx, in.RunID, in.Task, err)
		return AcquireSandboxResult{}, sandboxError(err)
	}
	if cfg.Mode != manifests.SandboxProvision && sb.State == sandbox.StatePaused {
		// resume_on_start and auto_resume both ask for a paused sandbox to wake.
		if err := a.Sandboxes.Resume(ctx, sb.Name); err != nil {
			return AcquireSandboxResult{}, sandboxError(err)
		}
	}
	return AcquireSandboxResult{Name: sb.Name, Created: sb.Created, Vcpus: sb.Vcpus, MemoryMB: sb.MemoryMB}, nil
}

// recordTaskFailure marks the first step of a task failed when its sandbox
// could not be had.
func (a *Activities) recordTaskFailure(ctx context.Context, runID, task string, cause error) {
	now := a.now()
	_, _ = a.Store.UpdateJobRun(ctx, runID, func(r *store.JobRun) error {
		for i := range r.StepTimeline {
			e := &r.StepTimeline[i]
			if e.TaskName == task {
				e.Status, e.StartedAt, e.CompletedAt = StatusFailed, &now, &now
				e.ErrorMessage, e.ErrorCode, e.FailureClass = ptr(cause.Error()), strp(sandbox.CodeOf(cause)), ptr("infra")
				return nil
			}
		}
		return nil
	})
}

// RunStepInput runs one step.
type RunStepInput struct {
	RunID          string
	Task           string
	TaskIndex      int
	Step           string
	StepIndex      int
	Action         manifests.Step
	Sandbox        string
	Workdir        string
	Params         map[string]any
	Claimed        []string
	OutputSpecs    map[string]manifests.JobOutputSpec
	TimeoutSeconds int
	Vcpus          int
	MemoryMB       int
}

// RunStepResult is a step's outcome; a failed command is a result, not an
// activity error.
type RunStepResult struct {
	Task             string
	Step             string
	Status           string
	ExitCode         *int
	ErrorCode        string
	ErrorMessage     string
	FailureClass     string
	Outputs          map[string]any
	ComputeCostCents float64
}

// StepFailureFromError describes a step that could not run.
func StepFailureFromError(task, step string, err error) RunStepResult {
	res := RunStepResult{Task: task, Step: step, Status: StatusFailed, ErrorMessage: err.Error(), FailureClass: "infra", ErrorCode: "EXEC_FAILED"}
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.Type() != "" {
		res.ErrorCode = ae.Type()
		res.ErrorMessage = ae.Message()
		if ae.Type() == "TEMPLATE_INVALID" || ae.Type() == sandbox.CodeCommandNotFound {
			res.FailureClass = "config"
		}
	}
	var te *temporal.TimeoutError
	if errors.As(err, &te) {
		res.ErrorCode, res.FailureClass = "TIMEOUT", "config"
	}
	return res
}

// RunStep runs one step in its task's sandbox and records it in the
// timeline; stdout and stderr go to the store as they come.
func (a *Activities) RunStep(ctx context.Context, in RunStepInput) (RunStepResult, error) {
	started := a.now()
	a.updateStep(ctx, in, func(e *store.StepTimelineEntry) {
		e.Status, e.StartedAt, e.SandboxName = StatusRunning, &started, strp(in.Sandbox)
		e.CompletedAt, e.ExitCode, e.ErrorCode, e.ErrorMessage, e.FailureClass = nil, nil, nil, nil, nil
	})
	res, err := a.runAction(ctx, in)
	if err != nil {
		if ctx.Err() != nil {
			now := a.now()
			a.updateStep(context.WithoutCancel(ctx), in, func(e *store.StepTimelineEntry) {
				e.Status, e.CompletedAt = StatusCancelled, &now
			})
			return RunStepResult{}, err
		}
		if code := sandbox.CodeOf(err); code != "" {
			res = RunStepResult{Status: StatusFailed, ErrorCode: code, ErrorMessage: err.Error(), FailureClass: "infra"}
			if code == sandbox.CodeCommandNotFound || code == sandbox.CodeFileOperation {
				res.FailureClass = "config"
			}
		} else if tmplErr := (*templateError)(nil); errors.As(err, &tmplErr) {
			res = RunStepResult{Status: StatusFailed, ErrorCode: "TEMPLATE_INVALID", ErrorMessage: err.Error(), FailureClass: "config"}
		} else {
			return RunStepResult{}, err // infrastructure: Temporal retries
		}
	}
	res.Task, res.Step = in.Task, in.Step
	hours := a.now().Sub(started).Hours()
	res.ComputeCostCents = hours * (float64(in.Vcpus)*a.Rates.CentsPerVCPUHour + float64(in.MemoryMB)/1024*a.Rates.CentsPerGBHour)
	done := a.now()
	a.updateStep(context.WithoutCancel(ctx), in, func(e *store.StepTimelineEntry) {
		e.Status, e.CompletedAt, e.ExitCode = res.Status, &done, res.ExitCode
		e.ErrorCode, e.ErrorMessage, e.FailureClass = strp(res.ErrorCode), strp(res.ErrorMessage), strp(res.FailureClass)
		if res.ErrorCode != "" {
			e.ErrorDetails = map[string]any{"task": in.Task, "step": in.Step}
			if res.ExitCode != nil {
				e.ErrorDetails["exit_code"] = *res.ExitCode
			}
		}
	})
	return res, nil
}

type templateError struct{ err error }

func (e *templateError) Error() string { return e.err.Error() }

func (a *Activities) updateStep(ctx context.Context, in RunStepInput, change func(*store.StepTimelineEntry)) {
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
	ok := RunStepResult{Status: StatusSucceeded}
	switch {
	case s.Exec != nil:
		return a.exec(ctx, in)
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
		return ok, a.Sandboxes.Delete(ctx, in.Sandbox)
	}
	return RunStepResult{Status: StatusFailed, ErrorCode: "STEP_UNSUPPORTED", ErrorMessage: "this step action is not supported", FailureClass: "config"}, nil
}

func (a *Activities) exec(ctx context.Context, in RunStepInput) (RunStepResult, error) {
	argv, err := manifests.RenderAll(in.Action.Exec, in.Params)
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
	stepKey := in.Task + "/" + in.Step
	stdout := &logWriter{ctx: ctx, store: a.Store, runID: in.RunID, step: stepKey, stream: "stdout"}
	stderr := &logWriter{ctx: ctx, store: a.Store, runID: in.RunID, step: stepKey, stream: "stderr"}

	hbCtx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	interval := a.HeartbeatInterval
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-t.C:
				if activity.IsActivity(ctx) {
					activity.RecordHeartbeat(ctx, stepKey)
				}
			}
		}
	}()
	res, err := a.Sandboxes.Exec(ctx, sandbox.ExecRequest{
		Sandbox: in.Sandbox, Argv: argv, Workdir: workdir, Stdout: stdout, Stderr: stderr,
		Env: map[string]string{"SVC_OUTPUT": outPath}, Timeout: time.Duration(in.TimeoutSeconds) * time.Second,
	})
	stdout.flush()
	stderr.flush()
	if err != nil {
		return RunStepResult{}, err
	}
	out := RunStepResult{Status: StatusSucceeded, ExitCode: ptr(res.ExitCode)}
	switch {
	case res.TimedOut:
		out.Status, out.ErrorCode, out.FailureClass = StatusTimedOut, "TIMEOUT", "config"
		out.ErrorMessage = fmt.Sprintf("step %s exceeded its timeout of %ds", in.Step, in.TimeoutSeconds)
		return out, nil
	case res.ExitCode != 0:
		out.Status, out.ErrorCode, out.FailureClass = StatusFailed, "EXEC_FAILED", "config"
		out.ErrorMessage = fmt.Sprintf("step %s exited with code %d", in.Step, res.ExitCode)
		return out, nil
	}
	if len(in.Claimed) == 0 {
		return out, nil
	}
	data, err := readCapped(outPath, manifests.MaxOutputFileBytes)
	if err != nil {
		out.Status, out.ErrorCode, out.FailureClass, out.ErrorMessage = StatusFailed, manifests.CodeOutputTooLarge, "contract", err.Error()
		return out, nil
	}
	values, err := manifests.ParseOutputFile(data, in.OutputSpecs, in.Claimed)
	if err != nil {
		out.Status, out.ErrorCode, out.FailureClass, out.ErrorMessage = StatusFailed, manifests.OutputErrorCode(err), "contract", err.Error()
		return out, nil
	}
	out.Outputs = values
	return out, nil
}

// readCapped reads the output file; a missing file is empty, a file past the
// cap is an error.
func readCapped(path string, limit int) ([]byte, error) {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if st.Size() > int64(limit) {
		return nil, fmt.Errorf("$SVC_OUTPUT is %d bytes, over the %d byte cap", st.Size(), limit)
	}
	return os.ReadFile(path)
}

// logWriter streams a step's output to the store in chunks.
type logWriter struct {
	ctx    context.Context
	store  Store
	runID  string
	step   string
	stream string
	mu     sync.Mutex
	buf    []byte
	last   time.Time
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf = append(w.buf, p...)
	due := len(w.buf) >= 16<<10 || time.Since(w.last) > 250*time.Millisecond
	w.mu.Unlock()
	if due {
		w.flush()
	}
	return len(p), nil
}

func (w *logWriter) flush() {
	w.mu.Lock()
	data := w.buf
	w.buf = nil
	w.last = time.Now()
	w.mu.Unlock()
	if len(data) > 0 {
		_ = w.store.AppendStepLog(context.WithoutCancel(w.ctx), w.runID, w.step, w.stream, data)
	}
}

// FinishRunInput ends a run.
type FinishRunInput struct {
	RunID            string
	Manifest         manifests.JobManifest
	Status           string
	ErrorCode        string
	ErrorMessage     string
	FailureClass     string
	FailedTask       string
	FailedStep       string
	Writes           []manifests.OutputWrite
	ComputeCostCents float64
	// Sandboxes provisioned by the run, deleted when teardown_on_complete.
	Sandboxes []string
}

// FinishRunResult is how a job run ended.
type FinishRunResult struct {
	Status       string
	Outputs      map[string]any
	ErrorCode    string
	ErrorMessage string
	FailureClass string
	CostCents    int64
}

// FinishRun reduces the outputs, closes the timeline and writes the final
// status, errors and costs.
func (a *Activities) FinishRun(ctx context.Context, in FinishRunInput) (FinishRunResult, error) {
	res := FinishRunResult{Status: in.Status, ErrorCode: in.ErrorCode, ErrorMessage: in.ErrorMessage, FailureClass: in.FailureClass}
	if res.Status == StatusSucceeded {
		outputs, err := manifests.ReduceOutputs(&in.Manifest, in.Writes)
		if err != nil {
			res.Status, res.ErrorCode, res.ErrorMessage, res.FailureClass = StatusFailed, manifests.OutputErrorCode(err), err.Error(), "contract"
		} else {
			res.Outputs = outputs
		}
	}
	if t := in.Manifest.Run.TeardownOnComplete; t != nil && *t {
		for _, name := range in.Sandboxes {
			if err := a.Sandboxes.Delete(ctx, name); err != nil && sandbox.CodeOf(err) != sandbox.CodeNotFound && a.Logger != nil {
				a.Logger.Warn("teardown sandbox", slog.String("sandbox", name), slog.String("error", err.Error()))
			}
		}
	}
	res.CostCents = int64(math.Ceil(in.ComputeCostCents - 1e-9))
	now := a.now()
	_, err := a.Store.UpdateJobRun(ctx, in.RunID, func(r *store.JobRun) error {
		r.Status = res.Status
		r.CompletedAt = &now
		leftover := StatusSkipped
		if res.Status == StatusCancelled || res.Status == StatusTimedOut {
			leftover = StatusCancelled
		}
		for i := range r.StepTimeline {
			e := &r.StepTimeline[i]
			switch e.Status {
			case StatusPending:
				e.Status = leftover
			case StatusRunning:
				e.Status, e.CompletedAt = StatusCancelled, &now
			}
		}
		payload := map[string]any{"outputs": map[string]any{}}
		if res.Outputs != nil {
			payload["outputs"] = res.Outputs
		}
		r.ResultPayload = payload
		if res.Status != StatusSucceeded {
			msg := res.ErrorMessage
			if r.StopReason != nil && res.Status == StatusCancelled {
				msg = "stopped: " + *r.StopReason
			}
			r.ErrorMessage, r.ErrorCode, r.FailureClass = strp(msg), strp(res.ErrorCode), strp(res.FailureClass)
			details := map[string]any{}
			if in.FailedTask != "" {
				details["task_name"] = in.FailedTask
			}
			if in.FailedStep != "" {
				details["step_name"] = in.FailedStep
			}
			if len(details) > 0 {
				r.ErrorDetails = details
			}
			payload["error"] = map[string]any{"code": res.ErrorCode, "message": msg, "failure_class": res.FailureClass}
		}
		r.ComputeCostCents = res.CostCents
		r.TotalCostCents = r.ComputeCostCents + r.InferenceCostCents
		r.CostRatedAt = &now
		return nil
	})
	if err != nil {
		return res, err
	}
	return res, nil
}
