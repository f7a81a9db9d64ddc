package activities

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/linefactory/linefactory/activities/sandbox"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/manifesttest"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// runStore is an in-memory Store of job runs.
type runStore struct {
	mu   sync.Mutex
	runs map[string]store.JobRun
}

func (m *runStore) GetJobRun(_ context.Context, id string) (store.JobRun, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runs[id], nil
}

func (m *runStore) UpdateJobRun(_ context.Context, id string, change func(*store.JobRun) error) (store.JobRun, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, _ := json.Marshal(m.runs[id])
	var c store.JobRun
	_ = json.Unmarshal(b, &c)
	if err := change(&c); err != nil {
		return store.JobRun{}, err
	}
	m.runs[id] = c
	return c, nil
}

func (m *runStore) AppendStepLog(context.Context, string, string, string, []byte) error { return nil }
func (m *runStore) CreateJobRun(_ context.Context, r store.JobRun) (store.JobRun, error) {
	return r, nil
}
func (m *runStore) UpdateLineRun(context.Context, string, func(*store.LineRun) error) (store.LineRun, error) {
	return store.LineRun{}, nil
}

// stepClock advances by step on every reading.
type stepClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *stepClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.t
	c.t = c.t.Add(c.step)
	return t
}

func TestComputeCostWithConfiguredRates(t *testing.T) {
	drv, err := sandbox.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drv.Close) // its idle sandboxes' cgroups go with it
	st := &runStore{runs: map[string]store.JobRun{"jr_1": {ID: "jr_1", Status: run.Queued}}}
	// Every reading of the clock is an hour later: RunStep reads it when the
	// step starts and when it ends.
	clock := &stepClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), step: time.Hour}
	a := &Activities{Store: st, Sandboxes: drv, Now: clock.now, OutputDir: t.TempDir(),
		Rates: CostRates{CentsPerVCPUHour: 10, CentsPerGBHour: 3}}
	ctx := context.Background()
	m := manifests.JobManifest{Run: manifests.RunSection{Tasks: []manifests.Task{{Name: "t", Steps: []manifests.Step{{Exec: []string{"true"}}}}}}}
	if err := a.StartRun(ctx, StartRunInput{RunID: "jr_1", Manifest: m}); err != nil {
		t.Fatal(err)
	}
	sb, err := a.AcquireSandbox(ctx, AcquireSandboxInput{RunID: "jr_1", Task: "t", Params: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.RunStep(ctx, RunStepInput{RunID: "jr_1", Task: "t", Step: "step-1", Action: m.Run.Tasks[0].Steps[0],
		Sandbox: sb.Name, Vcpus: 2, MemoryMB: 2048})
	if err != nil || res.Status != run.Succeeded {
		t.Fatalf("step: %+v %v", res, err)
	}
	// 2 vCPU × 10 + 2 GiB × 3 for one hour.
	if res.ComputeCostCents != 26 {
		t.Fatalf("step cost %v cents, want about 26", res.ComputeCostCents)
	}
	if _, err := a.FinishRun(ctx, FinishRunInput{RunID: "jr_1", Manifest: m, Outcome: run.Outcome{Status: run.Succeeded}, ComputeCostCents: 26}); err != nil {
		t.Fatal(err)
	}
	if r := st.runs["jr_1"]; r.ComputeCostCents != 26 || r.TotalCostCents != 26 || r.CostRatedAt == nil {
		t.Fatalf("run costs: compute %d total %d rated %v", r.ComputeCostCents, r.TotalCostCents, r.CostRatedAt)
	}
	if got := (CostRates{CentsPerVCPUHour: 10, CentsPerGBHour: 3}).Cost(90*time.Minute, 1, 512); got != 1.5*(10+1.5) {
		t.Fatalf("Cost = %v, want %v", got, 1.5*(10+1.5))
	}
}

func TestReadOutputFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(write("target", []byte("a=1\n")), link); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, path, code string
	}{
		{"missing is empty", filepath.Join(dir, "none"), ""},
		{"regular", write("ok", []byte("a=1\n")), ""},
		{"at the cap", write("cap", []byte(strings.Repeat("x", manifests.MaxOutputFileBytes))), ""},
		{"over the cap", write("big", []byte(strings.Repeat("x", manifests.MaxOutputFileBytes+1))), manifests.CodeOutputTooLarge},
		{"a FIFO does not block", fifo, CodeOutputUnreadable},
		{"a symlink is not followed", link, CodeOutputUnreadable},
		{"a directory", t.TempDir(), CodeOutputUnreadable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { _, err := readOutputFile(tc.path, manifests.MaxOutputFileBytes); done <- err }()
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("readOutputFile blocked")
			}
			if got := manifests.OutputErrorCode(err); got != tc.code {
				t.Fatalf("code %q (%v), want %q", got, err, tc.code)
			}
		})
	}
}

