package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/manifesttest"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// lineJob is the stage job of that name (manifests/manifesttest's
// testdata/jobs), parsed.
func lineJob(t *testing.T, name string) manifests.JobManifest {
	t.Helper()
	return parseJob(t, manifesttest.Job(name))
}

func lineInput(t *testing.T, src string, params map[string]any) LineRunInput {
	t.Helper()
	m, err := manifests.ParseLine([]byte(src), manifests.FormatTOML)
	if err != nil {
		t.Fatal(err)
	}
	if ps := manifests.ValidateLine(m); ps != nil {
		t.Fatalf("invalid line: %v", ps)
	}
	manifests.NormalizeLine(m)
	jobs := map[string]StageJob{}
	for _, s := range m.Stages {
		jobs[s.ID] = StageJob{JobName: s.Job, JobVersionID: "jv_" + s.Job, Manifest: lineJob(t, s.Job)}
	}
	return LineRunInput{Version: LineRunInputVersion, RunID: run.NewLineRunID(), LineName: m.Line.Name, Manifest: *m, Jobs: jobs, Params: params, Trigger: map[string]any{}}
}

// lineOpts adjusts a line run under test: setup prepares the first turn's
// environment; child replaces the JobRunWorkflow.
type lineOpts struct {
	setup func(env *testsuite.TestWorkflowEnvironment)
	child any
	// conv, when set, encodes every payload of every turn.
	conv   converter.DataConverter
	record *store.LineRun // the initial record (default: a queued run)
}

// runLine runs every manager turn to the end, starting each continue-as-new
// turn as the server would, and returns the result and the line-run record.
// After every turn the state query must answer with the stored record.
func (f *fixture) runLine(t *testing.T, in LineRunInput, setup func(env *testsuite.TestWorkflowEnvironment)) (LineRunResult, store.LineRun) {
	t.Helper()
	return f.runLineWith(t, in, lineOpts{setup: setup})
}

func (f *fixture) runLineWith(t *testing.T, in LineRunInput, o lineOpts) (LineRunResult, store.LineRun) {
	t.Helper()
	rec := store.LineRun{ID: in.RunID, Status: run.Queued}
	if o.record != nil {
		rec = *o.record
	}
	f.store.mu.Lock()
	f.store.lines[in.RunID] = rec
	f.store.mu.Unlock()
	f.runs = 0
	for turn := 0; turn < 200; turn++ {
		f.runs++
		env := f.suite.NewTestWorkflowEnvironment()
		switch {
		case o.child != nil:
			env.RegisterWorkflowWithOptions(o.child, workflow.RegisterOptions{Name: JobRunWorkflowName})
		default:
			env.RegisterWorkflowWithOptions(JobRunWorkflow, workflowOptions())
		}
		env.RegisterWorkflowWithOptions(LineRunWorkflow, workflow.RegisterOptions{Name: LineRunWorkflowName})
		env.RegisterActivity(f.acts)
		env.SetTestTimeout(60 * time.Second)
		if o.conv != nil {
			env.SetDataConverter(o.conv)
		}
		if o.setup != nil && turn == 0 {
			o.setup(env)
		}
		env.ExecuteWorkflow(LineRunWorkflowName, in)
		err := env.GetWorkflowError()
		var can *workflow.ContinueAsNewError
		ended := !errors.As(err, &can)
		if c, ok := o.conv.(*countingConverter); ok {
			c.paused.Store(true) // a query is no part of the history
		}
		f.checkQuery(t, env, in.RunID, ended && err == nil)
		if c, ok := o.conv.(*countingConverter); ok {
			c.paused.Store(false)
		}
		if !ended {
			if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &in); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("line workflow error: %v", err)
		}
		var res LineRunResult
		if err := env.GetWorkflowResult(&res); err != nil {
			t.Fatal(err)
		}
		return res, f.line(in.RunID)
	}
	t.Fatal("the line never ended")
	return LineRunResult{}, store.LineRun{}
}

func (f *fixture) line(id string) store.LineRun {
	f.store.mu.Lock()
	defer f.store.mu.Unlock()
	return f.store.lines[id]
}

