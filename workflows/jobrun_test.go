package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/activities/sandbox"
	"github.com/linefactory/linefactory/internal/testwait"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/manifesttest"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// memStore is an in-memory run store for unit tests.
type memStore struct {
	mu    sync.Mutex
	runs  map[string]store.JobRun
	lines map[string]store.LineRun
	logs  map[string][]byte
}

func newMemStore() *memStore {
	return &memStore{runs: map[string]store.JobRun{}, lines: map[string]store.LineRun{}, logs: map[string][]byte{}}
}

func (m *memStore) CreateJobRun(_ context.Context, r store.JobRun) (store.JobRun, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.runs[r.ID]; ok {
		return store.JobRun{}, store.ErrConflict
	}
	m.runs[r.ID] = r
	return r, nil
}

func (m *memStore) UpdateLineRun(_ context.Context, id string, change func(*store.LineRun) error) (store.LineRun, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.lines[id]
	if !ok {
		return store.LineRun{}, store.ErrNotFound
	}
	b, _ := json.Marshal(r)
	var c store.LineRun
	_ = json.Unmarshal(b, &c)
	if c.StageOutputs == nil {
		c.StageOutputs = map[string]map[string]any{}
	}
	if err := change(&c); err != nil {
		return store.LineRun{}, err
	}
	m.lines[id] = c
	return c, nil
}

func (m *memStore) GetJobRun(_ context.Context, id string) (store.JobRun, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.runs[id]
	if !ok {
		return store.JobRun{}, store.ErrNotFound
	}
	return r, nil
}

func (m *memStore) UpdateJobRun(_ context.Context, id string, change func(*store.JobRun) error) (store.JobRun, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.runs[id]
	// deep copy through JSON so callers never share slices
	b, _ := json.Marshal(r)
	var c store.JobRun
	_ = json.Unmarshal(b, &c)
	if err := change(&c); err != nil {
		return store.JobRun{}, err
	}
	m.runs[id] = c
	return c, nil
}

func (m *memStore) AppendStepLog(_ context.Context, runID, step, stream string, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.logs[runID+"/"+step+"/"+stream] = append(m.logs[runID+"/"+step+"/"+stream], data...)
	return nil
}

type fixture struct {
	suite testsuite.WorkflowTestSuite
	store *memStore
	acts  *activities.Activities
	runs  int // Temporal runs of the last line run (1 + its continue-as-new)
	// version is the JobRunInput.Version run starts job runs with (0: an
	// older starter's input, which asks workflow.GetVersion).
	version int
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	drv, err := sandbox.NewLocalWith(t.TempDir(), sandbox.Options{Isolation: sandbox.IsolationNone}) // these tests look at steps from the host
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drv.Close) // its idle sandboxes' cgroups go with it
	st := newMemStore()
	f := &fixture{store: st, acts: &activities.Activities{Store: st, Sandboxes: drv, Rates: activities.DefaultCostRates,
		OutputDir: t.TempDir(), HeartbeatInterval: 100 * time.Millisecond}}
	f.suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	return f
}

func parseJob(t *testing.T, src string) manifests.JobManifest {
	t.Helper()
	m, err := manifests.ParseJob([]byte(src), manifests.FormatTOML)
	if err != nil {
		t.Fatal(err)
	}
	if ps := manifests.ValidateJob(m); ps != nil {
		t.Fatalf("invalid test manifest: %v", ps)
	}
	manifests.NormalizeJob(m)
	return *m
}

// Parts of oneTask jobs: steps, a head and a tail.
const (
	trueStep     = `exec = ["true"]`
	sleep30      = `exec = ["sleep", "30"]`
	runTimeout1s = "[run]\ntimeout = \"1s\""
	intOutputN   = "[outputs.n]\ntype = \"integer\""
)

// oneTaskTOML is job x with one task "a" of these steps; head is the job's
// [run] tables, tail what follows the task.
func oneTaskTOML(head, tail string, steps ...string) string {
	return manifesttest.Job("one-task", map[string]any{"head": head, "tail": tail, "steps": steps})
}

// oneTask is oneTaskTOML parsed.
func oneTask(t *testing.T, head, tail string, steps ...string) manifests.JobManifest {
	t.Helper()
	return parseJob(t, oneTaskTOML(head, tail, steps...))
}

