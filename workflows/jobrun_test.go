package workflows

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/activities/sandbox"
	"github.com/linefactory/linefactory/manifests"
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
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	drv, err := sandbox.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
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
	id := store.NewID("jr_")
	f.store.runs[id] = store.JobRun{ID: id, Status: activities.StatusQueued}
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
	env.ExecuteWorkflow(JobRunWorkflowName, JobRunInput{RunID: id, JobName: m.Job.Name, Manifest: m, Params: applied})
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
	if res.Status != activities.StatusSucceeded {
		t.Fatalf("status %s: %s %s", res.Status, res.ErrorCode, res.ErrorMessage)
	}
	want := map[string]any{"size": []any{10.0, 20.0, 30.0}, "artifacts": []any{"a.bin", "b.bin", "b.sym"}, "last_task": "build-b"}
	got := rec.ResultPayload["outputs"].(map[string]any)
	for k, w := range want {
		if !manifests.Equal(got[k], w) {
			t.Errorf("outputs.%s = %v, want %v", k, got[k], w)
		}
	}
	if rec.Status != activities.StatusSucceeded || rec.StartedAt == nil || rec.CompletedAt == nil || rec.CostRatedAt == nil {
		t.Fatalf("record: %+v", rec)
	}
	for _, e := range rec.StepTimeline {
		if e.Status != activities.StatusSucceeded || e.ExitCode == nil || *e.ExitCode != 0 || e.SandboxName == nil {
			t.Errorf("timeline entry %+v", e)
		}
	}
}

func TestJobRunParamsAndLogs(t *testing.T) {
	f := newFixture(t)
	res, rec := f.run(t, loadExample(t, "hello"), map[string]any{"who": "ann"}, nil)
	if res.Status != activities.StatusSucceeded || rec.ResultPayload["outputs"].(map[string]any)["greeting"] != "hello ann" {
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
		{"fail_fast stops the next task", `
[job]
name = "x"
[[run.tasks]]
name = "a"
[[run.tasks.steps]]
exec = ["sh", "-c", "exit 3"]
[[run.tasks.steps]]
exec = ["true"]
[[run.tasks]]
name = "b"
[[run.tasks.steps]]
exec = ["true"]
`, "failed", "EXEC_FAILED", "config", []string{"failed", "skipped", "skipped"}},
		{"fail_fast off runs the other task", `
[job]
name = "x"
[run]
fail_fast = false
[[run.tasks]]
name = "a"
[[run.tasks.steps]]
exec = ["sh", "-c", "exit 3"]
[[run.tasks]]
name = "b"
[[run.tasks.steps]]
exec = ["true"]
`, "failed", "EXEC_FAILED", "config", []string{"failed", "succeeded"}},
		{"step timeout", `
[job]
name = "x"
[[run.tasks]]
name = "a"
[[run.tasks.steps]]
exec = ["sleep", "30"]
timeout = 1
`, "failed", "TIMEOUT", "config", []string{"timed_out"}},
		{"output contract", `
[job]
name = "x"
[[run.tasks]]
name = "a"
[[run.tasks.steps]]
exec = ["sh", "-c", "echo 'n=notanumber' >> $SVC_OUTPUT"]
outputs = ["n"]
[outputs.n]
type = "integer"
`, "failed", "OUTPUT_INVALID", "contract", []string{"failed"}},
		{"required output missing", `
[job]
name = "x"
[[run.tasks]]
name = "a"
[[run.tasks.steps]]
exec = ["true"]
outputs = ["n"]
[outputs.n]
type = "integer"
`, "failed", "OUTPUT_MISSING", "contract", []string{"succeeded"}},
		{"reuse of a missing sandbox", `
[job]
name = "x"
[run.sandbox]
mode = "reuse"
name = "nope"
[[run.tasks]]
name = "a"
[[run.tasks.steps]]
exec = ["true"]
`, "failed", "SANDBOX_NOT_FOUND", "infra", []string{"failed"}},
		{"run_agent rejected", `
[job]
name = "x"
[[run.tasks]]
name = "a"
[[run.tasks.steps]]
run_agent = { mode = "exec", harness = "custom", command = ["true"] }
`, "failed", "RUN_AGENT_UNSUPPORTED", "config", []string{"skipped"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			res, rec := f.run(t, parseJob(t, tc.manifest), nil, nil)
			if res.Status != tc.status || res.ErrorCode != tc.code || res.FailureClass != tc.class {
				t.Fatalf("got %s/%s/%s (%s), want %s/%s/%s", res.Status, res.ErrorCode, res.FailureClass, res.ErrorMessage, tc.status, tc.code, tc.class)
			}
			if rec.Status != tc.status || rec.ErrorCode == nil || *rec.ErrorCode != tc.code || rec.ErrorMessage == nil {
				t.Fatalf("record: %+v", rec)
			}
			var got []string
			for _, e := range rec.StepTimeline {
				got = append(got, e.Status)
			}
			if strings.Join(got, ",") != strings.Join(tc.timeline, ",") {
				t.Fatalf("timeline %v, want %v", got, tc.timeline)
			}
		})
	}
}

func TestJobRunTimeout(t *testing.T) {
	f := newFixture(t)
	res, rec := f.run(t, parseJob(t, `
[job]
name = "x"
[run]
timeout = "1s"
[[run.tasks]]
name = "a"
[[run.tasks.steps]]
exec = ["sleep", "30"]
`), nil, nil)
	if res.Status != activities.StatusTimedOut || rec.Status != activities.StatusTimedOut {
		t.Fatalf("status %s / %s, want timed_out", res.Status, rec.Status)
	}
}

func TestJobRunFanoutConcurrency(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	// Each task records when it starts and ends; at most 2 may overlap.
	var tasks strings.Builder
	for i := 0; i < 4; i++ {
		fmt.Fprintf(&tasks, "[[run.tasks]]\nname = \"t%d\"\n[[run.tasks.steps]]\nexec = [\"sh\", \"-c\", \"echo start >> %s/log; sleep 0.3; echo end >> %s/log\"]\n", i, dir, dir)
	}
	res, _ := f.run(t, parseJob(t, "[job]\nname = \"x\"\n[run]\nfanout = true\nconcurrency = 2\n"+tasks.String()), nil, nil)
	if res.Status != activities.StatusSucceeded {
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
	m := parseJob(t, `
[job]
name = "x"
[[run.tasks]]
name = "a"
[[run.tasks.steps]]
exec = ["sleep", "600"]
[[run.tasks.steps]]
exec = ["true"]
`)
	start := time.Now()
	res, rec := f.run(t, m, nil, func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterDelayedCallback(env.CancelWorkflow, 500*time.Millisecond)
	})
	if res.Status != activities.StatusCancelled || rec.Status != activities.StatusCancelled {
		t.Fatalf("status %s / %s, want cancelled", res.Status, rec.Status)
	}
	if time.Since(start) > 20*time.Second {
		t.Fatalf("cancel took %s", time.Since(start))
	}
	if rec.StepTimeline[0].Status != activities.StatusCancelled || rec.StepTimeline[1].Status != activities.StatusCancelled {
		t.Fatalf("timeline after cancel: %+v", rec.StepTimeline)
	}
}