// checkQuery compares the state query's answer with the stored record:
// the final record once the run has ended; before, the record's fields that
// do not grow with the run, and this turn's visits.
func (f *fixture) checkQuery(t *testing.T, env *testsuite.TestWorkflowEnvironment, id string, ended bool) {
	t.Helper()
	v, err := env.QueryWorkflow(StateQuery)
	if err != nil {
		t.Fatalf("state query: %v", err)
	}
	var got map[string]any
	if err := v.Get(&got); err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	wb, _ := json.Marshal(f.line(id))
	if err := json.Unmarshal(wb, &want); err != nil {
		t.Fatal(err)
	}
	keys := []string{"id", "line_name", "line_version_id", "trigger", "triggered_by_actor", "run_params", "created_at", "workflow_id", "started_at", "region"}
	if ended {
		keys = slices.Sorted(maps.Keys(want))
	}
	for _, k := range keys {
		if g, w := jsonOf(got[k]), jsonOf(want[k]); g != w {
			t.Fatalf("state query %s = %s, the record has %s", k, g, w)
		}
	}
	byJobRun := map[any]map[string]any{}
	wantStages, _ := want["stages"].([]any)
	for _, s := range wantStages {
		byJobRun[s.(map[string]any)["job_run_id"]] = s.(map[string]any)
	}
	stages, ok := got["stages"].([]any)
	if !ok && (got["stages"] != nil || wantStages != nil) {
		t.Fatalf("state query stages %v", got["stages"])
	}
	for _, s := range stages {
		q := s.(map[string]any)
		r := byJobRun[q["job_run_id"]]
		for _, k := range []string{"stage_name", "iteration", "status", "stage_order"} {
			if r == nil || jsonOf(q[k]) != jsonOf(r[k]) {
				t.Fatalf("state query visit %v, the record has %v", q, r)
			}
		}
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestLineRunLoopUntilOutput(t *testing.T) {
	f := newFixture(t)
	in := lineInput(t, manifesttest.Line("loop-until-output"), nil)
	// "who" is a string param: an integer output bound to it is rejected...
	res, rec := f.runLine(t, in, nil)
	if res.Status != run.Failed || res.Failure.Code != "stage_params_invalid" || res.Failure.Domain != "config" {
		t.Fatalf("binding an integer to a string param: %+v", res.Failure)
	}
	// ...and a literal string binding works: three visits of inc, one of fin.
	f = newFixture(t)
	in.Manifest.Transitions[1].Params = map[string]manifests.ParamBinding{"who": {Type: manifests.BindLiteral, Value: "loop"}}
	res, rec = f.runLine(t, in, nil)
	if res.Status != run.Succeeded {
		t.Fatalf("status %s %+v", res.Status, res.Failure)
	}
	var got []string
	for _, s := range rec.Stages {
		outcome := ""
		if s.Outcome != nil {
			outcome = *s.Outcome
		}
		got = append(got, s.StageName+"#"+itoa(s.Iteration)+":"+outcome)
	}
	if want := "inc#1:again inc#2:again inc#3:done fin#1:"; strings.Join(got, " ") != want {
		t.Fatalf("stages %v, want %s", got, want)
	}
	// Four turns in one Temporal run: no continue-as-new per turn.
	if len(rec.ManagerTurns) != 4 || rec.ManagerTurns[3].State != "completed" || rec.ManagerTurns[0].State != "continued" ||
		rec.ManagerTurns[0].WorkflowRunID != rec.ManagerTurns[3].WorkflowRunID || f.runs != 1 {
		t.Fatalf("manager turns %+v in %d runs", rec.ManagerTurns, f.runs)
	}
	if rec.StageOutputs["fin"]["greeting"] != "hi-loop" || len(rec.Transitions) != 3 {
		t.Fatalf("outputs %v transitions %v", rec.StageOutputs, rec.Transitions)
	}
	if rec.TotalCostCents < 4 || rec.Status != run.Succeeded {
		t.Fatalf("costs/status: %d %s", rec.TotalCostCents, rec.Status)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestLineRunFailures(t *testing.T) {
	cases := []struct {
		name, src    string
		params       map[string]any
		code, domain string
	}{
		{"ambiguous_transition", manifesttest.Line("ambiguous-transition"), nil, "ambiguous_transition", "config"},
		{"no_route", manifesttest.Line("no-route"), nil, "no_route", "config"},
		{"stage_failed takes the job's class", oneStage("fail") + "max_attempts = 2\n", nil, "stage_failed", "config"},
		{"transition max_iterations", manifesttest.Line("inc-loop", map[string]any{"transition": "max_iterations = 2", "limits": ""}), nil, "max_iterations_exhausted", "config"},
		{"line max_iterations", manifesttest.Line("inc-loop", map[string]any{"transition": "", "limits": "[limits]\nmax_iterations = 3"}), nil, "max_iterations_exhausted", "config"},
		{"budget_exceeded", manifesttest.Line("inc-loop", map[string]any{"transition": "", "limits": "[limits]\nbudget_usd = \"0.00\""}), nil, "budget_exceeded", "config"},
		{"line_timeout", oneStage("slow") + "[limits]\ntimeout = \"1s\"\n", nil, "line_timeout", "config"},
		{"transition_params_invalid", manifesttest.Line("transition-params-invalid"), nil, "transition_params_invalid", "config"},
		{"stage_params_invalid", oneStage("hello"), map[string]any{"who": 5.0}, "stage_params_invalid", "config"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			res, rec := f.runLine(t, lineInput(t, tc.src, tc.params), nil)
			if res.Status != run.Failed || res.Failure == nil || string(res.Failure.Code) != tc.code || string(res.Failure.Domain) != tc.domain {
				t.Fatalf("got %s %+v, want failed %s/%s", res.Status, res.Failure, tc.code, tc.domain)
			}
			if rec.Failure == nil || string(*rec.Failure.Code) != tc.code || rec.CompletedAt == nil || rec.Failure.StageName == nil {
				t.Fatalf("record failure %+v", rec.Failure)
			}
		})
	}
	// stage_failed is enriched with the failing step.
	f := newFixture(t)
	_, rec := f.runLine(t, lineInput(t, oneStage("fail")+"max_attempts = 2\n", nil), nil)
	if rec.Failure.StageStep == nil || *rec.Failure.StageStep != "boom" || *rec.Failure.TaskName != "t" || *rec.Failure.ErrorCode != "EXEC_FAILED" || len(rec.Stages) != 2 {
		t.Fatalf("failure %+v stages %d", rec.Failure, len(rec.Stages))
	}
}

func TestLineRunStop(t *testing.T) {
	f := newFixture(t)
	res, rec := f.runLine(t, lineInput(t, oneStage("slow"), nil), func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterDelayedCallback(env.CancelWorkflow, 500*time.Millisecond)
	})
	if res.Status != run.Cancelled || res.Failure.Code != "user_cancelled" || res.Failure.Domain != "user" || rec.Status != run.Cancelled {
		t.Fatalf("stop: %s %+v", res.Status, res.Failure)
	}
}

func TestBindParamsAllKinds(t *testing.T) {
	job := manifests.JobManifest{Job: manifests.JobSection{Params: map[string]manifests.JobParamSpec{
		"a": {Type: manifests.TypeString}, "b": {Type: manifests.TypeString}, "c": {Type: manifests.TypeInteger},
		"d": {Type: manifests.TypeString}, "e": {Type: manifests.TypeString},
	}}}
	in := LineRunInput{Params: map[string]any{"name": "ann", "d": "from-run", "unrelated": 1}}
	st := &LineState{Results: map[string]manifests.StageResult{"s1": {Status: "succeeded", Outputs: map[string]any{"n": 7.0}}}}
	got, err := bindParams(map[string]manifests.ParamBinding{
		"a": {Type: manifests.BindInput, Name: "name"},
		"b": {Type: manifests.BindLiteral, Value: "lit"},
		"c": {Type: manifests.BindOutput, Stage: "s1", Name: "n"},
	}, in, st, job)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"a": "ann", "b": "lit", "c": 7.0, "d": "from-run"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	yes := true
	job.Job.Params["r"] = manifests.JobParamSpec{Type: manifests.TypeString, Required: &yes}
	for name, b := range map[string]manifests.ParamBinding{
		"missing output": {Type: manifests.BindOutput, Stage: "s1", Name: "zzz"},
		"stage not run":  {Type: manifests.BindOutput, Stage: "s9", Name: "n"},
		"missing input":  {Type: manifests.BindInput, Name: "zzz"},
	} {
		if _, err := bindParams(map[string]manifests.ParamBinding{"r": b}, in, st, job); err == nil {
			t.Errorf("%s: bound without error", name)
		}
	}
	// An input the run was not given leaves an optional param unset.
	got, err = bindParams(map[string]manifests.ParamBinding{"a": {Type: manifests.BindInput, Name: "zzz"}}, in, st, job)
	if _, set := got["a"]; err != nil || set {
		t.Fatalf("optional param bound to a missing input: %v, %v", got, err)
	}
}

// TestLineRunEntryTakesItsOwnParams: a line run accepts the params of later
// stages' jobs (API.md, README "Line run failures": the deployment's
// input_params); the entry stage's job gets only the ones it declares, and
// the later stage gets its own by name.
func TestLineRunEntryTakesItsOwnParams(t *testing.T) {
	f := newFixture(t)
	in := lineInput(t, manifesttest.Line("entry-params"), map[string]any{"who": "bob"})
	res, rec := f.runLine(t, in, nil)
	if res.Status != run.Succeeded {
		t.Fatalf("status %s, failure %+v; want succeeded", res.Status, res.Failure)
	}
	if got := rec.StageOutputs["fin"]["greeting"]; got != "hi-bob" {
		t.Fatalf("fin's greeting %v, want hi-bob (who filled from the run params)", got)
	}
	if got := entryParams(nil, manifests.JobManifest{}); got != nil {
		t.Fatalf("entryParams(nil) = %v, want nil", got)
	}
}

// TestLineRunRetryFromSnapshot: a retried line run starts at the given stage
// with the earlier stages' results carried over.
func TestLineRunRetryFromSnapshot(t *testing.T) {
	f := newFixture(t)
	in := lineInput(t, manifesttest.Line("retry-chain", map[string]any{"second": "hello",
		"carried": `{ op = "eq", left = { type = "stage", stage = "first", path = "outputs.greeting" }, right = { type = "literal", value = "hi-carried" } }`}), nil)
	in.State = &LineState{Stage: "second", StageParams: map[string]any{"who": "retried"}, Iterations: map[string]int{"first": 1},
		Transitions: map[string]int{"next": 1}, Results: map[string]manifests.StageResult{"first": {Status: "succeeded", Outputs: map[string]any{"greeting": "hi-carried"}}},
		StartedAt: time.Now()}
	res, rec := f.runLine(t, in, nil)
	if res.Status != run.Succeeded {
		t.Fatalf("retry: %s %+v", res.Status, res.Failure)
	}
	// The run began at the retried stage, and routing saw the carried result.
	if len(rec.Stages) != 2 || rec.Stages[0].StageName != "second" || rec.Stages[1].StageName != "third" || rec.StageOutputs["second"]["greeting"] != "hi-retried" {
		t.Fatalf("stages %+v outputs %v", rec.Stages, rec.StageOutputs)
	}
}

// oneStage is line l, started by hand, with one stage s running job.
func oneStage(job string) string {
	return manifesttest.OneStageLine("l", manifesttest.Manual, "s", job)
}

// TestLineRunStopOutsideVisit: a stop that lands while no stage runs (a
// queued run, between bookkeeping steps, before the child starts) still
// ends the run cancelled, and leaves no job run queued.
func TestLineRunStopOutsideVisit(t *testing.T) {
	t.Run("queued", func(t *testing.T) {
		f := newFixture(t)
		res, rec := f.runLine(t, lineInput(t, oneStage("hello"), nil), func(env *testsuite.TestWorkflowEnvironment) {
			env.RegisterDelayedCallback(env.CancelWorkflow, 0)
		})
		if res.Status != run.Cancelled || res.Failure == nil || res.Failure.Code != "user_cancelled" || rec.Status != run.Cancelled ||
			rec.Failure == nil || rec.Failure.Domain != "user" || rec.CompletedAt == nil {
			t.Fatalf("stop of a queued run: %s %+v record %+v", res.Status, res.Failure, rec)
		}
	})
	// Input version 1 writes the transition by itself; 2 with the next
	// turn and its visit's job run (LineWrites).
	for _, v := range []int{1, LineRunInputVersion} {
		t.Run(fmt.Sprintf("during the transition's write, input version %d", v), func(t *testing.T) {
			f := newFixture(t)
			in := lineInput(t, manifesttest.Line("two-stages-always"), nil)
			in.Version = v
			res, rec := f.runLine(t, in, func(env *testsuite.TestWorkflowEnvironment) {
				env.OnActivity(f.acts.RecordTransition, mock.Anything, mock.Anything).Return(func(context.Context, activities.RecordTransitionInput) error {
					env.CancelWorkflow()
					return temporal.NewNonRetryableApplicationError("store down", "X", nil)
				})
				failed := false
				env.OnActivity(f.acts.LineWrites, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.LineWritesInput) (activities.LineWritesResult, error) {
					if in.Transition != nil && !failed {
						failed = true
						env.CancelWorkflow()
						return activities.LineWritesResult{}, temporal.NewNonRetryableApplicationError("store down", "X", nil)
					}
					return f.acts.LineWrites(ctx, in)
				})
			})
			if res.Status != run.Cancelled || rec.Status != run.Cancelled || *rec.Failure.Code != "user_cancelled" {
				t.Fatalf("stop during the transition's write: %s %+v", res.Status, res.Failure)
			}
			// The transition is written with the run's end.
			if v >= 2 && (len(rec.Transitions) != 1 || len(rec.Stages) != 1 || rec.Stages[0].Outcome == nil) {
				t.Fatalf("transitions %+v stages %+v", rec.Transitions, rec.Stages)
			}
		})
		t.Run(fmt.Sprintf("before the child starts, input version %d", v), func(t *testing.T) {
			f := newFixture(t)
			in := lineInput(t, oneStage("hello"), nil)
			in.Version = v
			res, rec := f.runLine(t, in, func(env *testsuite.TestWorkflowEnvironment) {
				onCreateStageRun(env, f, func(ctx context.Context, create func(context.Context) error) error {
					err := create(ctx)
					env.CancelWorkflow()
					return err
				})
			})
			if res.Status != run.Cancelled || rec.Status != run.Cancelled || len(rec.Stages) != 1 || rec.Stages[0].Status != run.Cancelled {
				t.Fatalf("stop before the child: %s %+v stages %+v", res.Status, res.Failure, rec.Stages)
			}
			jr, _ := f.store.GetJobRun(context.Background(), *rec.Stages[0].JobRunID)
			if jr.Status != run.Cancelled || jr.CompletedAt == nil {
				t.Fatalf("the job run of the stopped visit is %q", jr.Status)
			}
		})
	}
}

// onCreateStageRun routes the manager's writes that make a visit's job
// run (CreateStageRun; from input version 2 the LineWrites with a Create
// part) through do, which makes them by calling create.
func onCreateStageRun(env *testsuite.TestWorkflowEnvironment, f *fixture, do func(ctx context.Context, create func(context.Context) error) error) {
	env.OnActivity(f.acts.CreateStageRun, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.CreateStageRunInput) (res activities.CreateStageRunResult, err error) {
		err = do(ctx, func(ctx context.Context) (err error) {
			res, err = f.acts.CreateStageRun(ctx, in)
			return err
		})
		return res, err
	})
	env.OnActivity(f.acts.LineWrites, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.LineWritesInput) (res activities.LineWritesResult, err error) {
		if in.Create == nil {
			return f.acts.LineWrites(ctx, in)
		}
		err = do(ctx, func(ctx context.Context) (err error) {
			res, err = f.acts.LineWrites(ctx, in)
			return err
		})
		return res, err
	})
}

