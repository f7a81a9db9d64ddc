package workflows

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/manifesttest"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// chainRun is a job run driven through its chain of Temporal runs.
type chainRun struct {
	res     JobRunResult
	rec     store.JobRun
	inputs  []JobRunInput // the input of each Temporal run
	acquire int           // AcquireSandbox calls, over all runs
}

// runChain runs a job run to its end, starting the next Temporal run with
// the input each one continued as new with; setup(env, n) prepares run n.
func (f *fixture) runChain(t *testing.T, m manifests.JobManifest, perRun int, setup func(env *testsuite.TestWorkflowEnvironment, n int)) chainRun {
	t.Helper()
	old := MaxStepsPerRun
	MaxStepsPerRun = perRun
	t.Cleanup(func() { MaxStepsPerRun = old })
	id := run.NewJobRunID()
	f.store.runs[id] = store.JobRun{ID: id, Status: run.Queued}
	applied, ps := manifests.ApplyParams(m.Job.Params, nil)
	if ps != nil {
		t.Fatal(ps)
	}
	in := JobRunInput{RunID: id, JobName: m.Job.Name, Manifest: m, Params: applied}
	var out chainRun
	var acquired atomic.Int32
	for n := 0; n < 100; n++ {
		out.inputs = append(out.inputs, in)
		env := f.suite.NewTestWorkflowEnvironment()
		env.RegisterWorkflowWithOptions(JobRunWorkflow, workflowOptions())
		env.RegisterActivity(f.acts)
		env.SetTestTimeout(60 * time.Second)
		env.OnActivity(f.acts.AcquireSandbox, mock.Anything, mock.Anything).Return(
			func(ctx context.Context, in activities.AcquireSandboxInput) (activities.AcquireSandboxResult, error) {
				acquired.Add(1)
				return f.acts.AcquireSandbox(ctx, in)
			})
		if setup != nil {
			setup(env, n)
		}
		env.ExecuteWorkflow(JobRunWorkflowName, in)
		if !env.IsWorkflowCompleted() {
			t.Fatal("workflow did not complete")
		}
		err := env.GetWorkflowError()
		var can *workflow.ContinueAsNewError
		if errors.As(err, &can) {
			in = JobRunInput{}
			if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &in); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("workflow error: %v", err)
		}
		if err := env.GetWorkflowResult(&out.res); err != nil {
			t.Fatal(err)
		}
		out.rec, _ = f.store.GetJobRun(context.Background(), id)
		out.acquire = int(acquired.Load())
		return out
	}
	t.Fatal("the chain did not end in 100 runs")
	return out
}

// countJob is a job of tasks × steps steps; step i of task t appends
// "t.i" to the output "seen" and its task's file in its sandbox, and the
// last step of each task checks that file holds every step of the task (the
// sandbox is the same one across runs).
func countJob(tasks, steps int, fanout bool, extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[job]\nname = \"count\"\n[run]\nfanout = %v\nconcurrency = 2\n%s\n[outputs.seen]\ntype = \"array\"\nitems = \"string\"\nreduce = \"gather\"\n", fanout, extra)
	for t := range tasks {
		fmt.Fprintf(&b, "[[run.tasks]]\nname = \"t%d\"\n", t)
		for i := range steps {
			check := ""
			if i == steps-1 {
				check = fmt.Sprintf(" && test \"$(cat mine | tr '\\n' ' ')\" = \"%s\"", wantLines(t, steps))
			}
			fmt.Fprintf(&b, "[[run.tasks.steps]]\nname = \"s%d\"\nexec = [\"sh\", \"-c\", \"echo %d.%d >> mine && echo 'seen=[\\\"%d.%d\\\"]' >> $SVC_OUTPUT%s\"]\noutputs = [\"seen\"]\n",
				i, t, i, t, i, strings.ReplaceAll(check, `"`, `\"`))
		}
	}
	return b.String()
}

func wantLines(t, steps int) string {
	var b strings.Builder
	for i := range steps {
		fmt.Fprintf(&b, "%d.%d ", t, i)
	}
	return b.String()
}

