package activities

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/linefactory/linefactory/activities/agent"
	"github.com/linefactory/linefactory/activities/sandbox"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/agentconf"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// AgentStore is what run_agent steps and artifacts need of the store
// besides Store (*store.Store has it all).
type AgentStore interface {
	GetKnowledge(ctx context.Context, identifier string) (store.KnowledgeItem, store.KnowledgeVersion, error)
	GetKnowledgeVersion(ctx context.Context, identifier string, n int) (store.KnowledgeVersion, error)
	GetSandboxSession(ctx context.Context, sandbox, name string) (string, error)
	PutSandboxSession(ctx context.Context, sandbox, name, sessionID string) error
}

func (a *Activities) agentStore() AgentStore {
	if a.AgentStore != nil {
		return a.AgentStore
	}
	if s, ok := a.Store.(AgentStore); ok {
		return s
	}
	return nil
}

// handOver gives the step's prepared files to the sandbox's user (uid > 0,
// isolated sandboxes), whatever factoryd's umask: the step reads them and
// writes its own beside them.
func handOver(dir string, uid int) error {
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if d.IsDir() {
			mode = 0o755
		}
		if err := os.Chmod(p, mode); err != nil {
			return err
		}
		if uid > 0 {
			return os.Lchown(p, uid, uid)
		}
		return nil
	})
}

// resolveKnowledge resolves every knowledge binding of a job to the latest
// version of its item, now (when the run starts). A slug that no longer
// resolves is left out: the step that needs it fails.
func (a *Activities) resolveKnowledge(ctx context.Context, m manifests.JobManifest) ([]store.KnowledgeVersionRef, error) {
	uses := manifests.JobKnowledge(&m)
	out := []store.KnowledgeVersionRef{}
	if len(uses) == 0 {
		return out, nil
	}
	as := a.agentStore()
	if as == nil {
		return out, nil
	}
	seen := map[string]bool{}
	for _, u := range uses {
		if seen[u.Slug] {
			continue
		}
		seen[u.Slug] = true
		_, v, err := as.GetKnowledge(ctx, u.Slug)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("resolve knowledge %s: %w", u.Slug, err)
		}
		out = append(out, store.KnowledgeVersionRef{Slug: u.Slug, VersionID: v.ID, VersionNumber: v.VersionNumber, ContentHash: v.ContentHash})
	}
	return out, nil
}

// sandboxTmp is a sandbox's own /tmp on the host and how a host path in it
// is seen by the sandbox's commands (isolated: under /tmp).
func sandboxTmp(sb sandbox.Sandbox) (hostDir string, inside func(string) string) {
	hostDir = filepath.Join(filepath.Dir(sb.Root), "tmp")
	return hostDir, func(p string) string {
		if p == "" || sb.Isolation != sandbox.IsolationBwrap {
			return p
		}
		rel, err := filepath.Rel(hostDir, p)
		if err != nil || strings.HasPrefix(rel, "..") {
			return p
		}
		return "/tmp/" + filepath.ToSlash(rel)
	}
}