func loadExample(t *testing.T, name string) manifests.JobManifest {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "manifests", "examples", "jobs", name, "job.toml"))
	if err != nil {
		t.Fatal(err)
	}
	return parseJob(t, string(data))
}

// run executes the workflow to completion and returns its result and record.
func (f *fixture) run(t *testing.T, m manifests.JobManifest, params map[string]any, setup func(env *testsuite.TestWorkflowEnvironment)) (JobRunResult, store.JobRun) {
	t.Helper()
	id := run.NewJobRunID()
	f.store.runs[id] = store.JobRun{ID: id, Status: run.Queued}
	env := f.suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(JobRunWorkflow, workflowOptions())
	env.RegisterActivity(f.acts)
	env.SetTestTimeout(60 * time.Second)
	if setup != nil {
		setup(env)
	}
	applied, ps := manifests.ApplyParams(m.Job.Params, params)
	if ps != nil {
		t.Fatal(ps)
	}
	env.ExecuteWorkflow(JobRunWorkflowName, JobRunInput{Version: f.version, RunID: id, JobName: m.Job.Name, Manifest: m, Params: applied})
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	var res JobRunResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatalf("workflow error: %v", err)
	}
	rec, _ := f.store.GetJobRun(context.Background(), id)
	return res, rec
}

func TestJobRunOutputsAcrossTasks(t *testing.T) {
	f := newFixture(t)
	res, rec := f.run(t, loadExample(t, "fanout-build"), nil, nil)
	if res.Status != run.Succeeded {
		t.Fatalf("status %s: %s %s", res.Status, res.ErrorCode, res.ErrorMessage)
	}
	want := map[string]any{"size": []any{10.0, 20.0, 30.0}, "artifacts": []any{"a.bin", "b.bin", "b.sym"}, "last_task": "build-b"}
	got := rec.ResultPayload["outputs"].(map[string]any)
	for k, w := range want {
		if !manifests.Equal(got[k], w) {
			t.Errorf("outputs.%s = %v, want %v", k, got[k], w)
		}
	}
	if rec.Status != run.Succeeded || rec.StartedAt == nil || rec.CompletedAt == nil || rec.CostRatedAt == nil {
		t.Fatalf("record: %+v", rec)
	}
	for _, e := range rec.StepTimeline {
		if e.Status != run.Succeeded || e.ExitCode == nil || *e.ExitCode != 0 || e.SandboxName == nil {
			t.Errorf("timeline entry %+v", e)
		}
	}
}

func TestJobRunParamsAndLogs(t *testing.T) {
	f := newFixture(t)
	res, rec := f.run(t, loadExample(t, "hello"), map[string]any{"who": "ann"}, nil)
	if res.Status != run.Succeeded || rec.ResultPayload["outputs"].(map[string]any)["greeting"] != "hello ann" {
		t.Fatalf("result %+v payload %v", res, rec.ResultPayload)
	}
	if logs := string(f.store.logs[rec.ID+"/greet/say/stdout"]); logs != "hello ann\n" {
		t.Fatalf("stdout log %q", logs)
	}
}

func TestJobRunFailures(t *testing.T) {
	cases := []struct {
		name, manifest      string
		status, code, class string
		timeline            []string // statuses in order
	}{
		{"fail_fast stops the next task", manifesttest.Job("fail-fast"), "failed", "EXEC_FAILED", "config", []string{"failed", "skipped", "skipped"}},
		{"fail_fast off runs the other task", manifesttest.Job("fail-fast-off"), "failed", "EXEC_FAILED", "config", []string{"failed", "succeeded"}},
		{"step timeout", oneTaskTOML("", "", sleep30+"\ntimeout = 1"), "failed", "TIMEOUT", "config", []string{"timed_out"}},
		{"output contract", oneTaskTOML("", intOutputN, `exec = ["sh", "-c", "echo 'n=notanumber' >> $SVC_OUTPUT"]`+"\n"+`outputs = ["n"]`), "failed", "OUTPUT_INVALID", "contract", []string{"failed"}},
		{"required output missing", oneTaskTOML("", intOutputN, trueStep+"\n"+`outputs = ["n"]`), "failed", "OUTPUT_MISSING", "contract", []string{"succeeded"}},
		{"reuse of a missing sandbox", oneTaskTOML("[run.sandbox]\nmode = \"reuse\"\nname = \"nope\"", "", trueStep), "failed", "SANDBOX_NOT_FOUND", "infra", []string{"failed"}},
		{"run_agent without a configured harness", oneTaskTOML("", "", `run_agent = { mode = "exec", harness = "custom", command = ["true"] }`), "failed", "HARNESS_NOT_CONFIGURED", "config", []string{"failed"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			res, rec := f.run(t, parseJob(t, tc.manifest), nil, nil)
			if string(res.Status) != tc.status || res.ErrorCode != tc.code || string(res.FailureClass) != tc.class {
				t.Fatalf("got %s/%s/%s (%s), want %s/%s/%s", res.Status, res.ErrorCode, res.FailureClass, res.ErrorMessage, tc.status, tc.code, tc.class)
			}
			if string(rec.Status) != tc.status || rec.ErrorCode == nil || *rec.ErrorCode != tc.code || rec.ErrorMessage == nil {
				t.Fatalf("record: %+v", rec)
			}
			var got []string
			for _, e := range rec.StepTimeline {
				got = append(got, string(e.Status))
			}
			if strings.Join(got, ",") != strings.Join(tc.timeline, ",") {
				t.Fatalf("timeline %v, want %v", got, tc.timeline)
			}
		})
	}
}