// TestLineRunStopReason: the stop's reason is the failure's message.
func TestLineRunStopReason(t *testing.T) {
	f := newFixture(t)
	in := lineInput(t, oneStage("slow"), nil)
	reason := "enough"
	res, rec := f.runLineWith(t, in, lineOpts{record: &store.LineRun{ID: in.RunID, Status: run.Queued, StopReason: &reason},
		setup: func(env *testsuite.TestWorkflowEnvironment) {
			env.RegisterDelayedCallback(env.CancelWorkflow, 500*time.Millisecond)
		}})
	if res.Status != run.Cancelled || *rec.Failure.ErrorMessage != "stopped: enough" || rec.Failure.Domain != "user" {
		t.Fatalf("stop: %s %+v", res.Status, rec.Failure)
	}
	if len(rec.Stages) != 1 || rec.Stages[0].Status != run.Cancelled {
		t.Fatalf("stages %+v", rec.Stages)
	}
	jr, _ := f.store.GetJobRun(context.Background(), *rec.Stages[0].JobRunID)
	if jr.Status != run.Cancelled {
		t.Fatalf("the stopped job run is %s", jr.Status)
	}
}

// TestLineRunRunningVisit: a visit is recorded running, with its job run
// and start time, before its child runs; it is updated in place at the end.
func TestLineRunRunningVisit(t *testing.T) {
	f := newFixture(t)
	in := lineInput(t, oneStage("hello"), nil)
	var seen []store.LineRunStage
	res, rec := f.runLine(t, in, func(env *testsuite.TestWorkflowEnvironment) {
		env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
			if info.ActivityType.Name == "RunStep" { // the child is running
				seen = append(seen, f.line(in.RunID).Stages...)
			}
		})
	})
	if res.Status != run.Succeeded {
		t.Fatalf("%s %+v", res.Status, res.Failure)
	}
	if len(seen) != 1 || seen[0].Status != run.Running || seen[0].JobRunID == nil || seen[0].StartedAt == nil {
		t.Fatalf("while the child ran the stages were %+v", seen)
	}
	if len(rec.Stages) != 1 || *rec.Stages[0].JobRunID != *seen[0].JobRunID || rec.Stages[0].Status != run.Succeeded || rec.Stages[0].CompletedAt == nil {
		t.Fatalf("final stages %+v", rec.Stages)
	}
}

