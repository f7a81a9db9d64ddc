package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/linefactory/linefactory/api"
	"github.com/linefactory/linefactory/manifests/agentconf"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/store/storetest"
	"github.com/linefactory/linefactory/workflows"
)

// The tests run the real factoryctl binary against the real API router on
// a real SQLite store. Runs are played by fakeRuns instead of Temporal: a
// run's outcome follows its "who" param (fail, cancel, anything else
// succeeds). The embedded-server end-to-end test is in cmd/factoryd.

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "factoryctl-test")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "factoryctl")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		panic("build factoryctl: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// fakeRuns plays runs straight to their end in the store, logs included.
type fakeRuns struct {
	st *store.Store
}

func outcome(params map[string]any) run.Status {
	switch params["who"] {
	case "fail":
		return run.Failed
	case "cancel":
		return run.Cancelled
	}
	return run.Succeeded
}

func (f *fakeRuns) playJob(ctx context.Context, id string, status run.Status) error {
	now := time.Now().UTC()
	if err := f.st.AppendStepLog(ctx, id, "greet/say", "stdout", []byte("hello from "+id+"\n")); err != nil {
		return err
	}
	_, err := f.st.UpdateJobRun(ctx, id, func(r *store.JobRun) error {
		r.Status, r.StartedAt, r.CompletedAt = status, &now, &now
		exit := 0
		if status != "succeeded" {
			exit = 3
			msg, code, class := "the step failed", "EXEC_FAILED", "config"
			r.ErrorMessage, r.ErrorCode, r.FailureClass = &msg, &code, &class
		}
		r.StepTimeline = []store.StepTimelineEntry{{Name: "say", TaskName: "greet", Action: "exec", Status: status, StartedAt: &now, CompletedAt: &now, ExitCode: &exit}}
		r.TotalCostCents = 3
		return nil
	})
	return err
}

func (f *fakeRuns) StartJobRun(ctx context.Context, in workflows.JobRunInput) error {
	return f.playJob(context.WithoutCancel(ctx), in.RunID, outcome(in.Params))
}

func (f *fakeRuns) StartLineRun(ctx context.Context, in workflows.LineRunInput) error {
	ctx = context.WithoutCancel(ctx)
	final := outcome(in.Params)
	var stages []store.LineRunStage
	status := run.Succeeded
	for i, s := range in.Manifest.Stages {
		jr, err := f.st.CreateJobRun(ctx, store.JobRun{JobName: s.Job, JobVersionID: "jv_fake", Status: "queued", LineRunID: &in.RunID, StageName: &s.ID})
		if err != nil {
			return err
		}
		st := run.Succeeded
		if i == 1 && final != run.Succeeded {
			st = final
		}
		if err := f.playJob(ctx, jr.ID, st); err != nil {
			return err
		}
		now := time.Now().UTC()
		stages = append(stages, store.LineRunStage{StageName: s.ID, StageOrder: i, Iteration: 1, Status: st, JobRunID: &jr.ID, TotalCostCents: 3, StartedAt: &now, CompletedAt: &now})
		if st != "succeeded" {
			status = final
			break
		}
	}
	_, err := f.st.UpdateLineRun(ctx, in.RunID, func(r *store.LineRun) error {
		now := time.Now().UTC()
		r.Status, r.Stages, r.StartedAt, r.CompletedAt = status, stages, &now, &now
		if status == "failed" {
			code, msg, stage := run.FailureCode("stage_failed"), "stage check failed", "check"
			r.Failure = &store.LineRunFailure{Code: &code, Domain: "config", ErrorMessage: &msg, StageName: &stage}
		}
		if status == "cancelled" {
			code := run.FailureCode("user_cancelled")
			r.Failure = &store.LineRunFailure{Code: &code, Domain: "user"}
		}
		return nil
	})
	return err
}

func (f *fakeRuns) CancelJobRun(context.Context, string) error                     { return nil }
func (f *fakeRuns) CancelLineRun(context.Context, string) error                    { return nil }
func (f *fakeRuns) UpsertSchedule(context.Context, store.LineSchedule) error       { return nil }
func (f *fakeRuns) DeleteSchedule(context.Context, string) error                   { return nil }
func (f *fakeRuns) UpsertJobSchedule(context.Context, workflows.JobSchedule) error { return nil }
func (f *fakeRuns) DeleteJobSchedule(context.Context, string) error                { return nil }

type env struct {
	t      *testing.T
	url    string
	tokens map[string]string
	home   string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	st := storetest.SQLite(t)
	// The example server configuration, so the examples' agent jobs deploy.
	conf, err := os.ReadFile(examples + "/factory.toml")
	if err != nil {
		t.Fatal(err)
	}
	agents, err := agentconf.Parse(conf, "factory.toml")
	if err != nil {
		t.Fatal(err)
	}
	srv := api.New(api.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Runs: &fakeRuns{st: st}, Agents: agents}, st)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	e := &env{t: t, url: ts.URL, tokens: map[string]string{}, home: t.TempDir()}
	for _, scope := range []string{api.ScopeRead, api.ScopeWrite, api.ScopeAdmin} {
		secret := api.NewTokenSecret()
		if _, err := st.CreateToken(context.Background(), "test-"+scope, scope, api.HashToken(secret)); err != nil {
			t.Fatal(err)
		}
		e.tokens[scope] = secret
	}
	return e
}