// artifactsFile names a plain exec step's $SVC_ARTIFACTS in the sandbox's
// own /tmp (never pre-created): the value the step sees and the host path.
func (a *Activities) artifactsFile(ctx context.Context, in RunStepInput) (env, host string, cleanup func(), err error) {
	sb, err := a.Sandboxes.Get(ctx, in.Sandbox)
	if err != nil {
		return "", "", nil, err
	}
	dir, inside := sandboxTmp(sb)
	if _, serr := os.Stat(dir); serr != nil {
		dir, inside = a.OutputDir, func(p string) string { return p }
		if dir == "" {
			dir = "/tmp"
		}
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	host = filepath.Join(dir, fmt.Sprintf("svc_artifacts.%s.%s", unsafePathRE.ReplaceAllString(in.RunID, "_"), hex.EncodeToString(b[:])))
	_ = os.Remove(host)
	return inside(host), host, func() { _ = os.Remove(host) }, nil
}

// collectArtifacts validates the step's $SVC_ARTIFACTS lines and adds them
// to the run's artifact_refs; a bad line fails a succeeded step with
// ARTIFACT_INVALID (class contract), naming the line and the field.
func (a *Activities) collectArtifacts(ctx context.Context, in RunStepInput, path string, out *RunStepResult) {
	data, err := agent.ReadLimited(path, agent.MaxSideFileBytes)
	if err == nil && len(data) == 0 {
		return
	}
	var refs []map[string]any
	if err == nil {
		exists := func(slug string) bool {
			as := a.agentStore()
			if as == nil {
				return false
			}
			_, _, err := as.GetKnowledge(ctx, slug)
			return err == nil
		}
		refs, err = manifests.ParseArtifacts(data, exists)
	} else {
		err = fmt.Errorf("$SVC_ARTIFACTS: %w", err)
	}
	if err != nil {
		if out.Status == run.Succeeded {
			out.Outcome = run.Fail(run.CodeArtifactInvalid, run.ClassContract, err.Error())
		}
		return
	}
	_, uerr := a.Store.UpdateJobRun(context.WithoutCancel(ctx), in.RunID, func(r *store.JobRun) error {
		r.ArtifactRefs = append(r.ArtifactRefs, refs...)
		return nil
	})
	if uerr != nil && a.Logger != nil {
		a.Logger.Warn("record artifacts", slog.String("run_id", in.RunID), slog.String("error", uerr.Error()))
	}
}

var unsafePathRE = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// runAgent runs a run_agent step (AGENTS.md "What a run_agent step gets").
func (a *Activities) runAgent(ctx context.Context, in RunStepInput) (RunStepResult, error) {
	ra := in.Action.RunAgent
	h, ok := a.Agents.Harness(ra.Harness)
	if !ok {
		return RunStepResult{Outcome: run.Fail(run.CodeHarnessNotConfigured, run.ClassConfig,
			fmt.Sprintf("step %s: harness %q is not configured on this server", in.Step, ra.Harness))}, nil
	}
	sb, err := a.Sandboxes.Get(ctx, in.Sandbox)
	if err != nil {
		return RunStepResult{}, err
	}
	// The step's files live in the sandbox's own /tmp, which its commands
	// see (under isolation as /tmp), owned by the sandbox's user.
	tmp, inside := sandboxTmp(sb)
	dir, random := agentStepDir(tmp, in)
	files, err := agent.NewFiles(dir)
	if err != nil {
		return RunStepResult{}, &sandbox.Error{Code: sandbox.CodeFileOperation, Msg: "prepare the agent step's files", Err: err}
	}
	// SPEC: the step sees $SVC_OUTPUT as /tmp/svc_output.<job_run_id>.<random>.
	files.Output = filepath.Join(dir, "svc_output."+unsafePathRE.ReplaceAllString(in.RunID, "_")+"."+random)
	defer os.RemoveAll(dir)
	workdir, err := manifests.Render(in.Workdir, in.Params)
	if err != nil {
		return RunStepResult{}, &templateError{err}
	}
	step := agent.Step{Harness: h.Name, Model: ra.Model, Effort: ra.Effort, RunID: in.RunID, Step: in.Step,
		Session: ra.Mode == manifests.AgentModeSession, HarnessEnv: h.Env}
	if step.Model == "" {
		step.Model = h.DefaultModel
	}
	sessionKey := sb.Name + "@" + sb.CreatedAt.UTC().Format(time.RFC3339Nano)
	argv, outPath, failed, err := a.agentCommand(ctx, in, h, sb, &step, &files, workdir, sessionKey, inside)
	if err != nil {
		return RunStepResult{}, err
	}
	if failed != nil {
		return *failed, nil
	}
	if err := handOver(dir, sb.HostUID); err != nil {
		return RunStepResult{}, &sandbox.Error{Code: sandbox.CodeFileOperation, Msg: "prepare the agent step's files", Err: err}
	}
	env, services, failed := a.agentEnv(ctx, in, sb, step, files, inside, outPath)
	if failed != nil {
		return *failed, nil
	}
	res, err := a.execAgent(ctx, in, argv, workdir, env, services)
	if err != nil {
		return RunStepResult{}, err
	}
	a.recordSessionAndUsage(ctx, in, h, step, files, sessionKey)
	return a.agentResult(ctx, in, h, step, files, res, outPath), nil
}

// agentEnv is the environment of a run_agent step's command: the agent
// variables, the params, SVC_OUTPUT and, for a svc_inference step, the
// gateway's (with, under bwrap isolation, the service that forwards to
// it). A result is a failure.
func (a *Activities) agentEnv(ctx context.Context, in RunStepInput, sb sandbox.Sandbox, step agent.Step, files agent.Files, inside func(string) string,
	outPath string) (map[string]string, []sandbox.Service, *RunStepResult) {
	env := agent.Env(step, files.Mapped(inside))
	for k, v := range manifests.ParamEnv(in.Params) {
		env[k] = v
	}
	// The driver gives the command its own path for SVC_OUTPUT and brings
	// the file back to this one.
	env[sandbox.OutputEnv] = outPath
	var services []sandbox.Service
	if in.Action.RunAgent.ModelProvider == ModelProviderSvcInference {
		// The service's metered gateway and a token for this run (gateway.go).
		gw, err := a.InferenceStepEnv(ctx, in.RunID, stepKeyOf(in.Task, in.Step))
		if err != nil {
			return nil, nil, &RunStepResult{Outcome: run.Fail(CodeInferenceUnavailable, run.ClassConfig, err.Error())}
		}
		maps.Copy(env, gw)
		if sb.Isolation == sandbox.IsolationBwrap {
			svc, err := gatewayService(env)
			if err != nil {
				return nil, nil, &RunStepResult{Outcome: run.Fail(CodeInferenceUnavailable, run.ClassConfig, err.Error())}
			}
			services = append(services, svc)
		}
	}
	return env, services, nil
}

// agentStepDir is the directory, under the sandbox's tmp, of a run_agent
// step's files: named after the run and step, unique per attempt by the
// random part it returns too.
func agentStepDir(tmp string, in RunStepInput) (dir, random string) {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	random = hex.EncodeToString(rnd[:])
	return filepath.Join(tmp, "svc_agent."+unsafePathRE.ReplaceAllString(in.RunID, "_")+"."+
		unsafePathRE.ReplaceAllString(in.Task+"."+in.Step, "_")+"."+random), random
}

// agentCommand prepares a run_agent step's command: a session step's files
// and command (its own, or the harness's template), an exec step's own
// command. It returns the command, the host path of its SVC_OUTPUT file
// (os.DevNull when none is read) and, when the step fails before it runs,
// its result.
func (a *Activities) agentCommand(ctx context.Context, in RunStepInput, h agentconf.Harness, sb sandbox.Sandbox, step *agent.Step,
	files *agent.Files, workdir, sessionKey string, inside func(string) string) (argv []string, outPath string, failed *RunStepResult, err error) {
	ra := in.Action.RunAgent
	outPath = os.DevNull
	if !step.Session {
		if argv, err = manifests.RenderCommand(ra.Command, in.Params); err != nil {
			return nil, "", nil, &templateError{err}
		}
		if len(in.Claimed) > 0 {
			outPath = files.Output
		}
		return argv, outPath, nil, nil
	}
	if f := a.prepareSession(ctx, in, h, step, files, sessionKey, inside); f != nil {
		return nil, "", f, nil
	}
	if len(ra.Command) > 0 {
		// the step's own command: {{param}} placeholders, like exec
		if argv, err = manifests.RenderCommand(ra.Command, in.Params); err != nil {
			return nil, "", nil, &templateError{err}
		}
	} else {
		wd := filepath.Join(sb.Root, workdir)
		if sb.Isolation == sandbox.IsolationBwrap {
			wd = filepath.Join("/workspace", workdir)
		}
		argv = agent.BuildArgv(agent.Command(h, nil, step.SessionID != ""), agent.Placeholders(*step, files.Mapped(inside), wd))
	}
	return argv, files.Output, nil, nil
}

// execAgent runs a run_agent step's command in its sandbox with its
// services, its output going to the step's logs.
func (a *Activities) execAgent(ctx context.Context, in RunStepInput, argv []string, workdir string, env map[string]string, services []sandbox.Service) (sandbox.ExecResult, error) {
	stepKey := in.Task + "/" + in.Step
	stdout := &logWriter{ctx: ctx, store: a.Store, runID: in.RunID, step: stepKey, stream: "stdout"}
	stderr := &logWriter{ctx: ctx, store: a.Store, runID: in.RunID, step: stepKey, stream: "stderr"}
	res, err := a.Sandboxes.Exec(ctx, sandbox.ExecRequest{
		Sandbox: in.Sandbox, Argv: argv, Workdir: workdir, Stdout: stdout, Stderr: stderr,
		Env: env, Timeout: time.Duration(in.TimeoutSeconds) * time.Second, User: in.Action.User, Services: services,
	})
	stdout.flush()
	stderr.flush()
	return res, err
}

// agentResult is the result of a run_agent step whose command ran: its
// exit, claimed outputs and artifacts.
func (a *Activities) agentResult(ctx context.Context, in RunStepInput, h agentconf.Harness, step agent.Step, files agent.Files, res sandbox.ExecResult, outPath string) RunStepResult {
	out := RunStepResult{Outcome: run.Outcome{Status: run.Succeeded}, ExitCode: new(res.ExitCode)}
	switch {
	case res.TimedOut:
		out.Outcome = run.Outcome{Status: run.TimedOut, ErrorCode: run.CodeTimeout, FailureClass: run.ClassConfig,
			ErrorMessage: fmt.Sprintf("step %s exceeded its timeout of %ds", in.Step, in.TimeoutSeconds)}
		return out
	case res.ExitCode != 0:
		out.Outcome = run.Fail(run.CodeAgentFailed, run.ClassAgent, fmt.Sprintf("step %s: harness %s exited with code %d", in.Step, h.Name, res.ExitCode))
		return out
	}
	if len(in.Claimed) > 0 {
		values, oerr := a.agentOutputs(in, step.Session, outPath)
		if oerr != nil {
			code := manifests.OutputErrorCode(oerr)
			if step.Session || code == "" {
				code = run.CodeOutputInvalid
			}
			out.Outcome = run.Fail(code, run.ClassContract, oerr.Error())
			return out
		}
		out.Outputs = values
	}
	a.collectArtifacts(ctx, in, files.Artifacts, &out)
	return out
}

// stepFailure is the result of a step that failed before its command ran.
func stepFailure(code string, class run.FailureClass, format string, args ...any) *RunStepResult {
	return &RunStepResult{Outcome: run.Fail(code, class, fmt.Sprintf(format, args...))}
}

// prepareSession writes a session step's prompt, knowledge, MCP config and
// output schema, and finds the session to resume. A result is a failure.
func (a *Activities) prepareSession(ctx context.Context, in RunStepInput, h agentconf.Harness, step *agent.Step, files *agent.Files, sessionKey string, inside func(string) string) *RunStepResult {
	ra := in.Action.RunAgent
	as := a.agentStore()
	if ra.Session != "" && as != nil {
		id, err := as.GetSandboxSession(ctx, sessionKey, ra.Session)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return stepFailure(run.CodeExecFailed, run.ClassInfra, "look up session %s: %v", ra.Session, err)
		}
		step.SessionID = id
	}
	load, f := a.knowledgeLoader(ctx, in, as)
	if f != nil {
		return f
	}
	binding := ra.Prompt
	if step.SessionID != "" && ra.ResumePrompt != nil {
		binding = ra.ResumePrompt
	}
	if binding != nil {
		if f := writePrompt(in, binding, files, load); f != nil {
			return f
		}
	}
	if len(ra.Knowledge) > 0 {
		var items []agent.Knowledge
		for _, ref := range ra.Knowledge {
			k, f := load(ref.Slug)
			if f != nil {
				return f
			}
			items = append(items, k)
		}
		if err := files.WriteKnowledge(items, inside); err != nil {
			return stepFailure(sandbox.CodeFileOperation, run.ClassInfra, "write the knowledge dir: %v", err)
		}
	}
	if len(ra.MCP) > 0 {
		if err := files.WriteMCPConfig(ra.MCP); err != nil {
			return stepFailure(sandbox.CodeFileOperation, run.ClassInfra, "write the MCP config: %v", err)
		}
	}
	if len(in.Claimed) > 0 {
		return writeOutputSchema(in, files)
	}
	return nil
}