// TestLineRunRetryKeepsTimeout: a retried run (which starts with a state)
// has the line timeout too.
func TestLineRunRetryKeepsTimeout(t *testing.T) {
	f := newFixture(t)
	in := lineInput(t, oneStage("slow")+"[limits]\ntimeout = \"1s\"\n", nil)
	in.State = &LineState{Stage: "s", Iterations: map[string]int{}, Transitions: map[string]int{}, Results: map[string]manifests.StageResult{}}
	res, rec := f.runLine(t, in, nil)
	if res.Status != run.Failed || res.Failure.Code != "line_timeout" {
		t.Fatalf("retried run past its timeout: %s %+v", res.Status, res.Failure)
	}
	// The timed-out visit's job run was cancelled.
	jr, _ := f.store.GetJobRun(context.Background(), *rec.Stages[0].JobRunID)
	if jr.Status != run.Cancelled || rec.Stages[0].Status != run.Cancelled {
		t.Fatalf("job run %s, stage %s", jr.Status, rec.Stages[0].Status)
	}
	// It says it was the line's timeout, not a user, that stopped it.
	if jr.ErrorCode == nil || *jr.ErrorCode != "LINE_TIMEOUT" || jr.FailureClass == nil || *jr.FailureClass != "config" {
		t.Fatalf("job run stopped by the line timeout: code %v class %v message %v", deref(jr.ErrorCode), deref(jr.FailureClass), deref(jr.ErrorMessage))
	}
}

