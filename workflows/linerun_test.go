package workflows

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/store"
)

var lineJobs = map[string]string{
	"inc": `
[job]
name = "inc"
[run.sandbox]
mode = "ensure"
name = "counter"
image = "local"
[[run.tasks]]
name = "t"
[[run.tasks.steps]]
exec = ["sh", "-c", "n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n; echo n=$n >> $SVC_OUTPUT"]
outputs = ["n"]
[outputs.n]
type = "integer"
`,
	"hello": `
[job]
name = "hello"
[job.params.who]
type = "string"
default = "world"
[[run.tasks]]
name = "t"
[[run.tasks.steps]]
exec = ["sh", "-c", "echo greeting=hi-{{who}} >> $SVC_OUTPUT"]
outputs = ["greeting"]
[outputs.greeting]
type = "string"
`,
	"fail": `
[job]
name = "fail"
[[run.tasks]]
name = "t"
[[run.tasks.steps]]
name = "boom"
exec = ["sh", "-c", "exit 3"]
`,
	"slow": `
[job]
name = "slow"
[[run.tasks]]
name = "t"
[[run.tasks.steps]]
exec = ["sleep", "30"]
`,
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
		jobs[s.ID] = StageJob{JobName: s.Job, JobVersionID: "jv_" + s.Job, Manifest: parseJob(t, lineJobs[s.Job])}
	}
	return LineRunInput{RunID: store.NewID("lr_"), LineName: m.Line.Name, Manifest: *m, Jobs: jobs, Params: params, Trigger: map[string]any{}}
}