func TestJobRunTimeout(t *testing.T) {
	f := newFixture(t)
	res, rec := f.run(t, oneTask(t, runTimeout1s, "", sleep30), nil, nil)
	if res.Status != run.TimedOut || rec.Status != run.TimedOut {
		t.Fatalf("status %s / %s, want timed_out", res.Status, rec.Status)
	}
}

func TestJobRunFanoutConcurrency(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	// Each task records when it starts and ends; at most 2 may overlap.
	res, _ := f.run(t, parseJob(t, manifesttest.Job("fanout", map[string]any{"dir": dir, "tasks": 4})), nil, nil)
	if res.Status != run.Succeeded {
		t.Fatalf("status %s %s", res.Status, res.ErrorMessage)
	}
	data, _ := os.ReadFile(filepath.Join(dir, "log"))
	inFlight, peak := 0, 0
	for _, l := range strings.Fields(string(data)) {
		if l == "start" {
			inFlight++
		} else {
			inFlight--
		}
		peak = max(peak, inFlight)
	}
	if peak != 2 {
		t.Fatalf("peak concurrency %d, want 2 (log %q)", peak, data)
	}
}

func TestJobRunCancel(t *testing.T) {
	f := newFixture(t)
	m := oneTask(t, "", "", `exec = ["sleep", "600"]`, trueStep)
	start := time.Now()
	res, rec := f.run(t, m, nil, func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterDelayedCallback(env.CancelWorkflow, 500*time.Millisecond)
	})
	if res.Status != run.Cancelled || rec.Status != run.Cancelled {
		t.Fatalf("status %s / %s, want cancelled", res.Status, rec.Status)
	}
	if time.Since(start) > 20*time.Second {
		t.Fatalf("cancel took %s", time.Since(start))
	}
	if rec.StepTimeline[0].Status != run.Cancelled || rec.StepTimeline[1].Status != run.Cancelled {
		t.Fatalf("timeline after cancel: %+v", rec.StepTimeline)
	}
}

func timeline(rec store.JobRun) string {
	var got []string
	for _, e := range rec.StepTimeline {
		got = append(got, string(e.Status))
	}
	return strings.Join(got, ",")
}

func TestJobRunStoppedBeforeStart(t *testing.T) {
	// From input Version 2 the first task's sandbox is made meanwhile: the
	// stopped run tears it down.
	for _, version := range []int{0, JobRunInputVersion} {
		t.Run(fmt.Sprintf("version %d", version), func(t *testing.T) {
			f := newFixture(t)
			f.version = version
			m := oneTask(t, "", "", trueStep)
			res, rec := f.run(t, m, nil, func(env *testsuite.TestWorkflowEnvironment) {
				// StartRun is still in flight when the stop arrives.
				env.OnActivity(f.acts.StartRun, mock.Anything, mock.Anything).Return(func(ctx context.Context, _ activities.StartRunInput) error {
					<-ctx.Done()
					return ctx.Err()
				})
				env.RegisterDelayedCallback(env.CancelWorkflow, 100*time.Millisecond)
			})
			if res.Status != run.Cancelled || rec.Status != run.Cancelled || rec.CompletedAt == nil {
				t.Fatalf("status %s / %s (completed %v), want cancelled", res.Status, rec.Status, rec.CompletedAt)
			}
			f.wantGone(t, activities.ProvisionName(rec.ID, 0), "after the stop")
		})
	}
}