func TestLineRunAttempts(t *testing.T) {
	// A failed attempt is re-run; the second succeeds.
	f := newFixture(t)
	res, rec := f.runLine(t, lineInput(t, oneStage("flaky")+"max_attempts = 3\n", nil), nil)
	if res.Status != run.Succeeded || len(rec.Stages) != 2 || rec.Stages[0].Status != run.Failed ||
		rec.Stages[1].Status != run.Succeeded || rec.Stages[1].Iteration != 1 {
		t.Fatalf("%s %+v stages %+v", res.Status, res.Failure, rec.Stages)
	}
	// The budget is checked after every attempt, not after the last.
	f = newFixture(t)
	res, rec = f.runLine(t, lineInput(t, oneStage("flaky")+"max_attempts = 3\n[limits]\nbudget_usd = \"0.00\"\n", nil), nil)
	if res.Status != run.Failed || res.Failure.Code != "budget_exceeded" || len(rec.Stages) != 1 {
		t.Fatalf("budget: %s %+v stages %d", res.Status, res.Failure, len(rec.Stages))
	}
}

func TestLineRunClassification(t *testing.T) {
	// Outputs that break the job's contract.
	f := newFixture(t)
	res, rec := f.runLine(t, lineInput(t, oneStage("badout"), nil), nil)
	if res.Failure == nil || res.Failure.Code != "job_outputs_invalid" || res.Failure.Domain != "contract" || *rec.Failure.StageName != "s" ||
		rec.Failure.FailureClass == nil || *rec.Failure.FailureClass != "contract" {
		t.Fatalf("bad outputs: %+v / %+v", res.Failure, rec.Failure)
	}
	// A job result that cannot be read.
	f = newFixture(t)
	res, _ = f.runLineWith(t, lineInput(t, oneStage("hello"), nil), lineOpts{child: func(workflow.Context, JobRunInput) (string, error) { return "garbage", nil }})
	if res.Failure == nil || res.Failure.Code != "job_result_invalid" || res.Failure.Domain != "contract" {
		t.Fatalf("unreadable result: %+v", res.Failure)
	}
	// A child that cannot be started is a platform problem, and its job
	// run does not stay queued.
	f = newFixture(t)
	res, rec = f.runLine(t, lineInput(t, oneStage("hello"), nil), func(env *testsuite.TestWorkflowEnvironment) {
		// The child's workflow ID is taken (by the manager itself).
		env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: run.JobRunWorkflowID("jr_taken")})
		env.OnActivity(f.acts.LineWrites, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.LineWritesInput) (activities.LineWritesResult, error) {
			if in.Create != nil {
				c := *in.Create
				c.JobRunID = "jr_taken"
				in.Create = &c
			}
			return f.acts.LineWrites(ctx, in)
		})
	})
	if res.Failure == nil || res.Failure.Code != "dispatch_failed" || res.Failure.Domain != "platform" || len(rec.Stages) != 1 {
		t.Fatalf("child start failure: %+v stages %+v", res.Failure, rec.Stages)
	}
	if jr, _ := f.store.GetJobRun(context.Background(), *rec.Stages[0].JobRunID); jr.Status != run.Failed {
		t.Fatalf("the unstarted job run is %q", jr.Status)
	}
	// stage_failed is enriched with the step's and the job's diagnostics.
	f = newFixture(t)
	_, rec = f.runLine(t, lineInput(t, oneStage("fail"), nil), nil)
	d := rec.Failure.ErrorDetails
	if *rec.Failure.StageStep != "boom" || *rec.Failure.TaskName != "t" || d["step_error_code"] != "EXEC_FAILED" || d["step_failure_class"] == nil ||
		d["job_run_id"] == nil || d["job_error_details"] == nil {
		t.Fatalf("failure %+v details %v", rec.Failure, d)
	}
}