// knowledgeLoader returns a function loading a knowledge item in the
// version the run resolved when it started.
func (a *Activities) knowledgeLoader(ctx context.Context, in RunStepInput, as AgentStore) (func(slug string) (agent.Knowledge, *RunStepResult), *RunStepResult) {
	var versions []store.KnowledgeVersionRef
	if len(manifests.JobKnowledge(&manifests.JobManifest{Run: manifests.RunSection{Tasks: []manifests.Task{{Steps: []manifests.Step{in.Action}}}}})) > 0 {
		r, err := a.Store.GetJobRun(ctx, in.RunID)
		if err != nil {
			return nil, stepFailure(run.CodeExecFailed, run.ClassInfra, "load the run's knowledge versions: %v", err)
		}
		versions = r.KnowledgeVersions
	}
	return func(slug string) (agent.Knowledge, *RunStepResult) {
		for _, v := range versions {
			if v.Slug != slug || as == nil {
				continue
			}
			kv, err := as.GetKnowledgeVersion(ctx, slug, v.VersionNumber)
			if err != nil {
				return agent.Knowledge{}, stepFailure(run.CodeKnowledgeNotFound, run.ClassConfig, "knowledge %s version %d: %v", slug, v.VersionNumber, err)
			}
			return agent.Knowledge{Slug: slug, VersionID: kv.ID, VersionNumber: kv.VersionNumber, ContentHash: kv.ContentHash, Format: kv.Format, Body: kv.Body}, nil
		}
		return agent.Knowledge{}, stepFailure(run.CodeKnowledgeNotFound, run.ClassConfig, "knowledge item %q did not resolve when the run started", slug)
	}, nil
}