// From input Version 2 the first task's quick provision is made while
// StartRun writes the record: StartRun here waits for the acquisition to
// begin (the run would fail if the two ran one after the other), and the
// run goes on in that sandbox and tears it down.
func TestJobRunAcquiresWhileStarting(t *testing.T) {
	f := newFixture(t)
	f.version = JobRunInputVersion
	m := oneTask(t, "", "", trueStep, trueStep)
	var sandboxName string
	res, rec := f.run(t, m, nil, func(env *testsuite.TestWorkflowEnvironment) {
		acquiring := make(chan struct{})
		env.OnActivity(f.acts.AcquireSandbox, mock.Anything, mock.Anything).Return(
			func(ctx context.Context, in activities.AcquireSandboxInput) (activities.AcquireSandboxResult, error) {
				close(acquiring)
				r, err := f.acts.AcquireSandbox(ctx, in)
				sandboxName = r.Name
				return r, err
			})
		env.OnActivity(f.acts.StartRun, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.StartRunInput) error {
			select {
			case <-acquiring:
				return f.acts.StartRun(ctx, in)
			case <-time.After(10 * time.Second):
				return temporal.NewNonRetryableApplicationError("the sandbox was not being acquired while the run started", "TEST", nil)
			}
		})
	})
	if res.Status != run.Succeeded || rec.Status != run.Succeeded || len(rec.StepTimeline) != 2 {
		t.Fatalf("status %s / %s, timeline %+v; want succeeded with 2 steps", res.Status, rec.Status, rec.StepTimeline)
	}
	if sandboxName != activities.ProvisionName(rec.ID, 0) {
		t.Fatalf("acquired %q, want the first task's provision", sandboxName)
	}
	f.wantGone(t, sandboxName, "after the run")
}

// wantGone fails the test unless sandbox name is gone (torn down, or never
// made).
func (f *fixture) wantGone(t *testing.T, name, when string) {
	t.Helper()
	if _, err := f.acts.Sandboxes.Get(context.Background(), name); sandbox.CodeOf(err) != sandbox.CodeNotFound {
		t.Fatalf("sandbox %s %s: %v, want it gone", name, when, err)
	}
}

// A run whose StartRun fails after its first task's sandbox was made
// alongside (input Version 2) fails as an internal error and tears that
// sandbox down.
func TestJobRunStartFailureTearsDownFirstSandbox(t *testing.T) {
	f := newFixture(t)
	f.version = JobRunInputVersion
	m := oneTask(t, "", "", trueStep)
	made := make(chan string, 1)
	res, rec := f.run(t, m, nil, func(env *testsuite.TestWorkflowEnvironment) {
		env.OnActivity(f.acts.AcquireSandbox, mock.Anything, mock.Anything).Return(
			func(ctx context.Context, in activities.AcquireSandboxInput) (activities.AcquireSandboxResult, error) {
				r, err := f.acts.AcquireSandbox(ctx, in)
				made <- r.Name
				return r, err
			})
		env.OnActivity(f.acts.StartRun, mock.Anything, mock.Anything).Return(func(ctx context.Context, _ activities.StartRunInput) error {
			made <- <-made // the sandbox exists (its name stays for the check below)
			return temporal.NewNonRetryableApplicationError("the store is gone", "TEST", nil)
		})
	})
	if got := <-made; got != activities.ProvisionName(rec.ID, 0) {
		t.Fatalf("made %q before the failed start, want the first task's provision", got)
	}
	if res.Status != run.Failed || rec.ErrorCode == nil || *rec.ErrorCode != run.CodeInternalError {
		t.Fatalf("status %s, error %v; want failed, %s", res.Status, rec.ErrorCode, run.CodeInternalError)
	}
	f.wantGone(t, activities.ProvisionName(rec.ID, 0), "after a failed start")
}