type result struct {
	code           int
	stdout, stderr string
}

// run runs factoryctl with a token of scope ("" for none), stdout piped.
func (e *env) run(scope string, args ...string) result {
	e.t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = e.environ(scope)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	return result{code, out.String(), errOut.String()}
}

func (e *env) environ(scope string) []string {
	env := []string{"HOME=" + e.home, "PATH=" + os.Getenv("PATH"), "FACTORY_URL=" + e.url, "FACTORYCTL_POLL_INTERVAL=50ms"}
	if scope != "" {
		env = append(env, "FACTORY_TOKEN="+e.tokens[scope])
	}
	return env
}

func (e *env) expect(r result, code int, contains ...string) {
	e.t.Helper()
	if r.code != code {
		e.t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	all := r.stdout + r.stderr
	for _, s := range contains {
		if !strings.Contains(all, s) {
			e.t.Fatalf("output lacks %q\nstdout:\n%s\nstderr:\n%s", s, r.stdout, r.stderr)
		}
	}
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	return v
}

const examples = "../../manifests/examples"

func TestValidateAndDeploy(t *testing.T) {
	e := newEnv(t)
	e.expect(e.run("", "validate", examples), 0, "ok: ")
	e.expect(e.run("", "validate", "../../manifests/testdata/invalid/jobs/bad-capability.toml"), 1, "bad-capability.toml: ")

	r := e.run("write", "deploy", examples)
	e.expect(r, 0)
	items := decode[[]map[string]any](t, r.stdout)
	rank := map[any]int{"knowledge": 0, "job": 1, "line": 2}
	for i := 1; i < len(items); i++ {
		if rank[items[i-1]["kind"]] > rank[items[i]["kind"]] {
			t.Fatalf("deploy: knowledge first, then jobs, then lines: %v", items)
		}
	}
	if len(items) < 10 || items[0]["kind"] != "knowledge" || items[len(items)-1]["kind"] != "line" {
		t.Fatalf("deploy: %v", items)
	}
	for _, it := range items {
		if it["result"] != "created" || it["version"] != float64(1) {
			t.Fatalf("first deploy: %v", it)
		}
	}
	r = e.run("write", "deploy", "-o", "table", examples)
	e.expect(r, 0, "unchanged  job        hello", "unchanged  line       build-until-green")

	// An invalid job is reported with its location and exits 1; knowledge
	// files are deployed first.
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "jobs", "broken", "job.toml"), "[job]\nname = \"broken\"\n[[run.tasks]]\nname = \"t\"\n[[run.tasks.steps]]\nexec = [\"echo {{nope}}\"]\n")
	mustWrite(t, filepath.Join(dir, "knowledge", "style-guide.md"), "# Style\nShort sentences.\n")
	r = e.run("write", "deploy", dir)
	e.expect(r, 1, "nope", "1 of 2 files were not deployed")
	items = decode[[]map[string]any](t, r.stdout)
	if items[1]["result"] != "invalid" || items[0]["kind"] != "knowledge" || items[0]["result"] != "created" {
		t.Fatalf("deploy results: %v", items)
	}
	e.expect(e.run("read", "deploy", examples), 1, "ACCESS_DENIED")
	e.expect(e.run("", "deploy", examples), 1, "AUTH_REQUIRED")
	e.expect(e.run("write", "deploy", "/nonexistent"), 1, "no such file")
}