func TestLineRunRouting(t *testing.T) {
	cases := []struct {
		name, src string
		params    map[string]any
		trigger   map[string]any
		status    string
		code      string
		msg       string
		greeting  string
	}{
		{"agentic transition without a router waits until the wait expires", manifesttest.Line("two-stages-agentic"), nil, nil, "failed", "routing_wait_expired", "nobody selected", ""},
		{"failed visit, no transition taken", manifesttest.Line("two-stages-failed-visit"), nil, nil, "failed", "stage_failed", "", ""},
		{"trigger operand with an index, input binding", manifesttest.Line("two-stages-trigger-operand"), map[string]any{"who": "ann"}, map[string]any{"items": []any{map[string]any{"name": "one"}, map[string]any{"name": "two"}}}, "succeeded", "", "", "hi-ann"},
		{"transition iterations operand", manifesttest.Line("transition-iterations"), nil, nil, "succeeded", "", "", "hi-loop"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			in := lineInput(t, tc.src, tc.params)
			if tc.trigger != nil {
				in.Trigger = tc.trigger
			}
			res, rec := f.runLine(t, in, nil)
			if string(res.Status) != tc.status || (tc.code != "" && (res.Failure == nil || string(res.Failure.Code) != tc.code)) {
				t.Fatalf("got %s %+v, want %s %s", res.Status, res.Failure, tc.status, tc.code)
			}
			if tc.msg != "" && !strings.Contains(res.Failure.ErrorMessage, tc.msg) {
				t.Fatalf("message %q does not mention %q", res.Failure.ErrorMessage, tc.msg)
			}
			if tc.greeting != "" && rec.StageOutputs["b"]["greeting"] != tc.greeting {
				t.Fatalf("outputs %v", rec.StageOutputs)
			}
		})
	}
}