func TestJobRunTimeoutMarksTheRunningStep(t *testing.T) {
	f := newFixture(t)
	_, rec := f.run(t, oneTask(t, runTimeout1s, "", sleep30, trueStep), nil, nil)
	if rec.Status != run.TimedOut || timeline(rec) != "timed_out,skipped" {
		t.Fatalf("status %s timeline %s, want timed_out with timed_out,skipped", rec.Status, timeline(rec))
	}
	// The step cut off by the timeout ran for about a second: it is charged.
	if rec.ComputeCostCents < 1 {
		t.Fatalf("compute cost %d cents for a step that ran 1s, want it charged", rec.ComputeCostCents)
	}
	if e := rec.StepTimeline[0]; e.ErrorCode == nil || *e.ErrorCode != "TIMEOUT" || e.CompletedAt == nil {
		t.Fatalf("interrupted step: %+v", e)
	}
}

func TestJobRunStepStartToCloseTimeout(t *testing.T) {
	f := newFixture(t)
	m := oneTask(t, "", "", trueStep, trueStep)
	res, rec := f.run(t, m, nil, func(env *testsuite.TestWorkflowEnvironment) {
		env.OnActivity(f.acts.RunStep, mock.Anything, mock.Anything).Return(activities.RunStepResult{},
			temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, nil))
	})
	if res.Status != run.Failed || res.ErrorCode != "TIMEOUT" || timeline(rec) != "timed_out,skipped" {
		t.Fatalf("got %s/%s timeline %s, want failed/TIMEOUT timed_out,skipped", res.Status, res.ErrorCode, timeline(rec))
	}
}

func TestJobRunSandboxFailureIsInTheTimeline(t *testing.T) {
	cases := []struct {
		name  string
		setup func(f *fixture, env *testsuite.TestWorkflowEnvironment)
		extra string
		code  string
	}{
		{"setup script fails", nil, "[run.sandbox]\nimage = \"base\"\nsetup_scripts = [{ script = \"exit 4\" }]\n", sandbox.CodeProvisioningFailed},
		{"acquire keeps erroring", func(f *fixture, env *testsuite.TestWorkflowEnvironment) {
			env.OnActivity(f.acts.AcquireSandbox, mock.Anything, mock.Anything).Return(activities.AcquireSandboxResult{}, errors.New("disk on fire"))
		}, "", sandbox.CodeProvisioningFailed},
		{"acquire times out", func(f *fixture, env *testsuite.TestWorkflowEnvironment) {
			env.OnActivity(f.acts.AcquireSandbox, mock.Anything, mock.Anything).Return(activities.AcquireSandboxResult{},
				temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil))
		}, "", sandbox.CodeProvisioningFailed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			m := oneTask(t, tc.extra, "", trueStep, trueStep)
			res, rec := f.run(t, m, nil, func(env *testsuite.TestWorkflowEnvironment) {
				if tc.setup != nil {
					tc.setup(f, env)
				}
			})
			if res.Status != run.Failed || res.ErrorCode != tc.code || res.FailureClass != "infra" {
				t.Fatalf("got %s/%s/%s, want failed/%s/infra", res.Status, res.ErrorCode, res.FailureClass, tc.code)
			}
			e := rec.StepTimeline[0]
			if timeline(rec) != "failed,skipped" || e.ErrorCode == nil || *e.ErrorCode != tc.code || e.FailureClass == nil || *e.FailureClass != "infra" || e.ErrorMessage == nil {
				t.Fatalf("timeline %s, first entry %+v", timeline(rec), e)
			}
		})
	}
}

func TestJobRunResumeOnStart(t *testing.T) {
	for _, tc := range []struct {
		name, run, lifecycle string
		status, code         string
	}{
		{"paused sandbox without resume_on_start", "", "", "failed", sandbox.CodeInvalidState},
		{"resume_on_start", "resume_on_start = true\n", "", "succeeded", ""},
		{"auto_resume on_activity", "", "lifecycle = { auto_resume = \"on_activity\" }\n", "succeeded", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			if _, err := f.acts.Sandboxes.Acquire(ctx, sandbox.Spec{Mode: "ensure", Name: "ws", InternetEnabled: true}); err != nil {
				t.Fatal(err)
			}
			if err := f.acts.Sandboxes.Pause(ctx, "ws"); err != nil {
				t.Fatal(err)
			}
			m := oneTask(t, "[run]\n"+tc.run+"[run.sandbox]\nmode = \"ensure\"\nname = \"ws\"\nimage = \"base\"\n"+tc.lifecycle, "", trueStep)
			res, _ := f.run(t, m, nil, nil)
			if string(res.Status) != tc.status || res.ErrorCode != tc.code {
				t.Fatalf("got %s/%s (%s), want %s/%s", res.Status, res.ErrorCode, res.ErrorMessage, tc.status, tc.code)
			}
			sb, _ := f.acts.Sandboxes.Get(ctx, "ws")
			if want := map[bool]string{true: sandbox.StateRunning, false: sandbox.StatePaused}[tc.status == "succeeded"]; sb.State != want {
				t.Fatalf("sandbox state %s, want %s", sb.State, want)
			}
		})
	}
}