func TestClaimFromAndRequired(t *testing.T) {
	specs := map[string]manifests.JobOutputSpec{"count": {Type: "integer"}, "name": {Type: "string"}}
	yes := true
	in := func(claims map[string]manifests.StepOutputClaim) RunStepInput {
		o := &manifests.StepOutputs{Claims: claims}
		return RunStepInput{Action: manifests.Step{Outputs: o}, Claimed: o.Keys(), OutputSpecs: specs}
	}
	cases := []struct {
		name   string
		claims map[string]manifests.StepOutputClaim
		file   string
		want   map[string]any
		code   string
	}{
		{"from maps the file key", map[string]manifests.StepOutputClaim{"count": {From: "n"}}, "n=3\n", map[string]any{"count": 3.0}, ""},
		{"from: the output key itself is not the file key", map[string]manifests.StepOutputClaim{"count": {From: "n"}}, "count=3\n", nil, manifests.CodeOutputInvalid},
		{"required and present", map[string]manifests.StepOutputClaim{"name": {Required: &yes}}, "name=ann\n", map[string]any{"name": "ann"}, ""},
		{"required and absent", map[string]manifests.StepOutputClaim{"name": {Required: &yes}, "count": {}}, "count=1\n", nil, manifests.CodeOutputMissing},
		{"required through from, absent", map[string]manifests.StepOutputClaim{"count": {From: "n", Required: &yes}}, "", nil, manifests.CodeOutputMissing},
		{"not required and absent", map[string]manifests.StepOutputClaim{"name": {}}, "", map[string]any{}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseClaimedOutputs([]byte(tc.file), in(tc.claims))
			if code := manifests.OutputErrorCode(err); code != tc.code {
				t.Fatalf("code %q (%v), want %q", code, err, tc.code)
			}
			if tc.code == "" && !manifests.Equal(map[string]any(got), map[string]any(tc.want)) {
				t.Fatalf("values %v, want %v", got, tc.want)
			}
		})
	}
}

func TestStepFailureFromError(t *testing.T) {
	cases := []struct {
		name   string
		err    error
		status run.Status
		code   string
	}{
		{"start to close", temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, nil), run.TimedOut, "TIMEOUT"},
		{"heartbeat", temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil), run.Failed, "HEARTBEAT_TIMEOUT"},
		{"typed", temporal.NewNonRetryableApplicationError("x", sandbox.CodeCommandNotFound, nil), run.Failed, sandbox.CodeCommandNotFound},
		{"other", errors.New("boom"), run.Failed, "EXEC_FAILED"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := StepFailureFromError("t", "s", tc.err)
			if got.Status != tc.status || got.ErrorCode != tc.code {
				t.Fatalf("got %s/%s, want %s/%s", got.Status, got.ErrorCode, tc.status, tc.code)
			}
		})
	}
}

func TestAcquireFailure(t *testing.T) {
	for _, tc := range []struct {
		err   error
		code  string
		class run.FailureClass
	}{
		{temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil), sandbox.CodeProvisioningFailed, run.ClassInfra},
		{errors.New("boom"), sandbox.CodeProvisioningFailed, run.ClassInfra},
		{temporal.NewNonRetryableApplicationError("x", sandbox.CodeNotFound, nil), sandbox.CodeNotFound, run.ClassInfra},
		{temporal.NewNonRetryableApplicationError("x", "TEMPLATE_INVALID", nil), "TEMPLATE_INVALID", run.ClassConfig},
	} {
		got := AcquireFailure("t", tc.err)
		if got.Status != run.Failed || got.ErrorCode != tc.code || got.FailureClass != tc.class || got.Step != "" {
			t.Errorf("AcquireFailure(%v) = %+v, want %s/%s", tc.err, got, tc.code, tc.class)
		}
	}
}