// TestLineRunRetryThroughWorkflow: a failed run is retried from the
// snapshot the API plans for it (api's retrySnapshot, whose own test checks
// it plans this state for such a run); the new run carries the earlier
// visits, keeps counting iterations, visits and cost, and re-runs the
// failed stage.
func TestLineRunRetryThroughWorkflow(t *testing.T) {
	f := newFixture(t)
	// The third stage follows only a succeeded second whose run saw the
	// first stage's output.
	chain := map[string]any{"second": "fail", "carried": `{ op = "all", conditions = [
  { op = "eq", left = { type = "stage", path = "status" }, right = { type = "literal", value = "succeeded" } },
  { op = "eq", left = { type = "stage", stage = "first", path = "outputs.greeting" }, right = { type = "literal", value = "hi-world" } },
] }`}
	src := manifesttest.Line("retry-chain", chain)
	in := lineInput(t, src, nil)
	res, old := f.runLine(t, in, nil)
	if res.Status != run.Failed || res.Failure.Code != "stage_failed" {
		t.Fatalf("first run: %s %+v", res.Status, res.Failure)
	}
	if len(old.Stages) != 2 || old.Stages[0].JobRunID == nil || old.Stages[1].JobRunID == nil || len(old.Transitions) != 1 {
		t.Fatalf("first run: stages %+v transitions %+v", old.Stages, old.Transitions)
	}
	// The retry of the failed stage "second": "first" carried over.
	first, second := old.Stages[0], old.Stages[1]
	outputs, _, err := f.jobRunValues(*first.JobRunID)
	if err != nil {
		t.Fatal(err)
	}
	_, params, err := f.jobRunValues(*second.JobRunID)
	if err != nil {
		t.Fatal(err)
	}
	state := &LineState{Stage: "second", StageParams: params, Visits: 1, StageOrder: 1, Iterations: map[string]int{"first": 1, "second": 0},
		Transitions: map[string]int{"next": 1}, CostCents: first.TotalCostCents,
		Results: map[string]manifests.StageResult{"first": {Status: "succeeded", Iteration: 1, JobRunID: *first.JobRunID, Outputs: outputs}}}
	// The job is fixed: the retry resolves its new version.
	chain["second"] = "hello"
	in2 := lineInput(t, manifesttest.Line("retry-chain", chain), nil)
	in2.State = state
	first.Carried = true
	rec := store.LineRun{ID: in2.RunID, Status: run.Queued, Stages: []store.LineRunStage{first}, StageOutputs: map[string]map[string]any{"first": outputs},
		Transitions: old.Transitions[:1], TotalCostCents: state.CostCents, ComputeCostCents: state.CostCents}
	res, got := f.runLineWith(t, in2, lineOpts{record: &rec})
	if res.Status != run.Succeeded {
		t.Fatalf("retry: %s %+v", res.Status, res.Failure)
	}
	var names []string
	for _, s := range got.Stages {
		names = append(names, fmt.Sprintf("%s#%d/%d carried=%v", s.StageName, s.Iteration, s.StageOrder, s.Carried))
	}
	if want := "first#1/1 carried=true second#1/2 carried=false third#1/3 carried=false"; strings.Join(names, " ") != want {
		t.Fatalf("stages %v, want %s", names, want)
	}
	if got.StageOutputs["first"]["greeting"] != "hi-world" || len(got.Transitions) != 2 || got.TotalCostCents < old.Stages[0].TotalCostCents {
		t.Fatalf("outputs %v transitions %v cost %d", got.StageOutputs, got.Transitions, got.TotalCostCents)
	}
}