func TestJobRunSandboxSteps(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	m := parseJob(t, manifesttest.Job("sandbox-steps"))
	res, rec := f.run(t, m, nil, nil)
	if res.Status != run.Succeeded || timeline(rec) != "succeeded,succeeded,succeeded,succeeded,succeeded,succeeded" {
		t.Fatalf("status %s (%s) timeline %s", res.Status, res.ErrorMessage, timeline(rec))
	}
	for i, want := range []string{"exec", "snapshot", "pause", "resume", "exec", "delete"} {
		if rec.StepTimeline[i].Action != want {
			t.Errorf("step %d action %s, want %s", i, rec.StepTimeline[i].Action, want)
		}
	}
	if _, err := f.acts.Sandboxes.Get(ctx, "life"); sandbox.CodeOf(err) != sandbox.CodeNotFound {
		t.Fatalf("the delete step left the sandbox: %v", err)
	}
	// The snapshot restores into a new sandbox.
	sb, err := f.acts.Sandboxes.Acquire(ctx, sandbox.Spec{Mode: "provision", Name: "again", SnapshotName: "life-snap", InternetEnabled: true})
	if err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(sb.Root, "f")); err != nil || string(data) != "v1\n" {
		t.Fatalf("snapshot content %q %v", data, err)
	}
}

func TestJobRunSlowSandboxStepsHeartbeat(t *testing.T) {
	f := newFixture(t)
	m := oneTask(t, "", "", "pause = true")
	var beats int
	var mu sync.Mutex
	res, _ := f.run(t, m, nil, func(env *testsuite.TestWorkflowEnvironment) {
		env.SetOnActivityHeartbeatListener(func(info *activity.Info, _ converter.EncodedValues) {
			mu.Lock()
			defer mu.Unlock()
			if info.ActivityType.Name == "RunStep" {
				beats++
			}
		})
		// A pause that takes longer than the 3 s heartbeat timeout.
		f.acts.Sandboxes = slowPause{Driver: f.acts.Sandboxes, d: 4 * time.Second}
	})
	mu.Lock()
	defer mu.Unlock()
	if res.Status != run.Succeeded || beats == 0 {
		t.Fatalf("status %s (%s), %d heartbeats", res.Status, res.ErrorMessage, beats)
	}
}

type slowPause struct {
	sandbox.Driver
	d time.Duration
}

func (s slowPause) Pause(ctx context.Context, name string) error {
	time.Sleep(s.d)
	return s.Driver.Pause(ctx, name)
}

func TestJobRunTeardownOnComplete(t *testing.T) {
	for _, teardown := range []bool{true, false} {
		t.Run(fmt.Sprint("teardown=", teardown), func(t *testing.T) {
			f := newFixture(t)
			m := oneTask(t, fmt.Sprintf("[run]\nteardown_on_complete = %v", teardown), "", trueStep)
			res, rec := f.run(t, m, nil, nil)
			if res.Status != run.Succeeded {
				t.Fatalf("status %s %s", res.Status, res.ErrorMessage)
			}
			name := *rec.StepTimeline[0].SandboxName
			if name != activities.ProvisionName(rec.ID, 0) {
				t.Fatalf("sandbox %q, want the generated %q", name, activities.ProvisionName(rec.ID, 0))
			}
			_, err := f.acts.Sandboxes.Get(context.Background(), name)
			if gone := sandbox.CodeOf(err) == sandbox.CodeNotFound; gone != teardown {
				t.Fatalf("sandbox gone = %v after the run, want %v (%v)", gone, teardown, err)
			}
		})
	}
}