func TestProvisionName(t *testing.T) {
	if a, b := ProvisionName("jr_abc", 1), ProvisionName("jr_abc", 1); a != b || a != "sbx-jr_abc-1" {
		t.Fatalf("ProvisionName = %q, %q", a, b)
	}
	if ProvisionName("jr_abc", 0) == ProvisionName("jr_abc", 1) {
		t.Fatal("tasks share a name")
	}
	if n := ProvisionName("weird/id "+strings.Repeat("x", 200), 0); len(n) > 128 || strings.ContainsAny(n, "/ ") {
		t.Fatalf("ProvisionName of an odd id = %q", n)
	}
}

// TestStoppedRunIsCharged: a step cut off by a stop reports no cost of its
// own; the run is still charged for the time it ran, at its task's size.
func TestStoppedRunIsCharged(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	running := store.StepTimelineEntry{Name: "s", TaskName: "big", Status: run.Running, StartedAt: &start}
	pending := store.StepTimelineEntry{Name: "s2", TaskName: "big", Status: run.Pending}
	st := &runStore{runs: map[string]store.JobRun{"jr_1": {ID: "jr_1", Status: run.Running, StepTimeline: []store.StepTimelineEntry{running, pending}}}}
	a := &Activities{Store: st, Now: func() time.Time { return start.Add(2 * time.Hour) },
		Rates: CostRates{CentsPerVCPUHour: 10, CentsPerGBHour: 3}}
	four, mem := 4, 1024
	m := manifests.JobManifest{Run: manifests.RunSection{Tasks: []manifests.Task{{Name: "big",
		Sandbox: &manifests.SandboxConfig{Vcpus: &four, MemoryMB: &mem}, Steps: []manifests.Step{{Exec: []string{"sleep", "1h"}}}}}}}
	if _, err := a.FinishRun(context.Background(), FinishRunInput{RunID: "jr_1", Manifest: m, Outcome: run.Outcome{Status: run.Cancelled}}); err != nil {
		t.Fatal(err)
	}
	r := st.runs["jr_1"]
	// two hours × (4 vCPU × 10 + 1 GiB × 3)
	if r.ComputeCostCents != 86 || r.TotalCostCents != 86 {
		t.Fatalf("stopped run costs: compute %d total %d, want 86", r.ComputeCostCents, r.TotalCostCents)
	}
	if got := r.StepTimeline[0].Status + "," + r.StepTimeline[1].Status; got != "cancelled,cancelled" {
		t.Fatalf("timeline %s, want cancelled,cancelled", got)
	}
}

// TestMissingOutputNamesItsStep: a required output its claiming step did not
// write fails the run naming that step.
func TestMissingOutputNamesItsStep(t *testing.T) {
	m, err := manifests.ParseJob([]byte(manifesttest.Job("two-outputs-unwritten")), manifests.FormatTOML)
	if err != nil {
		t.Fatal(err)
	}
	manifests.NormalizeJob(m)
	st := &runStore{runs: map[string]store.JobRun{"jr_1": {ID: "jr_1", Status: run.Running}}}
	a := &Activities{Store: st, Now: time.Now}
	writes := []manifests.OutputWrite{{Task: "t", Step: "w", Succeeded: true, Values: map[string]any{"y": 1.0}}}
	res, err := a.FinishRun(context.Background(), FinishRunInput{RunID: "jr_1", Manifest: *m, Outcome: run.Outcome{Status: run.Succeeded}, Writes: writes})
	if err != nil {
		t.Fatal(err)
	}
	r := st.runs["jr_1"]
	if res.Status != run.Failed || res.FailureClass != "contract" || r.ErrorDetails["step_name"] != "w" || r.ErrorDetails["task_name"] != "t" {
		t.Fatalf("run %s/%s, error details %v; want failed/contract naming t/w", res.Status, res.FailureClass, r.ErrorDetails)
	}
}