func TestJobRunContinuesAsNewInOrder(t *testing.T) {
	f := newFixture(t)
	m := parseJob(t, countJob(2, 4, false, ""))
	c := f.runChain(t, m, 3, nil)
	if c.res.Status != run.Succeeded || c.rec.Status != run.Succeeded {
		t.Fatalf("status %s / %s: %s %s", c.res.Status, c.rec.Status, c.res.ErrorCode, c.res.ErrorMessage)
	}
	// 8 steps, 3 per run: 3 runs; each task acquired its sandbox once.
	if len(c.inputs) != 3 || c.acquire != 2 {
		t.Fatalf("%d runs, %d acquires; want 3 and 2", len(c.inputs), c.acquire)
	}
	r := c.inputs[1].Resume
	if r == nil || r.Runs != 1 || r.Steps != 3 || r.Tasks[0].State != taskPaused || r.Tasks[0].Next != 3 ||
		r.Tasks[0].Sandbox.Name == "" || len(r.Tasks[0].Writes) != 3 || r.Tasks[1].State != taskNotBegun {
		t.Fatalf("second run resumes from %+v", r)
	}
	// The paused step's end, which the next step's start would have
	// written, goes with the chain, after the ends written but not
	// durably (the next steps' starts), for a durable write to carry again.
	var carried []string
	for _, e := range r.Ends {
		if e.Task != "t0" || e.Status != run.Succeeded {
			t.Fatalf("second run carries the ends %+v", r.Ends)
		}
		carried = append(carried, e.Step)
	}
	if strings.Join(carried, ",") != "s0,s1,s2" {
		t.Fatalf("second run carries the ends of %v, want s0,s1 written and s2 not", carried)
	}
	if r := c.inputs[2].Resume; r.Runs != 2 || r.Steps != 6 || r.Tasks[0].State != taskDone || r.Tasks[1].Next != 2 {
		t.Fatalf("third run resumes from %+v", r)
	}
	wantSeen(t, c, 2, 4)
	if got := timeline(c.rec); got != strings.TrimSuffix(strings.Repeat("succeeded,", 8), ",") {
		t.Fatalf("timeline %s", got)
	}
}

// wantSeen checks the run's "seen" output holds every step once, in task
// then step order, and its compute cost counts every run of the chain.
func wantSeen(t *testing.T, c chainRun, tasks, steps int) {
	t.Helper()
	seen, _ := c.rec.ResultPayload["outputs"].(map[string]any)["seen"].([]any)
	var want []any
	for task := range tasks {
		for step := range steps {
			want = append(want, fmt.Sprintf("%d.%d", task, step))
		}
	}
	if !manifests.Equal(seen, want) {
		t.Fatalf("seen %v, want %v", seen, want)
	}
	var cost float64
	for _, in := range c.inputs[1:] {
		for _, p := range in.Resume.Tasks {
			cost += p.Cost
		}
	}
	if cost <= 0 || c.rec.ComputeCostCents <= 0 {
		t.Fatalf("carried compute cost %v, recorded %d", cost, c.rec.ComputeCostCents)
	}
}

func TestJobRunContinuesAsNewInParallel(t *testing.T) {
	f := newFixture(t)
	m := parseJob(t, countJob(3, 4, true, ""))
	c := f.runChain(t, m, 3, nil)
	if c.res.Status != run.Succeeded || c.rec.Status != run.Succeeded {
		t.Fatalf("status %s / %s: %s %s", c.res.Status, c.rec.Status, c.res.ErrorCode, c.res.ErrorMessage)
	}
	if len(c.inputs) < 3 || c.acquire != 3 {
		t.Fatalf("%d runs, %d acquires; want at least 3 and 3", len(c.inputs), c.acquire)
	}
	// A run continues only when every task it began has paused or ended,
	// and it begins no task while pausing.
	for _, in := range c.inputs[1:] {
		for i, p := range in.Resume.Tasks {
			if p.State == taskPaused && (p.Next == 0 && p.Sandbox.Name == "" || p.Next >= 4) {
				t.Fatalf("task %d carried as %+v", i, p)
			}
		}
	}
	wantSeen(t, c, 3, 4)
}

func TestJobRunContinueAsNewKeepsTheDeadline(t *testing.T) {
	f := newFixture(t)
	m := parseJob(t, countJob(1, 4, false, "timeout = \"1h\""))
	var started time.Time
	c := f.runChain(t, m, 2, func(env *testsuite.TestWorkflowEnvironment, n int) {
		switch n {
		case 0:
			started = time.Now().Truncate(time.Second)
			env.SetStartTime(started)
		case 1:
			// The second run begins after run.timeout has passed since the
			// first began: it times out without running a step.
			env.SetStartTime(started.Add(time.Hour + time.Minute))
		}
	})
	if len(c.inputs) != 2 || c.res.Status != run.TimedOut || c.rec.Status != run.TimedOut {
		t.Fatalf("%d runs, status %s / %s", len(c.inputs), c.res.Status, c.rec.Status)
	}
	if dl := c.inputs[1].Resume.Deadline; dl == nil || !dl.Equal(started.Add(time.Hour)) {
		t.Fatalf("carried deadline %v, want %v", dl, started.Add(time.Hour))
	}
	if got := timeline(c.rec); !strings.HasPrefix(got, "succeeded,succeeded,") || strings.Count(got, "succeeded") != 2 {
		t.Fatalf("timeline %s", got)
	}
}