func TestJobRunOutputFile(t *testing.T) {
	f := newFixture(t)
	seen := t.TempDir()
	m := parseJob(t, manifesttest.Job("output-file", map[string]any{"seen": seen}))
	res, rec := f.run(t, m, nil, nil)
	if res.Status != run.Succeeded || rec.ResultPayload["outputs"].(map[string]any)["n"] != 5.0 {
		t.Fatalf("status %s (%s), payload %v", res.Status, res.ErrorMessage, rec.ResultPayload)
	}
	if data, _ := os.ReadFile(filepath.Join(seen, "silent")); strings.TrimSpace(string(data)) != os.DevNull {
		t.Errorf("$SVC_OUTPUT of a step claiming nothing = %q, want %s", data, os.DevNull)
	}
	data, _ := os.ReadFile(filepath.Join(seen, "writer"))
	shape := regexp.MustCompile("^" + regexp.QuoteMeta(filepath.Join(f.acts.OutputDir, "svc_output."+rec.ID+".")) + "[0-9a-f]+$")
	if path := strings.TrimSpace(string(data)); !shape.MatchString(path) {
		t.Errorf("$SVC_OUTPUT = %q, want %s", path, shape)
	}
	if _, err := os.Stat(filepath.Join(seen, "writer-pre")); err == nil {
		t.Error("$SVC_OUTPUT existed before the step ran")
	}
	if left, _ := filepath.Glob(filepath.Join(f.acts.OutputDir, "svc_output.*")); len(left) > 0 {
		t.Errorf("output files left behind: %v", left)
	}
}

func TestJobRunOutputContractThroughSteps(t *testing.T) {
	cases := []struct {
		name, step string
		code       string
	}{
		{"at the cap", `exec = ["sh", "-c", "printf 'n=%65533d\n' 7 >> $SVC_OUTPUT"]` + "\noutputs = [\"n\"]", ""},
		{"over the 64 KiB cap", `exec = ["sh", "-c", "printf 'n=%65534d\n' 7 >> $SVC_OUTPUT"]` + "\noutputs = [\"n\"]", manifests.CodeOutputTooLarge},
		{"a FIFO", `exec = ["sh", "-c", "mkfifo $SVC_OUTPUT"]` + "\noutputs = [\"n\"]", activities.CodeOutputUnreadable},
		{"required claim missing", `exec = ["true"]` + "\noutputs = { n = { required = true } }", manifests.CodeOutputMissing},
		{"from maps the key", `exec = ["sh", "-c", "echo count=7 >> $SVC_OUTPUT"]` + "\noutputs = { n = { from = \"count\" } }", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			m := oneTask(t, "", "[outputs.n]\ntype = \"integer\"", tc.step)
			res, rec := f.run(t, m, nil, nil)
			if tc.code == "" {
				if res.Status != run.Succeeded || rec.ResultPayload["outputs"].(map[string]any)["n"] != 7.0 {
					t.Fatalf("status %s (%s), payload %v", res.Status, res.ErrorMessage, rec.ResultPayload)
				}
				return
			}
			e := rec.StepTimeline[0]
			if res.ErrorCode != tc.code || res.FailureClass != "contract" || e.Status != run.Failed || e.ErrorCode == nil || *e.ErrorCode != tc.code {
				t.Fatalf("got %s/%s (%s), step %s, want failed %s/contract", res.Status, res.ErrorCode, res.ErrorMessage, e.Status, tc.code)
			}
		})
	}
}