func mustWrite(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRunWaitExitCodes(t *testing.T) {
	e := newEnv(t)
	e.expect(e.run("write", "deploy", examples), 0)

	// Exit codes follow the outcome: 0 succeeded, 1 failed, 2 cancelled.
	r := e.run("write", "run", "job", "hello", "-p", "who=you", "--wait")
	e.expect(r, 0)
	run := decode[map[string]any](t, r.stdout)
	if run["status"] != "succeeded" || run["job_name"] != "hello" || !strings.HasPrefix(run["id"].(string), "jr_") {
		t.Fatalf("run --wait -o json prints the final run: %v", run)
	}
	if !strings.Contains(r.stderr, "greet/say") {
		t.Fatalf("progress goes to stderr with JSON output: %s", r.stderr)
	}
	e.expect(e.run("write", "run", "job", "hello", "-p", "who=fail", "--wait"), 1)
	e.expect(e.run("write", "run", "job", "hello", "-p", "who=cancel", "--wait"), 2)

	// Without --wait: the queued run, exit 0 whatever happens next.
	r = e.run("write", "run", "job", "hello", "-p", "who=fail")
	e.expect(r, 0)
	if decode[map[string]any](t, r.stdout)["status"] != "queued" {
		t.Fatalf("run without --wait: %s", r.stdout)
	}

	// -q prints the id alone; with --wait the exit code is the outcome.
	r = e.run("write", "run", "job", "hello", "-q")
	e.expect(r, 0)
	if id := strings.TrimSpace(r.stdout); !strings.HasPrefix(id, "jr_") || strings.ContainsAny(id, " \n{") {
		t.Fatalf("run -q: %q", r.stdout)
	}
	r = e.run("write", "run", "line", "build-until-green", "-p", "who=cancel", "-q", "--wait")
	e.expect(r, 2)
	if !strings.HasPrefix(r.stdout, "lr_") || r.stderr != "" {
		t.Fatalf("run -q --wait: %q %q", r.stdout, r.stderr)
	}

	// A line: every stage and its logs, the path and the cost.
	r = e.run("write", "run", "line", "build-until-green", "-p", "who=you", "--wait", "--follow", "-o", "table")
	e.expect(r, 0, "stage build", "stage check", "stage announce", "[build greet/say] hello from jr_", "[announce greet/say]",
		"path: build → check → announce", "succeeded")
	r = e.run("write", "run", "line", "build-until-green", "-p", "who=fail", "--wait", "-o", "table")
	e.expect(r, 1, "failure: stage_failed", "domain: config")
	r = e.run("write", "run", "line", "build-until-green", "-p", "who=cancel", "--wait")
	e.expect(r, 2)
	if decode[map[string]any](t, r.stdout)["status"] != "cancelled" {
		t.Fatalf("cancelled line run: %s", r.stdout)
	}

	// Params are typed by the params' schema; a wrong type is refused
	// before the request, an unknown job is the API's 404.
	e.expect(e.run("write", "run", "job", "check", "-p", "strict=maybe"), 1, "expects boolean")
	r = e.run("write", "run", "job", "check", "-p", "strict=true", "-p", "who=you")
	e.expect(r, 1, "422", "body.params.who: unknown param")
	e.expect(e.run("write", "run", "job", "nope"), 1, "404 NOT_FOUND")
	pf := filepath.Join(t.TempDir(), "p.toml")
	mustWrite(t, pf, "who = \"fail\"\n")
	e.expect(e.run("write", "run", "job", "hello", "--params-file", pf, "--wait"), 1)
	e.expect(e.run("write", "run", "job", "hello", "--params-file", pf, "-p", "who=x", "--wait"), 0)
}

func TestRunInspection(t *testing.T) {
	e := newEnv(t)
	e.expect(e.run("write", "deploy", examples), 0)
	job := decode[map[string]any](t, e.run("write", "run", "job", "hello", "--wait").stdout)["id"].(string)
	line := decode[map[string]any](t, e.run("write", "run", "line", "build-until-green", "-p", "who=fail", "--wait").stdout)["id"].(string)

	// get: the API's shape with -o json, a summary as a table.
	got := decode[map[string]any](t, e.run("read", "get", job).stdout)
	if got["id"] != job || got["step_timeline"] == nil {
		t.Fatalf("get job run: %v", got)
	}
	got = decode[map[string]any](t, e.run("read", "get", line).stdout)
	if got["id"] != line || got["failure"] == nil || got["transitions"] == nil {
		t.Fatalf("get line run: %v", got)
	}
	e.expect(e.run("read", "get", line, "-o", "table"), 0, "STAGE", "check", "failure: stage_failed  domain: config")
	e.expect(e.run("read", "get", "line", "build-until-green", "-o", "table"), 0, "version 1")
	e.expect(e.run("read", "get", "xx_1"), 1, "no run id")
	e.expect(e.run("read", "get", "jr_nope"), 1, "404 NOT_FOUND")

	// list: job runs and line runs together, newest first, filtered.
	all := decode[[]map[string]any](t, e.run("read", "list").stdout)
	// The job run, the line run and the two job runs of its stages (it
	// failed at the second), newest first.
	if len(all) != 4 {
		t.Fatalf("list: %d runs, want 4: %v", len(all), all)
	}
	for i := 1; i < len(all); i++ {
		if all[i-1]["created_at"].(string) < all[i]["created_at"].(string) {
			t.Fatalf("not newest first: %v", all)
		}
	}
	failed := decode[[]map[string]any](t, e.run("read", "list", "--status", "failed").stdout)
	for _, r := range failed {
		if r["status"] != "failed" {
			t.Fatalf("status filter: %v", r)
		}
	}
	if len(failed) != 2 { // the line run and its failed stage job run
		t.Fatalf("failed runs: %v", failed)
	}
	lines := decode[[]map[string]any](t, e.run("read", "list", "--line", "build-until-green").stdout)
	if len(lines) != 1 || lines[0]["id"] != line {
		t.Fatalf("line filter: %v", lines)
	}
	jobs := decode[[]map[string]any](t, e.run("read", "list", "--job", "hello", "--limit", "1").stdout)
	if len(jobs) != 1 || jobs[0]["job_name"] != "hello" {
		t.Fatalf("job filter: %v", jobs)
	}
	e.expect(e.run("read", "list", "--since", "1h", "-o", "table"), 0, "KIND", "line", line)
	e.expect(e.run("read", "list", "--since", "soon"), 1, "since")
	e.expect(e.run("read", "list", "jobs", "-o", "table"), 0, "hello", "check")

	// logs: a job run's, and every stage of a line run.
	e.expect(e.run("read", "logs", job), 0, "hello from "+job)
	e.expect(e.run("read", "logs", line), 0, "==> build greet/say <==", "==> check greet/say <==")
	e.expect(e.run("read", "logs", "-f", line), 0, "[build greet/say] hello from", "[check greet/say] hello from")

	// stop of a finished run changes nothing; retry of a failed line run.
	e.expect(e.run("write", "stop", job, "-o", "table"), 0, "has ended: succeeded")
	e.expect(e.run("write", "stop", line, "-o", "table"), 0, "has ended: failed")
	r := e.run("write", "retry", line, "-o", "table")
	e.expect(r, 0, "retrying "+line+" as lr_")
	e.expect(e.run("write", "retry", job), 1, "only line runs")

	// select: no agentic transition here; the server's 422 is printed with
	// its detail.
	e.expect(e.run("write", "select", line, "-o", "table"), 0, "no agentic transition")
	r = e.run("write", "select", line, "ship", "--transition", "review")
	e.expect(r, 1, "422", "control_target_invalid", "waits for no selection")
}

func TestAdminCommands(t *testing.T) {
	e := newEnv(t)
	e.expect(e.run("write", "deploy", examples), 0)

	// schedule set|get|delete
	r := e.run("write", "schedule", "set", "nightly", "--cron", "0 3 * * *", "--timezone", "Europe/Berlin", "-i", "days=30")
	e.expect(r, 0)
	sc := decode[map[string]any](t, r.stdout)
	if sc["cron"] != "0 3 * * *" || sc["timezone"] != "Europe/Berlin" || sc["inputs"].(map[string]any)["days"] != float64(30) {
		t.Fatalf("schedule: %v", sc)
	}
	e.expect(e.run("read", "schedule", "get", "nightly", "-o", "table"), 0, "0 3 * * *", "Europe/Berlin")
	e.expect(e.run("write", "schedule", "set", "nightly", "--cron", "every day"), 1, "422")
	e.expect(e.run("write", "schedule", "delete", "nightly"), 0, "deleted")
	e.expect(e.run("read", "schedule", "get", "nightly"), 1, "404")

	// token create|list|revoke
	r = e.run("admin", "token", "create", "--name", "ci", "--scope", "read", "-o", "table")
	e.expect(r, 0, "shown only once")
	secret := strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(secret, "lf_") {
		t.Fatalf("token secret: %q", secret)
	}
	toks := decode[[]map[string]any](t, e.run("admin", "token", "list").stdout)
	names := map[string]bool{}
	for _, tk := range toks {
		names[tk["name"].(string)] = true
		if _, has := tk["token"]; has {
			t.Fatalf("token list shows a secret: %v", tk)
		}
	}
	if !names["ci"] || !names["test-admin"] {
		t.Fatalf("token list: %v", toks)
	}
	e.expect(e.run("write", "token", "list"), 1, "403 ACCESS_DENIED")
	e.expect(e.run("admin", "token", "revoke", "ci"), 0, "revoked")
	e.expect(e.run("admin", "token", "revoke", "ci"), 1, "404")

	// knowledge push|get
	kf := filepath.Join(t.TempDir(), "style-guide.md")
	mustWrite(t, kf, "# Style\nShort sentences.\n")
	r = e.run("write", "knowledge", "push", kf)
	e.expect(r, 0)
	if k := decode[[]map[string]any](t, r.stdout); k[0]["result"] != "created" || k[0]["name"] != "style-guide" {
		t.Fatalf("knowledge push: %v", k)
	}
	e.expect(e.run("write", "knowledge", "push", kf, "-o", "table"), 0, "unchanged")
	e.expect(e.run("read", "knowledge", "get", "style-guide", "-o", "table"), 0, "Short sentences.")
	e.expect(e.run("read", "knowledge", "get", "nope"), 1, "404")

	// line graph in three formats
	e.expect(e.run("read", "line", "graph", "build-until-green"), 0, "[build]  job hello", "└─▶ check", "check failed: build again (max 3)")
	e.expect(e.run("read", "line", "graph", "build-until-green", "--format", "dot"), 0, `digraph "build-until-green"`, `"check" -> "build"`)
	e.expect(e.run("read", "line", "graph", "build-until-green", "--format", "mermaid"), 0, "flowchart LR", "s_check -->|")
	e.expect(e.run("read", "line", "graph", "build-until-green", "--format", "png"), 1, "--format")
	e.expect(e.run("read", "line", "graph", "nope"), 1, "404")

	// completion and help
	e.expect(e.run("", "completion", "bash"), 0, "factoryctl")
	e.expect(e.run("", "run", "line", "--help"), 0, "Examples:", "--wait")
	e.expect(e.run("", "--output", "yaml", "list"), 1, "--output must be table or json")
}

func TestLoginConfig(t *testing.T) {
	e := newEnv(t)
	cmd := exec.Command(binary, "login", "--url", e.url)
	cmd.Env = []string{"HOME=" + e.home, "PATH=" + os.Getenv("PATH")}
	cmd.Stdin = strings.NewReader(e.tokens["read"] + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("login: %v\n%s", err, out)
	}
	p := filepath.Join(e.home, ".config", "linefactory", "config.toml")
	info, err := os.Stat(p)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("config file: %v %v", info, err)
	}
	// Without FACTORY_URL and FACTORY_TOKEN the config file is used.
	cmd = exec.Command(binary, "list", "jobs")
	cmd.Env = []string{"HOME=" + e.home, "PATH=" + os.Getenv("PATH")}
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "[]" {
		t.Fatalf("list with the config file: %v\n%s", err, out)
	}
	// A wrong token is refused and nothing is saved.
	cmd = exec.Command(binary, "login", "--url", e.url, "--token", "wrong", "--config", filepath.Join(e.home, "other.toml"))
	cmd.Env = []string{"HOME=" + e.home, "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "AUTH_REQUIRED") {
		t.Fatalf("login with a wrong token: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(e.home, "other.toml")); err == nil {
		t.Fatal("a refused login wrote its config")
	}
}

// TestProgressOnTerminal: on a terminal the output is a table and --wait
// shows live progress, without any --output flag.
func TestProgressOnTerminal(t *testing.T) {
	e := newEnv(t)
	e.expect(e.run("write", "deploy", examples), 0)
	cmd := exec.Command(binary, "run", "line", "build-until-green", "-p", "who=you", "--wait", "--follow")
	cmd.Env = e.environ("write")
	f, tty, err := pty.Open()
	if err != nil {
		t.Skipf("SKIPPED: no pseudo-terminal on this machine: %v", err)
	}
	defer f.Close()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	var out bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = io.Copy(&out, f); close(done) }()
	werr := cmd.Wait()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	if werr != nil {
		t.Fatalf("exit: %v\n%s", werr, out.String())
	}
	s := out.String()
	for _, want := range []string{"started line run lr_", "build-until-green  succeeded", "stage build", "stage announce", "$0.03", "[check greet/say] hello from", "path: build → check → announce"} {
		if !strings.Contains(s, want) {
			t.Fatalf("terminal output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, `"status"`) {
		t.Fatalf("terminal output is JSON:\n%s", s)
	}
}