// writePrompt writes a session step's prompt: a literal rendered with the
// run's params, or a knowledge item's body.
func writePrompt(in RunStepInput, binding *manifests.Binding, files *agent.Files, load func(string) (agent.Knowledge, *RunStepResult)) *RunStepResult {
	var text string
	if lit, ok := manifests.LiteralText(binding); ok {
		rendered, err := manifests.Render(lit, in.Params)
		if err != nil {
			return stepFailure(run.CodeTemplateInvalid, run.ClassConfig, "prompt: %v", err)
		}
		text = rendered
	} else {
		k, f := load(binding.Slug)
		if f != nil {
			return f
		}
		text = renderKnown(k.Body, in.Params)
	}
	if err := files.WritePrompt(text); err != nil {
		return stepFailure(sandbox.CodeFileOperation, run.ClassInfra, "write the prompt file: %v", err)
	}
	return nil
}

// writeOutputSchema writes the schema of the outputs a session step claims.
func writeOutputSchema(in RunStepInput, files *agent.Files) *RunStepResult {
	from := map[string]string{}
	if in.Action.Outputs != nil {
		for k, c := range in.Action.Outputs.Claims {
			from[k] = c.From
		}
	}
	if err := files.WriteOutputSchema(agent.OutputSchema(in.Claimed, from, in.OutputSpecs)); err != nil {
		return stepFailure(sandbox.CodeFileOperation, run.ClassInfra, "write the output schema: %v", err)
	}
	return nil
}