func TestJobRunGitSourcesWithParams(t *testing.T) {
	dir := t.TempDir()
	bare, work := filepath.Join(dir, "repo.git"), filepath.Join(dir, "work")
	gitEnv := append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t",
		"GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
	for _, args := range [][]string{
		{"init", "--quiet", "--bare", "-b", "main", bare},
		{"init", "--quiet", "-b", "main", work},
		{"-C", work, "commit", "--quiet", "--allow-empty", "-m", "main"},
		{"-C", work, "checkout", "--quiet", "-b", "dev"},
		{"-C", work, "commit", "--quiet", "--allow-empty", "-m", "on dev"},
		{"-C", work, "push", "--quiet", bare, "main", "dev"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Env = gitEnv
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	f := newFixture(t)
	m := parseJob(t, manifesttest.Job("git-sources"))
	res, _ := f.run(t, m, map[string]any{"repo": bare, "branch": "dev"}, nil)
	if res.Status != run.Succeeded {
		t.Fatalf("status %s %s %s", res.Status, res.ErrorCode, res.ErrorMessage)
	}
}

func TestJobRunCancelDuringSetup(t *testing.T) {
	f := newFixture(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	m := oneTask(t, fmt.Sprintf("[run.sandbox]\nimage = \"base\"\nsetup_scripts = [{ script = \"echo $$ > %s; exec sleep 600\" }]", pidFile), "", trueStep)
	start := time.Now()
	res, rec := f.run(t, m, nil, func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterDelayedCallback(env.CancelWorkflow, time.Second)
	})
	if res.Status != run.Cancelled || rec.Status != run.Cancelled || timeline(rec) != "cancelled" {
		t.Fatalf("status %s / %s timeline %s, want cancelled", res.Status, rec.Status, timeline(rec))
	}
	if time.Since(start) > 20*time.Second {
		t.Fatalf("cancel took %s", time.Since(start))
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the setup script never ran: %v", err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	// The test environment may end the workflow before the cancelled
	// activity has returned: poll.
	var alive bool
	if !testwait.Until(10*time.Second, func() bool {
		_, err = f.acts.Sandboxes.Get(context.Background(), activities.ProvisionName(rec.ID, 0))
		alive = pid > 0 && syscall.Kill(pid, 0) == nil
		return !alive && sandbox.CodeOf(err) == sandbox.CodeNotFound
	}) {
		if alive {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Fatalf("after the stop: setup script alive = %v, sandbox lookup %v", alive, err)
	}
}

// A step followed by another of its task leaves its end to the next
// step's start (activities.StepEnd); a stop that comes before the next
// step's activity completed leaves it to FinishRun. Every entry ends as if
// each step had written its own end.
func TestJobRunCarriesStepEnds(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	var reqs []activities.RunStepInput
	listen := func(env *testsuite.TestWorkflowEnvironment) {
		env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
			if info.ActivityType.Name != "RunStep" {
				return
			}
			var in activities.RunStepInput
			if err := args.Get(&in); err != nil {
				t.Error(err)
			}
			mu.Lock()
			reqs = append(reqs, in)
			mu.Unlock()
		})
	}
	res, rec := f.run(t, oneTask(t, "", "", trueStep, trueStep, trueStep), nil, listen)
	if res.Status != run.Succeeded || timeline(rec) != "succeeded,succeeded,succeeded" {
		t.Fatalf("status %s, timeline %s", res.Status, timeline(rec))
	}
	for _, e := range rec.StepTimeline {
		if e.CompletedAt == nil || e.ExitCode == nil || e.StartedAt == nil || e.CompletedAt.Before(*e.StartedAt) {
			t.Fatalf("entry %+v", e)
		}
	}
	if len(reqs) != 3 || !reqs[0].DeferEnd || len(reqs[0].Ends) != 0 || len(reqs[1].Ends) != 1 || reqs[1].Ends[0].Step != rec.StepTimeline[0].Name ||
		len(reqs[2].Ends) != 1 || reqs[2].Ends[0].Step != rec.StepTimeline[1].Name {
		t.Fatalf("step requests %+v", reqs)
	}
	// The run's last step leaves its end to FinishRun; no other does.
	if reqs[0].FinishNext || reqs[1].FinishNext || !reqs[2].FinishNext {
		t.Fatalf("FinishNext %v %v %v", reqs[0].FinishNext, reqs[1].FinishNext, reqs[2].FinishNext)
	}

	// Stopped while the second step runs: the first step's end, carried by
	// the second's start, still stands, and FinishRun would have written it.
	reqs = nil
	res, rec = f.run(t, oneTask(t, "", "", trueStep, `exec = ["sleep", "600"]`, trueStep), nil, func(env *testsuite.TestWorkflowEnvironment) {
		listen(env)
		env.RegisterDelayedCallback(env.CancelWorkflow, 500*time.Millisecond)
	})
	if res.Status != run.Cancelled || timeline(rec) != "succeeded,cancelled,cancelled" {
		t.Fatalf("status %s, timeline %s", res.Status, timeline(rec))
	}
	if e := rec.StepTimeline[0]; e.CompletedAt == nil || e.ExitCode == nil {
		t.Fatalf("first step %+v", e)
	}
}