func (f *fixture) jobRunValues(id string) (map[string]any, map[string]any, error) {
	jr, err := f.store.GetJobRun(context.Background(), id)
	if err != nil {
		return nil, nil, err
	}
	out, _ := jr.ResultPayload["outputs"].(map[string]any)
	return out, jr.RunParams, nil
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestLineRunContinuesAsNewAfterMaxTurns: the manager's history stays
// bounded: after maxTurnsPerRun turns it continues as new, carrying its
// state, and every turn is still recorded.
func TestLineRunContinuesAsNewAfterMaxTurns(t *testing.T) {
	defer func(n int) { maxTurnsPerRun = n }(maxTurnsPerRun)
	maxTurnsPerRun = 2
	f := newFixture(t)
	in := lineInput(t, manifesttest.Line("three-stages"), map[string]any{"who": "x"})
	res, rec := f.runLine(t, in, nil)
	if res.Status != run.Succeeded {
		t.Fatalf("status %s %+v", res.Status, res.Failure)
	}
	if f.runs != 2 || len(rec.ManagerTurns) != 3 || len(rec.Stages) != 3 || rec.ManagerTurns[2].State != "completed" {
		t.Fatalf("%d runs, manager turns %+v, stages %+v", f.runs, rec.ManagerTurns, rec.Stages)
	}
}