// renderKnown substitutes the {{param}} placeholders of a knowledge text
// that name params; others are left as written.
func renderKnown(text string, params map[string]any) string {
	for _, name := range manifests.Placeholders(text) {
		if v, ok := params[name]; ok {
			text = regexp.MustCompile(`\{\{\s*`+regexp.QuoteMeta(name)+`\s*\}\}`).ReplaceAllLiteralString(text, manifests.Stringify(v))
		}
	}
	return text
}

// agentOutputs reads a step's outputs: key=value lines (exec mode) or one
// JSON object (session mode), checked against the claimed outputs.
func (a *Activities) agentOutputs(in RunStepInput, session bool, path string) (map[string]any, error) {
	if !session {
		data, err := readOutputFile(path, manifests.MaxOutputFileBytes)
		if err != nil {
			return nil, err
		}
		return parseClaimedOutputs(data, in)
	}
	data, err := agent.ReadLimited(path, agent.MaxOutputBytes)
	if err != nil {
		return nil, &agent.OutputError{Msg: "$SVC_OUTPUT: " + err.Error()}
	}
	_, statErr := os.Lstat(path)
	lines, raw, err := agent.ParseOutputObject(data, statErr == nil)
	if err != nil {
		return nil, err
	}
	for key, val := range raw {
		if spec, ok := in.OutputSpecs[key]; ok && spec.Type == manifests.TypeString && !strings.HasPrefix(string(val), `"`) {
			return nil, &manifests.OutputError{Code: run.CodeOutputInvalid, Key: key, Msg: "must be a JSON string in the session's output object"}
		}
	}
	values, err := parseClaimedOutputs(lines, in)
	if err != nil {
		return nil, err
	}
	for _, key := range in.Claimed {
		spec := in.OutputSpecs[key]
		if _, ok := values[key]; !ok && (spec.Required == nil || *spec.Required) {
			return nil, &manifests.OutputError{Code: run.CodeOutputInvalid, Key: key, Msg: "is required but missing from the session's output object"}
		}
	}
	return values, nil
}

