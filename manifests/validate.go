package manifests

import (
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"
	_ "time/tzdata" // IANA time zones resolve on any machine

	"github.com/robfig/cron/v3"
)

var (
	nameRE       = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	identRE      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	webhookRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._~/-]*$`)
	cronParser   = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)
	harnessesAll = []string{"agent_a", "agent_b", "agent_c", "agent_d", "custom"}
)

// Harnesses that can run an agent session.
var sessionHarnesses = []string{"agent_a", "agent_b", "agent_c", "agent_d"}

type validator struct{ ps Problems }

func (v *validator) add(path, format string, args ...any) {
	v.ps = append(v.ps, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (v *validator) result() Problems {
	if len(v.ps) == 0 {
		return nil
	}
	v.ps.Sort()
	return v.ps
}

func oneOf(s string, allowed ...string) bool {
	for _, a := range allowed {
		if s == a {
			return true
		}
	}
	return false
}

func at(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// ValidateCron checks a standard 5-field cron expression (minute hour
// day-of-month month day-of-week). Descriptors such as @daily or @every 1h and
// TZ= prefixes are rejected: the time zone is a field of its own.
func ValidateCron(expr string) error {
	if strings.TrimSpace(expr) == "" {
		return fmt.Errorf("cron expression is required")
	}
	if f := strings.Fields(expr); len(f) != 5 || strings.HasPrefix(f[0], "@") || strings.Contains(f[0], "=") {
		return fmt.Errorf("invalid cron expression %q: want 5 fields (minute hour day-of-month month day-of-week)", expr)
	}
	if _, err := cronParser.Parse(expr); err != nil {
		return fmt.Errorf("invalid cron expression %q: %v", expr, err)
	}
	return nil
}

// ValidateTimezone checks an IANA time zone name.
func ValidateTimezone(tz string) error {
	if tz == "" {
		return nil
	}
	if _, err := time.LoadLocation(tz); err != nil || tz == "Local" {
		return fmt.Errorf("unknown time zone %q (an IANA name such as Europe/Paris)", tz)
	}
	return nil
}

// ParseDuration reads a positive Go duration string such as "90s" or "2h".
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: a Go duration such as \"90s\", \"30m\" or \"2h\"", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("duration %q must be positive", s)
	}
	return d, nil
}

// CheckName reports a manifest whose name differs from the name in its path
// (the deploy URL or the job directory).
func CheckName(field, pathName, manifestName string) Problems {
	if pathName != manifestName {
		return Problems{{Path: field, Message: fmt.Sprintf("name %q does not match the path name %q", manifestName, pathName)}}
	}
	return nil
}

// ValidateJob reports every problem of a job manifest with its location.
func ValidateJob(m *JobManifest) Problems {
	v := &validator{}
	if strings.TrimSpace(m.Job.Name) == "" {
		v.add("job.name", "is required")
	} else if !nameRE.MatchString(m.Job.Name) {
		v.add("job.name", "%q is not a valid name (letters, digits, '.', '_', '-'; starting with a letter or digit)", m.Job.Name)
	}
	for _, name := range sortedKeys(m.Job.Params) {
		v.param("job.params."+name, name, m.Job.Params[name])
	}
	v.run(m)
	for _, name := range sortedKeys(m.Outputs) {
		v.output("outputs."+name, name, m.Outputs[name])
	}
	v.claims(m)
	v.placeholders(m)
	if s := m.Schedule; s != nil {
		if err := ValidateCron(s.Cron); err != nil {
			v.add("schedule.cron", "%v", err)
		}
		if err := ValidateTimezone(s.Timezone); err != nil {
			v.add("schedule.timezone", "%v", err)
		}
		for _, name := range sortedKeys(m.Job.Params) {
			p := m.Job.Params[name]
			if p.Default == nil {
				v.add("job.params."+name, "a job with a schedule needs a default for every param")
			}
		}
	}
	if ver := m.Verification; ver != nil && ver.Gate != nil && ver.Gate.MinPassRate != nil {
		if r := *ver.Gate.MinPassRate; r < 0 || r > 1 {
			v.add("verification.gate.min_pass_rate", "must be between 0 and 1")
		}
	}
	if le := CheckJobLimits(m); le != nil {
		v.ps = append(v.ps, le.Problem())
	}
	return v.result()
}

func (v *validator) param(p, name string, s JobParamSpec) {
	if !identRE.MatchString(name) {
		v.add(p, "param name must be an identifier (letters, digits, underscores)")
	}
	if name == ReservedRunID {
		v.add(p, "%q is reserved", ReservedRunID)
	}
	if !validType(s.Type) {
		v.add(p+".type", "must be one of string, integer, number, boolean, array")
		return
	}
	v.items(p, s.Type, s.Items, false)
	if s.Pattern != "" {
		if _, err := regexp.Compile(s.Pattern); err != nil {
			v.add(p+".pattern", "does not compile: %v", err)
		}
	}
	for i, e := range s.Enum {
		item := s.Type
		if s.Type == TypeArray {
			item = s.Items
		}
		if item != "" {
			if err := checkType(item, "", e); err != nil {
				v.add(at(p+".enum", i), "%v", err)
			}
		}
	}
	if s.Required != nil && *s.Required && s.Default != nil {
		v.add(p+".default", "a required param cannot have a default")
	}
	if s.Default != nil {
		if err := CheckValue(s.Spec(), s.Default); err != nil {
			v.add(p+".default", "%v", err)
		}
	}
}

func (v *validator) items(p string, t, items ParamType, required bool) {
	switch {
	case t == TypeArray && items == "" && required:
		v.add(p+".items", "is required when type is array")
	case t != TypeArray && items != "":
		v.add(p+".items", "only applies when type is array")
	case items != "" && !scalarTypes[items]:
		v.add(p+".items", "must be one of string, integer, number, boolean")
	}
}

func (v *validator) output(p, name string, o JobOutputSpec) {
	if !identRE.MatchString(name) {
		v.add(p, "output key must be an identifier (letters, digits, underscores)")
	}
	if !validType(o.Type) {
		v.add(p+".type", "must be one of string, integer, number, boolean, array")
		return
	}
	v.items(p, o.Type, o.Items, true)
	if o.Reduce != "" && !oneOf(o.Reduce, ReduceOne, ReduceLast, ReduceCollect, ReduceGather) {
		v.add(p+".reduce", "must be one of one, last, collect, gather")
	}
	if o.Reduce == ReduceCollect && o.Type == TypeArray {
		v.add(p+".reduce", "collect cannot be combined with type array (use gather)")
	}
	for i, e := range o.Enum {
		item := o.Type
		if o.Type == TypeArray {
			item = o.Items
		}
		if scalarTypes[item] {
			if err := checkType(item, "", e); err != nil {
				v.add(at(p+".enum", i), "%v", err)
			}
		}
	}
}

func (v *validator) run(m *JobManifest) {
	r := m.Run
	if r.Concurrency != nil && *r.Concurrency < 1 {
		v.add("run.concurrency", "must be at least 1")
	}
	if r.Timeout != "" {
		if _, err := ParseDuration(r.Timeout); err != nil {
			v.add("run.timeout", "%v", err)
		}
	}
	v.workdir("run.workdir", r.Workdir)
	if r.Sandbox != nil {
		v.sandbox("run.sandbox", r.Sandbox)
	}
	if len(r.Tasks) == 0 {
		v.add("run.tasks", "at least one task is required")
	}
	taskNames := map[string]bool{}
	for i, t := range r.Tasks {
		tp := at("run.tasks", i)
		switch {
		case strings.TrimSpace(t.Name) == "":
			v.add(tp+".name", "is required")
		case taskNames[t.Name]:
			v.add(tp+".name", "duplicate task name %q", t.Name)
		}
		taskNames[t.Name] = true
		if t.Sandbox != nil {
			v.sandbox(tp+".sandbox", t.Sandbox)
		}
		if len(t.Steps) == 0 {
			v.add(tp+".steps", "at least one step is required")
		}
		stepNames := map[string]bool{}
		for j, s := range t.Steps {
			sp := at(tp+".steps", j)
			name := StepName(t, j)
			if s.Name != "" && strings.TrimSpace(s.Name) == "" {
				v.add(sp+".name", "must not be blank")
			} else if stepNames[name] {
				v.add(sp+".name", "duplicate step name %q", name)
			}
			stepNames[name] = true
			v.step(sp, s, m.Outputs)
		}
	}
}

func (v *validator) step(p string, s Step, outputs map[string]JobOutputSpec) {
	if s.Upload != nil {
		v.add(p+".upload", "upload is not implemented; it must not be authored")
	}
	if s.Download != nil {
		v.add(p+".download", "download is not implemented; it must not be authored")
	}
	n := 0
	for _, set := range []bool{s.Exec != nil, s.RunAgent != nil, s.Snapshot != nil, s.Pause != nil, s.Resume != nil, s.Delete != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		v.add(p, "exactly one of exec, run_agent, snapshot, pause, resume, delete must be set")
	}
	for key, b := range map[string]*bool{"pause": s.Pause, "resume": s.Resume, "delete": s.Delete} {
		if b != nil && !*b {
			v.add(p+"."+key, "must be true when set")
		}
	}
	if s.Timeout != nil && *s.Timeout < 1 {
		v.add(p+".timeout", "must be at least 1 second")
	}
	v.workdir(p+".workdir", s.Workdir)
	if s.Exec != nil {
		if len(s.Exec) == 0 || strings.TrimSpace(s.Exec[0]) == "" {
			v.add(p+".exec", "must name a command")
		}
	}
	if s.Snapshot != nil && strings.TrimSpace(s.Snapshot.Name) == "" {
		v.add(p+".snapshot.name", "is required")
	}
	if s.RunAgent != nil {
		v.runAgent(p+".run_agent", s.RunAgent)
	}
	if s.Outputs != nil {
		if s.Exec == nil && s.RunAgent == nil {
			v.add(p+".outputs", "only exec and run_agent steps can claim outputs")
		}
		for _, k := range s.Outputs.Keys() {
			if _, ok := outputs[k]; !ok {
				v.add(p+".outputs."+k, "claims output %q, which the job does not declare in outputs", k)
			}
		}
	}
}

func (v *validator) runAgent(p string, a *RunAgent) {
	switch a.Mode {
	case AgentModeExec:
		if !oneOf(a.Harness, harnessesAll...) {
			v.add(p+".harness", "must be one of %s", strings.Join(harnessesAll, ", "))
		}
		if len(a.Command) == 0 {
			v.add(p+".command", "is required in exec mode")
		}
		for key, set := range map[string]bool{"effort": a.Effort != "", "knowledge": a.Knowledge != nil, "mcp": a.MCP != nil,
			"model_provider": a.ModelProvider != "", "prompt": a.Prompt != nil, "resume_prompt": a.ResumePrompt != nil, "session": a.Session != ""} {
			if set {
				v.add(p+"."+key, "only applies in session mode")
			}
		}
	case AgentModeSession:
		if !oneOf(a.Harness, sessionHarnesses...) {
			v.add(p+".harness", "must be one of %s in session mode", strings.Join(sessionHarnesses, ", "))
		}
	default:
		v.add(p+".mode", "must be exec or session")
	}
	if a.Effort != "" && a.Model == "" {
		v.add(p+".effort", "effort requires model")
	}
	if a.ModelProvider != "" && !oneOf(a.ModelProvider, "svc", "svc_inference") {
		v.add(p+".model_provider", "must be svc or svc_inference")
	}
	for i, k := range a.Knowledge {
		if strings.TrimSpace(k.Slug) == "" {
			v.add(at(p+".knowledge", i)+".slug", "is required")
		}
	}
	seen := map[string]bool{}
	for i, s := range a.MCP {
		ip := at(p+".mcp", i)
		if strings.TrimSpace(s.Key) == "" {
			v.add(ip+".key", "is required")
		} else if seen[s.Key] {
			v.add(ip+".key", "duplicate MCP key %q", s.Key)
		}
		seen[s.Key] = true
		if strings.TrimSpace(s.URL) == "" {
			v.add(ip+".url", "is required")
		} else if msg := checkMCPURL(s.URL); msg != "" {
			v.add(ip+".url", "%s", msg)
		}
	}
	v.binding(p+".prompt", a.Prompt)
	v.binding(p+".resume_prompt", a.ResumePrompt)
}

func (v *validator) binding(p string, b *Binding) {
	if b == nil {
		return
	}
	switch b.Type {
	case BindingKnowledge:
		if strings.TrimSpace(b.Slug) == "" {
			v.add(p+".slug", "is required for a knowledge binding")
		}
		if b.Value != nil {
			v.add(p+".value", "only applies to a literal binding")
		}
	case BindingLiteral:
		if b.Value == nil {
			v.add(p+".value", "is required for a literal binding")
		}
		if b.Slug != "" {
			v.add(p+".slug", "only applies to a knowledge binding")
		}
	default:
		v.add(p+".type", "must be knowledge or literal")
	}
}

// workdir rejects absolute paths and paths that climb out of the sandbox.
func (v *validator) workdir(p, dir string) {
	if dir == "" {
		return
	}
	if strings.HasPrefix(dir, "/") {
		v.add(p, "must be relative to the sandbox workspace")
		return
	}
	if c := path.Clean(dir); c == ".." || strings.HasPrefix(c, "../") {
		v.add(p, "%q escapes the sandbox workspace", dir)
	}
}

func (v *validator) sandbox(p string, s *SandboxConfig) {
	mode := s.Mode
	if mode == "" {
		mode = SandboxProvision
	}
	if !oneOf(mode, SandboxProvision, SandboxEnsure, SandboxReuse) {
		v.add(p+".mode", "must be one of provision, ensure, reuse")
	}
	if (mode == SandboxEnsure || mode == SandboxReuse) && strings.TrimSpace(s.Name) == "" {
		v.add(p+".name", "is required when mode is %s", mode)
	}
	if s.Name != "" {
		bare := placeholderRE.ReplaceAllString(s.Name, "x")
		if !nameRE.MatchString(bare) {
			v.add(p+".name", "%q is not a valid sandbox name (letters, digits, '.', '_', '-')", s.Name)
		}
	}
	if (mode == SandboxProvision || mode == SandboxEnsure) && strings.TrimSpace(s.Image) == "" {
		v.add(p+".image", "is required when mode is %s", mode)
	}
	for key, n := range map[string]*int{"vcpus": s.Vcpus, "memory_mb": s.MemoryMB, "disk_gb": s.DiskGB} {
		if n != nil && *n < 1 {
			v.add(p+"."+key, "must be at least 1")
		}
	}
	if in := s.Init; in != nil {
		switch in.Type {
		case "custom":
			for i, c := range in.Capabilities {
				if !oneOf(c, "ssh", "docker") {
					v.add(at(p+".init.capabilities", i), "must be ssh or docker")
				}
			}
		case "full", "minimal":
			if in.AwaitReady != nil {
				v.add(p+".init.await_ready", "only applies to init type custom")
			}
			if in.Capabilities != nil {
				v.add(p+".init.capabilities", "only applies to init type custom")
			}
		default:
			v.add(p+".init.type", "must be one of custom, full, minimal")
		}
	}
	v.workdir(p+".workdir", s.Workdir)
	for i, src := range s.Sources {
		sp := at(p+".sources", i)
		if strings.TrimSpace(src.RepoURL) == "" {
			v.add(sp+".repo_url", "is required")
		}
		v.workdir(sp+".target_path", src.TargetPath)
	}
	for i, sc := range s.SetupScripts {
		if strings.TrimSpace(sc.Script) == "" {
			v.add(at(p+".setup_scripts", i)+".script", "is required")
		}
	}
	if l := s.Lifecycle; l != nil {
		if l.AutoResume != "" && !oneOf(l.AutoResume, "never", "on_activity") {
			v.add(p+".lifecycle.auto_resume", "must be never or on_activity")
		}
		for key, n := range map[string]*int{"delete_after": l.DeleteAfter, "pause_after": l.PauseAfter, "pause_after_idle": l.PauseAfterIdle} {
			if n != nil && *n < 0 {
				v.add(p+".lifecycle."+key, "must not be negative (seconds)")
			}
		}
	}
	for k := range s.Env {
		if !identRE.MatchString(k) {
			v.add(p+".env."+k, "environment variable names are identifiers")
		}
	}
}

// claims checks the output-claiming rules of SPEC.
func (v *validator) claims(m *JobManifest) {
	if len(m.Outputs) == 0 {
		for i, t := range m.Run.Tasks {
			for j, s := range t.Steps {
				if s.Outputs != nil && len(s.Outputs.Claims) > 0 {
					v.add(at(at("run.tasks", i)+".steps", j)+".outputs", "the job declares no outputs")
				}
			}
		}
		return
	}
	claims := Claims(m)
	count := map[string]int{}
	tasksClaiming := map[string]int{}
	for _, t := range m.Run.Tasks {
		inTask := map[string]bool{}
		for _, keys := range claims[t.Name] {
			for _, k := range keys {
				count[k]++
				inTask[k] = true
			}
		}
		for k := range inTask {
			tasksClaiming[k]++
		}
	}
	for _, name := range sortedKeys(m.Outputs) {
		o := m.Outputs[name]
		p := "outputs." + name
		required := o.Required == nil || *o.Required
		reduce := o.Reduce
		if reduce == "" {
			reduce = ReduceOne
		}
		switch {
		case reduce == ReduceOne && count[name] != 1:
			v.add(p, "reduce one needs exactly one claiming step, found %d", count[name])
		case required && count[name] == 0:
			v.add(p, "required output is not claimed by any step")
		case reduce == ReduceCollect && required && tasksClaiming[name] != len(m.Run.Tasks):
			v.add(p, "a required collect output must be claimed by every task (%d of %d do)", tasksClaiming[name], len(m.Run.Tasks))
		}
	}
}

// placeholders checks that every {{name}} in the run section names a declared
// param or run_id.
func (v *validator) placeholders(m *JobManifest) {
	check := func(p, s string) {
		for _, name := range Placeholders(s) {
			if name == ReservedRunID {
				continue
			}
			if _, ok := m.Job.Params[name]; !ok {
				v.add(p, "unknown placeholder {{%s}}: declare it in job.params", name)
			}
		}
	}
	checkSandbox := func(p string, s *SandboxConfig) {
		if s == nil {
			return
		}
		check(p+".name", s.Name)
		check(p+".workdir", s.Workdir)
		for _, k := range sortedKeys(s.Env) {
			check(p+".env."+k, s.Env[k])
		}
		for i, sc := range s.SetupScripts {
			check(at(p+".setup_scripts", i)+".script", sc.Script)
		}
		for i, src := range s.Sources {
			check(at(p+".sources", i)+".repo_url", src.RepoURL)
			check(at(p+".sources", i)+".branch", src.Branch)
		}
	}
	check("run.workdir", m.Run.Workdir)
	checkSandbox("run.sandbox", m.Run.Sandbox)
	for i, t := range m.Run.Tasks {
		tp := at("run.tasks", i)
		checkSandbox(tp+".sandbox", t.Sandbox)
		for j, s := range t.Steps {
			sp := at(tp+".steps", j)
			check(sp+".workdir", s.Workdir)
			for k, e := range s.Exec {
				check(at(sp+".exec", k), e)
			}
			if s.RunAgent != nil {
				for k, e := range s.RunAgent.Command {
					check(at(sp+".run_agent.command", k), e)
				}
				if text, ok := LiteralText(s.RunAgent.Prompt); ok {
					check(sp+".run_agent.prompt.value", text)
				}
				if text, ok := LiteralText(s.RunAgent.ResumePrompt); ok {
					check(sp+".run_agent.resume_prompt.value", text)
				}
			}
			if s.Snapshot != nil {
				check(sp+".snapshot.name", s.Snapshot.Name)
			}
		}
	}
}

// ---------------------------------------------------------------- lines

// ValidateLine reports every problem of a line manifest with its location.
// Whether stage jobs exist is checked separately (CheckLineJobs).
func ValidateLine(m *LineManifest) Problems {
	v := &validator{}
	if strings.TrimSpace(m.Line.Name) == "" {
		v.add("line.name", "is required")
	} else if !nameRE.MatchString(m.Line.Name) {
		v.add("line.name", "%q is not a valid name (letters, digits, '.', '_', '-'; starting with a letter or digit)", m.Line.Name)
	}
	stages := v.lineStages(m.Stages)
	transitions := map[string]bool{}
	for _, t := range m.Transitions {
		transitions[t.ID] = true
	}
	v.trigger(&m.Trigger, stages, transitions)
	seen := map[string]bool{}
	agenticFrom := map[string]bool{}
	for i, t := range m.Transitions {
		p := at("transitions", i)
		switch {
		case strings.TrimSpace(t.ID) == "":
			v.add(p+".id", "is required")
		case seen[t.ID]:
			v.add(p+".id", "duplicate transition id %q", t.ID)
		}
		seen[t.ID] = true
		v.stageRef(p+".from", t.From, stages)
		switch t.Type {
		case TransitionConditional:
			v.conditionalTransition(p, t, stages, transitions)
		case TransitionAgentic:
			v.agenticTransition(p, t, stages)
			if agenticFrom[t.From] {
				v.add(p+".from", "stage %q already has an agentic transition", t.From)
			}
			agenticFrom[t.From] = true
		default:
			v.add(p+".type", "must be conditional or agentic")
		}
	}
	if m.Agent != nil {
		v.binding("agent.instructions", m.Agent.Instructions)
	}
	if m.Limits != nil {
		v.lineLimits(m.Limits)
	}
	return v.result()
}

// lineStages checks a line's stages and returns their ids.
func (v *validator) lineStages(list []LineStage) map[string]bool {
	stages := map[string]bool{}
	if len(list) == 0 {
		v.add("stages", "manifest has no stages: at least one stage is required")
	}
	for i, s := range list {
		p := at("stages", i)
		switch {
		case strings.TrimSpace(s.ID) == "":
			v.add(p+".id", "is required")
		case !nameRE.MatchString(s.ID):
			v.add(p+".id", "%q is not a valid stage id", s.ID)
		case stages[s.ID]:
			v.add(p+".id", "duplicate stage id %q", s.ID)
		}
		stages[s.ID] = true
		if strings.TrimSpace(s.Job) == "" {
			v.add(p+".job", "is required")
		}
		if s.MaxAttempts != nil && *s.MaxAttempts < 1 {
			v.add(p+".max_attempts", "must be at least 1")
		}
	}
	return stages
}

// conditionalTransition checks the conditional transition t at p.
func (v *validator) conditionalTransition(p string, t Transition, stages, transitions map[string]bool) {
	v.stageRef(p+".to", t.To, stages)
	if t.When == nil {
		v.add(p+".when", "is required for a conditional transition")
	} else {
		v.condition(p+".when", t.When, stages, transitions, true)
	}
	if t.MaxIterations != nil && *t.MaxIterations < 1 {
		v.add(p+".max_iterations", "must be at least 1")
	}
	v.bindings(p+".params", t.Params, stages)
	if t.Instructions != nil {
		v.add(p+".instructions", "only applies to an agentic transition")
	}
	if t.Options != nil {
		v.add(p+".options", "only applies to an agentic transition")
	}
}

// agenticTransition checks the agentic transition t at p but for its from
// stage (one agentic transition per stage: ValidateLine checks it).
func (v *validator) agenticTransition(p string, t Transition, stages map[string]bool) {
	if t.Instructions == nil {
		v.add(p+".instructions", "is required for an agentic transition")
	} else {
		v.binding(p+".instructions", t.Instructions)
	}
	if len(t.Options) == 0 {
		v.add(p+".options", "an agentic transition needs at least one option")
	}
	names := map[string]bool{}
	for j, o := range t.Options {
		op := at(p+".options", j)
		switch {
		case strings.TrimSpace(o.Name) == "":
			v.add(op+".name", "is required")
		case names[o.Name]:
			v.add(op+".name", "duplicate option name %q", o.Name)
		}
		names[o.Name] = true
		v.stageRef(op+".to", o.To, stages)
		v.bindings(op+".params", o.Params, stages)
	}
	for key, set := range map[string]bool{"to": t.To != "", "when": t.When != nil, "max_iterations": t.MaxIterations != nil, "params": t.Params != nil} {
		if set {
			v.add(p+"."+key, "only applies to a conditional transition")
		}
	}
}

// lineLimits checks a line's limits.
func (v *validator) lineLimits(l *LineLimits) {
	if l.MaxIterations != nil && *l.MaxIterations < 1 {
		v.add("limits.max_iterations", "must be at least 1")
	}
	if l.BudgetUSD != nil && l.BudgetUSD.Cents < 0 {
		v.add("limits.budget_usd", "must not be negative")
	}
	if l.Timeout != "" {
		if _, err := ParseDuration(l.Timeout); err != nil {
			v.add("limits.timeout", "%v", err)
		}
	}
}

func (v *validator) stageRef(p, id string, stages map[string]bool) {
	switch {
	case strings.TrimSpace(id) == "":
		v.add(p, "is required")
	case !stages[id]:
		v.add(p, "unknown stage %q", id)
	}
}

func (v *validator) bindings(p string, bs map[string]ParamBinding, stages map[string]bool) {
	for _, name := range sortedKeys(bs) {
		b := bs[name]
		bp := p + "." + name
		switch b.Type {
		case BindInput:
			if strings.TrimSpace(b.Name) == "" {
				v.add(bp+".name", "is required for an input binding")
			}
			if b.Stage != "" || b.Value != nil {
				v.add(bp, "an input binding has only name")
			}
		case BindLiteral:
			if b.Value == nil {
				v.add(bp+".value", "is required for a literal binding")
			}
			if b.Stage != "" || b.Name != "" {
				v.add(bp, "a literal binding has only value")
			}
		case BindOutput:
			if strings.TrimSpace(b.Name) == "" {
				v.add(bp+".name", "is required for an output binding")
			}
			v.stageRef(bp+".stage", b.Stage, stages)
			if b.Value != nil {
				v.add(bp+".value", "only applies to a literal binding")
			}
		default:
			v.add(bp+".type", "must be one of input, literal, output")
		}
	}
}

// condition checks a condition tree. inLine is false for trigger filters,
// where only literal and trigger operands have a value.
func (v *validator) condition(p string, c *Condition, stages, transitions map[string]bool, inLine bool) {
	extra := func(allowed ...string) {
		fields := map[string]bool{"conditions": c.Conditions != nil, "condition": c.Condition != nil,
			"left": c.Left != nil, "right": c.Right != nil, "operand": c.Operand != nil}
		for _, k := range sortedKeys(fields) {
			if fields[k] && !oneOf(k, allowed...) {
				v.add(p+"."+k, "does not apply to op %s", c.Op)
			}
		}
	}
	switch c.Op {
	case OpAll, OpAny:
		if len(c.Conditions) == 0 {
			v.add(p+".conditions", "op %s needs at least one condition", c.Op)
		}
		for i := range c.Conditions {
			v.condition(at(p+".conditions", i), &c.Conditions[i], stages, transitions, inLine)
		}
		extra("conditions")
	case OpNot:
		if c.Condition == nil {
			v.add(p+".condition", "op not needs a condition")
		} else {
			v.condition(p+".condition", c.Condition, stages, transitions, inLine)
		}
		extra("condition")
	case OpAlways:
		extra()
	case OpEq, OpNe, OpContains, OpNotContains:
		if c.Left == nil {
			v.add(p+".left", "op %s needs left", c.Op)
		} else {
			v.operand(p+".left", c.Left, stages, transitions, inLine)
		}
		if c.Right == nil {
			v.add(p+".right", "op %s needs right", c.Op)
		} else {
			v.operand(p+".right", c.Right, stages, transitions, inLine)
		}
		extra("left", "right")
	case OpExists, OpMissing, OpTruthy, OpFalsy:
		if c.Operand == nil {
			v.add(p+".operand", "op %s needs operand", c.Op)
		} else {
			v.operand(p+".operand", c.Operand, stages, transitions, inLine)
		}
		extra("operand")
	case "":
		v.add(p+".op", "is required")
	default:
		v.add(p+".op", "unknown op %q", c.Op)
	}
}

func (v *validator) operand(p string, o *Operand, stages, transitions map[string]bool, inLine bool) {
	fields := map[string]bool{"value": o.Value != nil, "path": o.Path != "", "stage": o.Stage != "", "id": o.ID != ""}
	var allowed []string
	switch o.Type {
	case OperandLiteral:
		allowed = []string{"value"}
		if o.Value == nil {
			v.add(p+".value", "is required for a literal operand")
		}
	case OperandStage, OperandTransition:
		if !inLine {
			v.add(p+".type", "a %s operand has no value in a trigger filter", o.Type)
			return
		}
		if strings.TrimSpace(o.Path) == "" {
			v.add(p+".path", "is required")
		} else if err := checkPath(o.Path); err != nil {
			v.add(p+".path", "%v", err)
		}
		if o.Type == OperandStage {
			allowed = []string{"path", "stage"}
			if o.Stage != "" && !stages[o.Stage] {
				v.add(p+".stage", "unknown stage %q", o.Stage)
			}
		} else {
			allowed = []string{"path", "id"}
			switch {
			case strings.TrimSpace(o.ID) == "":
				v.add(p+".id", "is required")
			case !transitions[o.ID]:
				v.add(p+".id", "unknown transition %q", o.ID)
			}
		}
	case OperandTrigger:
		allowed = []string{"path"}
		if strings.TrimSpace(o.Path) == "" {
			v.add(p+".path", "is required")
		} else if err := checkPath(o.Path); err != nil {
			v.add(p+".path", "%v", err)
		}
	default:
		v.add(p+".type", "must be one of literal, stage, transition, trigger")
		return
	}
	for _, k := range sortedKeys(fields) {
		if fields[k] && !oneOf(k, allowed...) {
			v.add(p+"."+k, "does not apply to a %s operand", o.Type)
		}
	}
}

var selectorFields = map[string][]string{
	ProviderCodeHost:      {"kind", "scope", "repositories"},
	ProviderIssueTrackerA: {"kind", "scope", "labels", "project_ids", "states", "team_ids"},
	ProviderChatTool:      {"kind", "scope", "channels"},
}

var selectorKinds = map[string]string{
	ProviderCodeHost:      "repository",
	ProviderIssueTrackerA: "issue",
	ProviderChatTool:      "channel",
}

func (v *validator) trigger(t *Trigger, stages, transitions map[string]bool) {
	fields := map[string]bool{"name": t.Name != "", "provider": t.Provider != "", "selector": t.Selector != nil,
		"filters": t.Filters != nil, "outputs": t.Outputs != nil, "cron": t.Cron != "", "inputs": t.Inputs != nil,
		"timezone": t.Timezone != "", "path": t.Path != ""}
	var allowed []string
	switch t.Type {
	case TriggerManual:
	case TriggerSchedule:
		allowed = []string{"cron", "inputs", "timezone"}
		if err := ValidateCron(t.Cron); err != nil {
			v.add("trigger.cron", "%v", err)
		}
		if err := ValidateTimezone(t.Timezone); err != nil {
			v.add("trigger.timezone", "%v", err)
		}
	case TriggerWebhook:
		allowed = []string{"path"}
		p := strings.TrimPrefix(t.Path, "/")
		switch {
		case strings.TrimSpace(t.Path) == "":
			v.add("trigger.path", "is required for a webhook trigger")
		case !webhookRE.MatchString(p) || strings.Contains(p, "..") || strings.Contains(p, "//"):
			v.add("trigger.path", "%q is not a clean URL path (letters, digits, '.', '_', '-', '~', '/')", t.Path)
		}
	case TriggerIntegration:
		allowed = []string{"name", "provider", "selector", "filters", "outputs"}
		if strings.TrimSpace(t.Name) == "" {
			v.add("trigger.name", "is required for an integration trigger")
		}
		known := selectorFields[t.Provider] != nil
		if !known {
			v.add("trigger.provider", "must be one of code_host, issue_tracker_a, chat_tool")
		}
		if t.Selector == nil {
			v.add("trigger.selector", "is required for an integration trigger")
		} else if known {
			v.selector(t.Provider, t.Selector)
		}
		for i := range t.Filters {
			v.condition(at("trigger.filters", i), &t.Filters[i], stages, transitions, false)
		}
		for _, k := range sortedKeys(t.Outputs) {
			b := t.Outputs[k]
			if b.Type != "trigger_path" {
				v.add("trigger.outputs."+k+".type", "must be trigger_path")
			}
			if strings.TrimSpace(b.Path) == "" {
				v.add("trigger.outputs."+k+".path", "is required")
			} else if err := checkPath(b.Path); err != nil {
				v.add("trigger.outputs."+k+".path", "%v", err)
			}
		}
	case "":
		v.add("trigger.type", "is required")
		return
	default:
		v.add("trigger.type", "must be one of integration_trigger, manual, schedule, webhook")
		return
	}
	for _, k := range sortedKeys(fields) {
		if fields[k] && !oneOf(k, allowed...) {
			v.add("trigger."+k, "does not apply to a %s trigger", t.Type)
		}
	}
}

func (v *validator) selector(provider string, s *Selector) {
	if s.Provider != "" && s.Provider != provider {
		v.add("trigger.selector.provider", "must equal the trigger provider %q", provider)
	}
	fields := map[string]bool{"kind": s.Kind != "", "scope": s.Scope != "", "repositories": s.Repositories != nil,
		"labels": s.Labels != nil, "project_ids": s.ProjectIDs != nil, "states": s.States != nil,
		"team_ids": s.TeamIDs != nil, "channels": s.Channels != nil}
	for _, k := range sortedKeys(fields) {
		if fields[k] && !oneOf(k, selectorFields[provider]...) {
			v.add("trigger.selector."+k, "does not apply to provider %s", provider)
		}
	}
	if s.Kind != "" && s.Kind != selectorKinds[provider] {
		v.add("trigger.selector.kind", "must be %q for provider %s", selectorKinds[provider], provider)
	}
	if s.Scope != "" && !oneOf(s.Scope, "all", "selected") {
		v.add("trigger.selector.scope", "must be all or selected")
	}
}

// CheckLineJobs checks that every stage names a known job and that a pinned
// job_version_id belongs to it. known reports whether a job exists and, when
// versionID is not empty, whether that version belongs to it.
func CheckLineJobs(m *LineManifest, known func(job, versionID string) (jobExists, versionOK bool)) Problems {
	v := &validator{}
	for i, s := range m.Stages {
		if strings.TrimSpace(s.Job) == "" {
			continue
		}
		exists, versionOK := known(s.Job, s.JobVersionID)
		switch {
		case !exists:
			v.add(at("stages", i)+".job", "unknown job %q", s.Job)
		case s.JobVersionID != "" && !versionOK:
			v.add(at("stages", i)+".job_version_id", "%q is not a version of job %q", s.JobVersionID, s.Job)
		}
	}
	return v.result()
}
