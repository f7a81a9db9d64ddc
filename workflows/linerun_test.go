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
			if rec.Failure == nil || *rec.Failure.Code != tc.code || rec.CompletedAt == nil {
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