// recordSessionAndUsage records the session id the harness wrote (on the
// timeline entry, and with the sandbox for a named session) and prices the
// step's usage lines onto its timeline entry.
func (a *Activities) recordSessionAndUsage(ctx context.Context, in RunStepInput, h agentconf.Harness, step agent.Step, files agent.Files, sessionKey string) {
	ctx = context.WithoutCancel(ctx)
	ra := in.Action.RunAgent
	id, err := agent.ReadSessionID(files.SessionFile)
	if err != nil && a.Logger != nil {
		a.Logger.Warn("read session file", slog.String("run_id", in.RunID), slog.String("error", err.Error()))
	}
	if id == "" {
		id = step.SessionID
	}
	if id != "" && ra.Session != "" {
		if as := a.agentStore(); as != nil {
			if err := as.PutSandboxSession(ctx, sessionKey, ra.Session, id); err != nil && a.Logger != nil {
				a.Logger.Warn("record session", slog.String("run_id", in.RunID), slog.String("error", err.Error()))
			}
		}
	}
	data, rerr := agent.ReadLimited(files.Usage, agent.MaxSideFileBytes)
	usage, uerr := agent.ParseUsage(data)
	priced := agentconf.PriceUsage(usage, step.Model, h.Model)
	a.updateStep(ctx, in, func(e *store.StepTimelineEntry) {
		if id != "" {
			e.AgentSessionID = &id
		}
		if ra.ModelProvider == ModelProviderSvcInference {
			return // its usage and cost are what the gateway measured (api/gateway.go), not what the agent reports
		}
		e.Usage = nil
		for _, u := range usage {
			if u.Model == "" {
				u.Model = step.Model
			}
			e.Usage = append(e.Usage, store.AgentUsage{Model: u.Model, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens})
		}
		e.InferenceCostCents = priced.Cents()
		note := func(k string, v any) {
			if e.ErrorDetails == nil {
				e.ErrorDetails = map[string]any{}
			}
			e.ErrorDetails[k] = v
		}
		if len(priced.Unpriced) > 0 {
			note("unpriced_models", priced.Unpriced)
			note("inference_cost_note", fmt.Sprintf("no price is configured for %s: their usage costs 0", strings.Join(priced.Unpriced, ", ")))
		}
		if err := errors.Join(rerr, uerr); err != nil {
			note("usage_error", err.Error())
		}
	})
}

// inferenceCents prices every run_agent usage line of a run's timeline at
// its harness's model prices, rounded up to whole cents once per run.
func (a *Activities) inferenceCents(m *manifests.JobManifest, timeline []store.StepTimelineEntry) int64 {
	var micro int64
	for _, e := range timeline {
		if len(e.Usage) == 0 || stepProvider(m, e.TaskName, e.Name) == ModelProviderSvcInference {
			continue // a svc_inference step's usage is what the gateway measured (gateway.go)
		}
		h, ok := a.Agents.Harness(stepHarness(m, e.TaskName, e.Name))
		if !ok {
			continue
		}
		lines := make([]agentconf.Usage, len(e.Usage))
		for i, u := range e.Usage {
			lines[i] = agentconf.Usage{Model: u.Model, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens}
		}
		micro += agentconf.PriceUsage(lines, h.DefaultModel, h.Model).MicroCents
		if micro > math.MaxInt64/2 {
			break
		}
	}
	return agentconf.CentsRoundedUp(micro)
}

func stepHarness(m *manifests.JobManifest, task, step string) string {
	for _, t := range m.Run.Tasks {
		if t.Name != task {
			continue
		}
		for j, s := range t.Steps {
			if manifests.StepName(t, j) == step && s.RunAgent != nil {
				return s.RunAgent.Harness
			}
		}
	}
	return ""
}