// runLine runs every manager turn to the end, starting each continue-as-new
// turn as the server would, and returns the result and the line-run record.
func (f *fixture) runLine(t *testing.T, in LineRunInput, setup func(env *testsuite.TestWorkflowEnvironment)) (LineRunResult, store.LineRun) {
	t.Helper()
	f.store.lines[in.RunID] = store.LineRun{ID: in.RunID, Status: activities.StatusQueued}
	for turn := 0; turn < 40; turn++ {
		env := f.suite.NewTestWorkflowEnvironment()
		env.RegisterWorkflowWithOptions(JobRunWorkflow, workflowOptions())
		env.RegisterWorkflowWithOptions(LineRunWorkflow, workflow.RegisterOptions{Name: LineRunWorkflowName})
		env.RegisterActivity(f.acts)
		env.SetTestTimeout(60 * time.Second)
		if setup != nil && turn == 0 {
			setup(env)
		}
		env.ExecuteWorkflow(LineRunWorkflowName, in)
		err := env.GetWorkflowError()
		var can *workflow.ContinueAsNewError
		if errors.As(err, &can) {
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
		return res, f.store.lines[in.RunID]
	}
	t.Fatal("the line never ended")
	return LineRunResult{}, store.LineRun{}
}

const lineHead = "[line]\nname = \"l\"\n[trigger]\ntype = \"manual\"\n"

func TestLineRunLoopUntilOutput(t *testing.T) {
	f := newFixture(t)
	in := lineInput(t, lineHead+`
[[stages]]
id = "inc"
job = "inc"
[[stages]]
id = "fin"
job = "hello"
[[transitions]]
type = "conditional"
id = "again"
from = "inc"
to = "inc"
max_iterations = 5
when = { op = "ne", left = { type = "stage", path = "outputs.n" }, right = { type = "literal", value = 3 } }
[[transitions]]
type = "conditional"
id = "done"
from = "inc"
to = "fin"
when = { op = "eq", left = { type = "stage", path = "outputs.n" }, right = { type = "literal", value = 3 } }
[transitions.params]
who = { type = "output", stage = "inc", name = "n" }
`, nil)
	// "who" is a string param: an integer output bound to it is rejected...
	res, rec := f.runLine(t, in, nil)
	if res.Status != activities.StatusFailed || res.Failure.Code != "stage_params_invalid" || res.Failure.Domain != "config" {
		t.Fatalf("binding an integer to a string param: %+v", res.Failure)
	}
	// ...and a literal string binding works: three visits of inc, one of fin.
	f = newFixture(t)
	in.Manifest.Transitions[1].Params = map[string]manifests.ParamBinding{"who": {Type: manifests.BindLiteral, Value: "loop"}}
	res, rec = f.runLine(t, in, nil)
	if res.Status != activities.StatusSucceeded {
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
	if len(rec.ManagerTurns) != 4 || rec.ManagerTurns[3].State != "completed" || rec.ManagerTurns[0].State != "continued_as_new" {
		t.Fatalf("manager turns %+v", rec.ManagerTurns)
	}
	if rec.StageOutputs["fin"]["greeting"] != "hi-loop" || len(rec.Transitions) != 3 {
		t.Fatalf("outputs %v transitions %v", rec.StageOutputs, rec.Transitions)
	}
	if rec.TotalCostCents < 4 || rec.Status != activities.StatusSucceeded {
		t.Fatalf("costs/status: %d %s", rec.TotalCostCents, rec.Status)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestLineRunFailures(t *testing.T) {
	loop := `
[[stages]]
id = "inc"
job = "inc"
[[transitions]]
type = "conditional"
id = "again"
from = "inc"
to = "inc"
%s
when = { op = "always" }
`
	cases := []struct {
		name, src    string
		params       map[string]any
		code, domain string
	}{
		{"ambiguous_transition", lineHead + `
[[stages]]
id = "a"
job = "hello"
[[stages]]
id = "b"
job = "hello"
[[transitions]]
type = "conditional"
id = "x"
from = "a"
to = "b"
when = { op = "always" }
[[transitions]]
type = "conditional"
id = "y"
from = "a"
to = "b"
when = { op = "always" }
`, nil, "ambiguous_transition", "config"},
		{"no_route", lineHead + `
[[stages]]
id = "a"
job = "hello"
[[stages]]
id = "b"
job = "hello"
[[transitions]]
type = "conditional"
id = "x"
from = "a"
to = "b"
when = { op = "eq", left = { type = "literal", value = 1 }, right = { type = "literal", value = 2 } }
`, nil, "no_route", "config"},
		{"stage_failed takes the job's class", lineHead + `
[[stages]]
id = "a"
job = "fail"
max_attempts = 2
`, nil, "stage_failed", "config"},
		{"transition max_iterations", lineHead + strings.Replace(loop, "%s", "max_iterations = 2", 1), nil, "max_iterations_exhausted", "config"},
		{"line max_iterations", lineHead + strings.Replace(loop, "%s", "", 1) + "[limits]\nmax_iterations = 3\n", nil, "max_iterations_exhausted", "config"},
		{"budget_exceeded", lineHead + strings.Replace(loop, "%s", "", 1) + "[limits]\nbudget_usd = \"0.00\"\n", nil, "budget_exceeded", "config"},
		{"line_timeout", lineHead + "[[stages]]\nid = \"s\"\njob = \"slow\"\n[limits]\ntimeout = \"1s\"\n", nil, "line_timeout", "config"},
		{"transition_params_invalid", lineHead + `
[[stages]]
id = "a"
job = "hello"
[[stages]]
id = "b"
job = "hello"
[[transitions]]
type = "conditional"
id = "x"
from = "a"
to = "b"
when = { op = "always" }
params = { who = { type = "output", stage = "a", name = "nope" } }
`, nil, "transition_params_invalid", "config"},
		{"stage_params_invalid", lineHead + "[[stages]]\nid = \"a\"\njob = \"hello\"\n", map[string]any{"who": 5.0}, "stage_params_invalid", "config"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			res, rec := f.runLine(t, lineInput(t, tc.src, tc.params), nil)
			if res.Status != activities.StatusFailed || res.Failure == nil || res.Failure.Code != tc.code || res.Failure.Domain != tc.domain {
				t.Fatalf("got %s %+v, want failed %s/%s", res.Status, res.Failure, tc.code, tc.domain)
			}
			if rec.Failure == nil || *rec.Failure.Code != tc.code || rec.CompletedAt == nil || rec.Failure.StageName == nil {
				t.Fatalf("record failure %+v", rec.Failure)
			}
		})
	}
	// stage_failed is enriched with the failing step.
	f := newFixture(t)
	_, rec := f.runLine(t, lineInput(t, lineHead+"[[stages]]\nid = \"a\"\njob = \"fail\"\nmax_attempts = 2\n", nil), nil)
	if rec.Failure.StageStep == nil || *rec.Failure.StageStep != "boom" || *rec.Failure.TaskName != "t" || *rec.Failure.ErrorCode != "EXEC_FAILED" || len(rec.Stages) != 2 {
		t.Fatalf("failure %+v stages %d", rec.Failure, len(rec.Stages))
	}
}

func TestLineRunStop(t *testing.T) {
	f := newFixture(t)
	res, rec := f.runLine(t, lineInput(t, lineHead+"[[stages]]\nid = \"s\"\njob = \"slow\"\n", nil), func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterDelayedCallback(env.CancelWorkflow, 500*time.Millisecond)
	})
	if res.Status != activities.StatusCancelled || res.Failure.Code != "user_cancelled" || res.Failure.Domain != "user" || rec.Status != activities.StatusCancelled {
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
	for name, b := range map[string]manifests.ParamBinding{
		"missing output": {Type: manifests.BindOutput, Stage: "s1", Name: "zzz"},
		"stage not run":  {Type: manifests.BindOutput, Stage: "s9", Name: "n"},
		"missing input":  {Type: manifests.BindInput, Name: "zzz"},
	} {
		if _, err := bindParams(map[string]manifests.ParamBinding{"a": b}, in, st, job); err == nil {
			t.Errorf("%s: bound without error", name)
		}
	}
}

// TestLineRunRetryFromSnapshot: a retried line run starts at the given stage
// with the earlier stages' results carried over.
func TestLineRunRetryFromSnapshot(t *testing.T) {
	f := newFixture(t)
	in := lineInput(t, lineHead+`
[[stages]]
id = "first"
job = "hello"
[[stages]]
id = "second"
job = "hello"
[[transitions]]
type = "conditional"
id = "next"
from = "first"
to = "second"
when = { op = "always" }
[[stages]]
id = "third"
job = "hello"
[[transitions]]
type = "conditional"
id = "carried"
from = "second"
to = "third"
when = { op = "eq", left = { type = "stage", stage = "first", path = "outputs.greeting" }, right = { type = "literal", value = "hi-carried" } }
`, nil)
	in.State = &LineState{Stage: "second", StageParams: map[string]any{"who": "retried"}, Iterations: map[string]int{"first": 1},
		Transitions: map[string]int{"next": 1}, Results: map[string]manifests.StageResult{"first": {Status: "succeeded", Outputs: map[string]any{"greeting": "hi-carried"}}},
		StartedAt: time.Now()}
	res, rec := f.runLine(t, in, nil)
	if res.Status != activities.StatusSucceeded {
		t.Fatalf("retry: %s %+v", res.Status, res.Failure)
	}
	// The run began at the retried stage, and routing saw the carried result.
	if len(rec.Stages) != 2 || rec.Stages[0].StageName != "second" || rec.Stages[1].StageName != "third" || rec.StageOutputs["second"]["greeting"] != "hi-retried" {
		t.Fatalf("stages %+v outputs %v", rec.Stages, rec.StageOutputs)
	}
}