func TestJobRunContinueAsNewCarriesTheStopNote(t *testing.T) {
	f := newFixture(t)
	m := parseJob(t, countJob(1, 3, false, ""))
	note := StopNote{Code: run.CodeLineTimeout, Class: run.ClassConfig, Message: "the line timed out"}
	c := f.runChain(t, m, 1, func(env *testsuite.TestWorkflowEnvironment, n int) {
		switch n {
		case 0: // signalled in the first run; the cancel reaches the second
			env.RegisterDelayedCallback(func() { env.SignalWorkflow(StopSignal, note) }, 0)
		case 1:
			env.OnActivity(f.acts.RunStep, mock.Anything, mock.Anything).Return(
				func(ctx context.Context, _ activities.RunStepInput) (activities.RunStepResult, error) {
					<-ctx.Done()
					return activities.RunStepResult{}, ctx.Err()
				})
			env.RegisterDelayedCallback(env.CancelWorkflow, 100*time.Millisecond)
		}
	})
	if len(c.inputs) != 2 || c.inputs[1].Resume.Stop == nil || *c.inputs[1].Resume.Stop != note {
		t.Fatalf("%d runs; carried %+v", len(c.inputs), c.inputs[len(c.inputs)-1].Resume)
	}
	if c.rec.Status != run.Cancelled || c.rec.ErrorCode == nil || *c.rec.ErrorCode != note.Code {
		t.Fatalf("record %s %v", c.rec.Status, c.rec.ErrorCode)
	}
}

func TestJobRunOldHistoriesDoNotContinueAsNew(t *testing.T) {
	f := newFixture(t)
	m := parseJob(t, countJob(1, 3, false, ""))
	c := f.runChain(t, m, 1, func(env *testsuite.TestWorkflowEnvironment, _ int) {
		env.OnGetVersion(localSandboxChange, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion) // it implies continueAsNewChange
		env.OnGetVersion(continueAsNewChange, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	})
	if len(c.inputs) != 1 || c.rec.Status != run.Succeeded {
		t.Fatalf("%d runs, status %s", len(c.inputs), c.rec.Status)
	}
}

func TestJobRunContinueAsNewCarriesAFailure(t *testing.T) {
	f := newFixture(t)
	m := parseJob(t, `
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
[[run.tasks.steps]]
exec = ["true"]
`)
	c := f.runChain(t, m, 1, nil)
	if len(c.inputs) != 3 || !c.inputs[1].Resume.Tasks[0].Failed {
		t.Fatalf("%d runs; the second resumes from %+v", len(c.inputs), c.inputs[min(1, len(c.inputs)-1)].Resume)
	}
	if c.rec.Status != run.Failed || c.rec.ErrorCode == nil || *c.rec.ErrorCode != "EXEC_FAILED" || timeline(c.rec) != "failed,succeeded,succeeded" {
		t.Fatalf("record %s %v, timeline %s", c.rec.Status, c.rec.ErrorCode, timeline(c.rec))
	}
}

func TestJobRunTooLargeToContinueAsNew(t *testing.T) {
	f := newFixture(t)
	old := maxResumeBytes
	maxResumeBytes = 100 // less than any input
	t.Cleanup(func() { maxResumeBytes = old })
	c := f.runChain(t, parseJob(t, countJob(1, 3, false, "")), 1, nil)
	if len(c.inputs) != 1 || c.rec.Status != run.Succeeded {
		t.Fatalf("%d runs, status %s; want one run that succeeds", len(c.inputs), c.rec.Status)
	}
}

// TestLineRunStageContinuesAsNew: a line run's stage whose job run
// continues as new is waited for to the end of the chain, with its
// outputs.
func TestLineRunStageContinuesAsNew(t *testing.T) {
	old := MaxStepsPerRun
	MaxStepsPerRun = 1
	t.Cleanup(func() { MaxStepsPerRun = old })
	f := newFixture(t)
	in := lineInput(t, manifesttest.OneStageLine("l", manifesttest.Manual, "a", "hello"), nil)
	in.Jobs["a"] = StageJob{JobName: "count", JobVersionID: "jv_count", Manifest: parseJob(t, countJob(1, 3, false, ""))}
	res, rec := f.runLine(t, in, nil)
	if res.Status != run.Succeeded || len(rec.Stages) != 1 {
		t.Fatalf("status %s %+v, stages %+v", res.Status, res.Failure, rec.Stages)
	}
	jr := f.store.runs[*rec.Stages[0].JobRunID]
	seen := jr.ResultPayload["outputs"].(map[string]any)["seen"]
	if jr.Status != run.Succeeded || !manifests.Equal(seen, []any{"0.0", "0.1", "0.2"}) {
		t.Fatalf("stage job run %s, seen %v", jr.Status, seen)
	}
}
