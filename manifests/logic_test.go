package manifests

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func lit(v any) *Operand { return &Operand{Type: OperandLiteral, Value: v} }

func TestEvaluate(t *testing.T) {
	ctx := EvalContext{
		From: "check",
		Stages: map[string]StageResult{
			"check": {Status: "succeeded", Outputs: map[string]any{"passed": false, "score": 0.5, "tags": []any{"a", "b"},
				"items": []any{map[string]any{"id": "x1"}}, "meta": map[string]any{"k": "v"}}, JobRunID: "jr_1", Iteration: 2},
			"build": {Status: "failed", Outputs: map[string]any{}},
		},
		Transitions: map[string]int{"retry": 2},
		Trigger:     map[string]any{"payload": map[string]any{"labels": []any{"bug"}, "title": "Crash on start"}},
	}
	stage := func(path string) *Operand { return &Operand{Type: OperandStage, Path: path} }
	tests := []struct {
		name string
		c    Condition
		want bool
	}{
		{"always", Condition{Op: OpAlways}, true},
		{"eq status", Condition{Op: OpEq, Left: stage("status"), Right: lit("succeeded")}, true},
		{"eq other stage", Condition{Op: OpEq, Left: &Operand{Type: OperandStage, Stage: "build", Path: "status"}, Right: lit("failed")}, true},
		{"eq number int vs float", Condition{Op: OpEq, Left: stage("iteration"), Right: lit(int64(2))}, true},
		{"ne", Condition{Op: OpNe, Left: stage("status"), Right: lit("failed")}, true},
		{"ne missing path", Condition{Op: OpNe, Left: stage("outputs.nope"), Right: lit(1)}, true},
		{"eq missing path", Condition{Op: OpEq, Left: stage("outputs.nope"), Right: lit(nil)}, false},
		{"contains array", Condition{Op: OpContains, Left: stage("outputs.tags"), Right: lit("b")}, true},
		{"contains string", Condition{Op: OpContains, Left: &Operand{Type: OperandTrigger, Path: "payload.title"}, Right: lit("Crash")}, true},
		{"contains map key", Condition{Op: OpContains, Left: stage("outputs.meta"), Right: lit("k")}, true},
		{"not_contains", Condition{Op: OpNotContains, Left: stage("outputs.tags"), Right: lit("z")}, true},
		{"exists index path", Condition{Op: OpExists, Operand: stage("outputs.items[0].id")}, true},
		{"exists out of range", Condition{Op: OpExists, Operand: stage("outputs.items[3].id")}, false},
		{"missing", Condition{Op: OpMissing, Operand: stage("outputs.nope")}, true},
		{"truthy number", Condition{Op: OpTruthy, Operand: stage("outputs.score")}, true},
		{"falsy false", Condition{Op: OpFalsy, Operand: stage("outputs.passed")}, true},
		{"falsy missing", Condition{Op: OpFalsy, Operand: stage("outputs.nope")}, true},
		{"transition iterations", Condition{Op: OpEq, Left: &Operand{Type: OperandTransition, ID: "retry", Path: "iterations"}, Right: lit(2)}, true},
		{"transition never taken", Condition{Op: OpEq, Left: &Operand{Type: OperandTransition, ID: "other", Path: "iterations"}, Right: lit(0)}, true},
		{"trigger contains", Condition{Op: OpContains, Left: &Operand{Type: OperandTrigger, Path: "payload.labels"}, Right: lit("bug")}, true},
		{"all short", Condition{Op: OpAll, Conditions: []Condition{{Op: OpAlways}, {Op: OpFalsy, Operand: lit(true)}}}, false},
		{"any", Condition{Op: OpAny, Conditions: []Condition{{Op: OpFalsy, Operand: lit(true)}, {Op: OpAlways}}}, true},
		{"not", Condition{Op: OpNot, Condition: &Condition{Op: OpAlways}}, false},
		{"job_run_id", Condition{Op: OpEq, Left: stage("job_run_id"), Right: lit("jr_1")}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Evaluate(tc.c, ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := Evaluate(Condition{Op: "gt"}, ctx); err == nil {
		t.Fatal("unknown op evaluated without error")
	}
}

func TestRender(t *testing.T) {
	params := map[string]any{"who": "ann", "n": float64(3), "list": []any{"a", "b"}, "run_id": "jr_9"}
	got, err := Render("hi {{who}} {{ n }} {{list}} {{run_id}}", params)
	if err != nil {
		t.Fatal(err)
	}
	if want := `hi ann 3 ["a","b"] jr_9`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if _, err := Render("{{nope}}", params); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("unknown placeholder: err = %v", err)
	}
	if p := Placeholders("a {{x}} b {{ y }}"); len(p) != 2 || p[0] != "x" || p[1] != "y" {
		t.Fatalf("placeholders = %v", p)
	}
}

func TestApplyParams(t *testing.T) {
	specs := map[string]JobParamSpec{
		"branch": {Type: TypeString, Default: "main", Prefix: "m"},
		"count":  {Type: TypeInteger, Required: new(true)},
		"mode":   {Type: TypeString, Enum: []any{"a", "b"}, Default: "a"},
		"tags":   {Type: TypeArray, Items: TypeString, Default: []any{}},
	}
	got, ps := ApplyParams(specs, map[string]any{"count": float64(2)})
	if ps != nil {
		t.Fatal(ps)
	}
	if got["branch"] != "main" || got["count"] != float64(2) || got["mode"] != "a" {
		t.Fatalf("got %v", got)
	}
	// null for an optional param means "not given": the default applies, and a
	// param without a default stays unset.
	specs["note"] = JobParamSpec{Type: TypeString}
	got, ps = ApplyParams(specs, map[string]any{"count": 1, "branch": nil, "note": nil})
	if ps != nil {
		t.Fatalf("null optional params: %v", ps)
	}
	if _, set := got["note"]; got["branch"] != "main" || set {
		t.Fatalf("null optional params: got %v, want branch=main and no note", got)
	}
	cases := []struct {
		name  string
		given map[string]any
		want  string
	}{
		{"required", map[string]any{}, "params.count: is required"},
		{"not integer", map[string]any{"count": 1.5}, "params.count: expected an integer"},
		{"enum", map[string]any{"count": 1, "mode": "c"}, "params.mode: \"c\" is not one of"},
		{"prefix", map[string]any{"count": 1, "branch": "dev"}, "params.branch: \"dev\" does not start with \"m\""},
		{"items", map[string]any{"count": 1, "tags": []any{1}}, "params.tags: item 0: expected a string"},
		{"unknown", map[string]any{"count": 1, "zzz": 1}, "params.zzz: unknown param"},
		{"reserved", map[string]any{"count": 1, "run_id": "x"}, "params.run_id: \"run_id\" is reserved"},
		{"required null", map[string]any{"count": nil}, "params.count: is required: null is not a value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, ps := ApplyParams(specs, tc.given)
			if ps == nil || !strings.Contains(ps.Error(), tc.want) {
				t.Fatalf("problems %v, want %q", ps, tc.want)
			}
			if len(ps) != 1 {
				t.Fatalf("problems %v, want only %q", ps, tc.want)
			}
		})
	}
}

func TestParseOutputFile(t *testing.T) {
	specs := map[string]JobOutputSpec{
		"name":  {Type: TypeString},
		"count": {Type: TypeInteger},
		"ok":    {Type: TypeBoolean},
		"tags":  {Type: TypeArray, Items: TypeString},
		"level": {Type: TypeString, Enum: []any{"low", "high"}},
	}
	all := []string{"name", "count", "ok", "tags", "level"}
	got, err := ParseOutputFile([]byte("name=raw text\ncount=3\n\nok=true\ntags=[\"a\"]\nlevel=\"low\"\n"), specs, all)
	if err != nil {
		t.Fatal(err)
	}
	if got["name"] != "raw text" || got["count"] != float64(3) || got["ok"] != true || got["level"] != "low" {
		t.Fatalf("got %v", got)
	}
	if got, _ := ParseOutputFile([]byte("name=42\n"), specs, all); got["name"] != "42" {
		t.Fatalf("a raw string that parses as JSON: got %#v, want \"42\"", got["name"])
	}
	bad := []struct {
		name, data, code string
		claimed          []string
	}{
		{"not json", "count=three", CodeOutputInvalid, all},
		{"wrong type", "ok=1", CodeOutputInvalid, all},
		{"enum", "level=mid", CodeOutputInvalid, all},
		{"undeclared", "zzz=1", CodeOutputInvalid, all},
		{"unclaimed", "count=1", CodeOutputInvalid, []string{"name"}},
		{"no equals", "count", CodeOutputInvalid, all},
		{"too large", "name=" + strings.Repeat("x", MaxOutputFileBytes), CodeOutputTooLarge, all},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseOutputFile([]byte(tc.data), specs, tc.claimed)
			if OutputErrorCode(err) != tc.code {
				t.Fatalf("err = %v, want code %s", err, tc.code)
			}
		})
	}
}

func TestReduceOutputs(t *testing.T) {
	m := &JobManifest{
		Run: RunSection{Tasks: []Task{{Name: "a"}, {Name: "b"}, {Name: "c"}}},
		Outputs: map[string]JobOutputSpec{
			"one":     {Type: TypeString, Reduce: ReduceOne},
			"last":    {Type: TypeString, Reduce: ReduceLast},
			"collect": {Type: TypeInteger, Reduce: ReduceCollect, Required: new(false)},
			"gather":  {Type: TypeArray, Items: TypeString, Reduce: ReduceGather},
			"scalars": {Type: TypeInteger, Reduce: ReduceGather, Required: new(false)},
		},
	}
	writes := []OutputWrite{
		{Task: "c", TaskIndex: 2, Succeeded: true, Values: map[string]any{"last": "from-c", "gather": []any{"z"}, "scalars": 3.0}},
		{Task: "a", TaskIndex: 0, Succeeded: true, Values: map[string]any{"one": "x", "last": "from-a", "collect": 1.0, "gather": []any{"p", "q"}, "scalars": 1.0}},
		{Task: "b", TaskIndex: 1, Succeeded: false, Values: map[string]any{"last": "from-failed-b", "collect": 2.0}},
	}
	got, err := ReduceOutputs(m, writes)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"one":     "x",
		"last":    "from-c",
		"collect": []any{1.0, nil, nil},
		"gather":  []any{"p", "q", "z"},
		"scalars": []any{1.0, 3.0},
	}
	for k, w := range want {
		if !Equal(got[k], w) {
			t.Errorf("%s = %v, want %v", k, got[k], w)
		}
	}
	// reduce one written twice, required output missing, required collect short
	if _, err := ReduceOutputs(m, append(writes, OutputWrite{Task: "b", TaskIndex: 1, Succeeded: true, Values: map[string]any{"one": "y"}})); OutputErrorCode(err) != CodeOutputInvalid {
		t.Errorf("one written twice: err = %v", err)
	}
	if _, err := ReduceOutputs(m, writes[:1]); OutputErrorCode(err) != CodeOutputMissing {
		t.Errorf("missing required one: err = %v", err)
	}
	m.Outputs["collect"] = JobOutputSpec{Type: TypeInteger, Reduce: ReduceCollect}
	if _, err := ReduceOutputs(m, writes); OutputErrorCode(err) != CodeOutputMissing {
		t.Errorf("required collect from 1 of 3 tasks: err = %v", err)
	}
}

func TestClaimsImplicitSession(t *testing.T) {
	m := &JobManifest{
		Run: RunSection{Tasks: []Task{{Name: "t", Steps: []Step{
			{Snapshot: &SnapshotStep{Name: "s"}},
			{RunAgent: &RunAgent{Mode: AgentModeSession, Harness: "agent_a"}},
		}}}},
		Outputs: map[string]JobOutputSpec{"a": {Type: TypeString}, "b": {Type: TypeString}},
	}
	c := Claims(m)
	if got := c["t"]["step-2"]; len(got) != 2 {
		t.Fatalf("session step claims %v, want [a b]", got)
	}
	m.Run.Tasks[0].Steps = append(m.Run.Tasks[0].Steps, Step{Exec: []string{"true"}})
	if c := Claims(m); len(c) != 0 {
		t.Fatalf("with a second writer nothing is implicit, got %v", c)
	}
}

func TestUSD(t *testing.T) {
	for in, want := range map[string]string{`"25.5"`: "25.50", `3`: "3.00", `0.01`: "0.01", `"-1"`: "-1.00", `1e3`: "1000.00",
		`"1000000000000"`: "1000000000000.00", `"2.50"`: "2.50"} {
		var u USD
		if err := u.UnmarshalJSON([]byte(in)); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if u.String() != want {
			t.Errorf("%s -> %s, want %s", in, u, want)
		}
	}
	bad := []struct{ in, want string }{
		{`1e30`, "over the maximum"},
		{`"-1e30"`, "over the maximum"},
		{`1000000000000.01`, "over the maximum"},
		{`"0.001"`, "more than two decimal places"},
		{`0.015`, "more than two decimal places"},
		{`"1/3"`, "not a decimal amount"},
		{`"NaN"`, "not a decimal amount"},
		{`"0x10"`, "not a decimal amount"},
		{`""`, "not a decimal amount"},
	}
	for _, tc := range bad {
		var u USD
		if err := u.UnmarshalJSON([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one containing %q", tc.in, err, tc.want)
		}
	}
}

// TestBudgetProblems: an amount that does not fit is reported at its
// location, from TOML and from JSON.
func TestBudgetProblems(t *testing.T) {
	const line = "[line]\nname = \"l\"\n[trigger]\ntype = \"manual\"\n[[stages]]\nid = \"a\"\njob = \"j\"\n[limits]\nbudget_usd = %s\n"
	tests := []struct {
		name, data string
		format     Format
		want       string
	}{
		{"toml float too large", fmt.Sprintf(line, "1e30"), FormatTOML, "limits.budget_usd: expected a decimal amount in dollars: \"1e+30\" is over the maximum"},
		{"toml integer too large", fmt.Sprintf(line, "9000000000000000000"), FormatTOML, "limits.budget_usd: expected a decimal amount in dollars: \"9000000000000000000\" is over the maximum"},
		{"toml sub-cent string", fmt.Sprintf(line, `"0.001"`), FormatTOML, "limits.budget_usd: expected a decimal amount in dollars: \"0.001\" has more than two decimal places"},
		{"json too large", `{"line":{"name":"l"},"trigger":{"type":"manual"},"stages":[{"id":"a","job":"j"}],"limits":{"budget_usd":1e30}}`, FormatJSON, "limits.budget_usd: expected a decimal amount in dollars: \"1e30\" is over the maximum"},
		{"json sub-cent", `{"line":{"name":"l"},"trigger":{"type":"manual"},"stages":[{"id":"a","job":"j"}],"limits":{"budget_usd":0.001}}`, FormatJSON, "limits.budget_usd: expected a decimal amount in dollars: \"0.001\" has more than two decimal places"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ps := ValidateBytes("lines", []byte(tc.data), tc.format)
			if len(ps) != 1 || !strings.HasPrefix(ps[0].String(), tc.want) {
				t.Fatalf("problems %v, want exactly one starting %q", ps, tc.want)
			}
		})
	}
}

func TestValidateCron(t *testing.T) {
	for _, expr := range []string{"0 * * * *", "*/5 1-3 * JAN MON-FRI", "30 2 1 * 0"} {
		if err := ValidateCron(expr); err != nil {
			t.Errorf("%q: %v", expr, err)
		}
	}
	for _, expr := range []string{"@every 1h", "@daily", "@hourly", "CRON_TZ=UTC 0 * * * *", "TZ=UTC 0 * * * *",
		"0 0 * * * *", "* * * *", "61 * * * *", ""} {
		if err := ValidateCron(expr); err == nil {
			t.Errorf("%q accepted, want an error (standard 5-field cron only)", expr)
		}
	}
}

// TestDuplicateListedOutput: a key listed twice in a step's outputs is
// reported at the list entry.
func TestDuplicateListedOutput(t *testing.T) {
	data := []byte("[job]\nname = \"x\"\n[[run.tasks]]\nname = \"t\"\n[[run.tasks.steps]]\nexec = [\"true\"]\n" +
		"[[run.tasks.steps]]\nexec = [\"true\"]\noutputs = [\"a\", \"b\", \"a\"]\n[outputs.a]\ntype = \"string\"\n[outputs.b]\ntype = \"string\"\n")
	for _, f := range []Format{FormatTOML, FormatJSON} {
		in := data
		if f == FormatJSON {
			in = []byte(`{"job":{"name":"x"},"run":{"tasks":[{"name":"t","steps":[{"exec":["true"]},{"exec":["true"],"outputs":["a","b","a"]}]}]},"outputs":{"a":{"type":"string"},"b":{"type":"string"}}}`)
		}
		ps := ValidateBytes("jobs", in, f)
		want := `run.tasks[0].steps[1].outputs[2]: duplicate output key "a"`
		if len(ps) != 1 || ps[0].String() != want {
			t.Errorf("%s: problems %v, want exactly %q", f, ps, want)
		}
	}
}

// TestLargeWholeNumbers: whole numbers beyond 2^53 in free-form fields keep
// every digit, hash the same from TOML and JSON, and still compare equal to
// the same value held as a float64.
func TestLargeWholeNumbers(t *testing.T) {
	const big = "9007199254740993" // 2^53 + 1: no float64 holds it
	tomlJob := "[job]\nname = \"n\"\n[job.params.n]\ntype = \"integer\"\ndefault = " + big + "\n[job.params.f]\ntype = \"number\"\ndefault = 1.5\nenum = [1.5, 2]\n" +
		"[[run.tasks]]\nname = \"t\"\n[[run.tasks.steps]]\nexec = [\"echo\", \"{{n}}\"]\n"
	jsonJob := `{"job":{"name":"n","params":{"f":{"type":"number","default":1.50,"enum":[15e-1,2.0]},"n":{"type":"integer","default":` + big + `}}},` +
		`"run":{"tasks":[{"name":"t","steps":[{"exec":["echo","{{n}}"]}]}]}}`
	hashes := map[Format]string{}
	for f, data := range map[Format]string{FormatTOML: tomlJob, FormatJSON: jsonJob} {
		m, err := ParseJob([]byte(data), f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if ps := ValidateJob(m); ps != nil {
			t.Fatalf("%s: %v", f, ps)
		}
		params, ps := ApplyParams(m.Job.Params, nil)
		if ps != nil {
			t.Fatalf("%s: %v", f, ps)
		}
		if got := Stringify(params["n"]); got != big {
			t.Errorf("%s: default renders as %s, want %s", f, got, big)
		}
		if got, ok := m.Job.Params["f"].Default.(float64); !ok || got != 1.5 {
			t.Errorf("%s: small number default = %#v, want float64 1.5", f, m.Job.Params["f"].Default)
		}
		NormalizeJob(m)
		if hashes[f], err = ContentHash(m); err != nil {
			t.Fatal(err)
		}
		b, _ := CanonicalJSON(m)
		if !strings.Contains(string(b), `"default":`+big) {
			t.Errorf("%s: canonical JSON lacks the exact default: %s", f, b)
		}
	}
	if hashes[FormatTOML] != hashes[FormatJSON] {
		t.Errorf("TOML hash %s != JSON hash %s", hashes[FormatTOML], hashes[FormatJSON])
	}
	equal := []struct {
		name string
		a, b any
		want bool
	}{
		{"number and float64 beyond 2^53", json.Number("1152921504606846976"), float64(1 << 60), true},
		{"int64 and number beyond 2^53", int64(1<<53 + 1), json.Number(big), true},
		{"2^53+1 differs from 2^53", json.Number(big), float64(1 << 53), false},
		{"small number and float64", json.Number("3"), 3.0, true},
		{"fraction and float64", json.Number("0.5"), 0.5, true},
	}
	for _, tc := range equal {
		if got := Equal(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: Equal = %v, want %v", tc.name, got, tc.want)
		}
	}
	// A literal in a condition equals a stage output of the same large value.
	line := `{"line":{"name":"l"},"trigger":{"type":"manual"},"stages":[{"id":"a","job":"j"},{"id":"b","job":"j"}],` +
		`"transitions":[{"type":"conditional","id":"t","from":"a","to":"b","when":{"op":"eq","left":{"type":"stage","path":"outputs.n"},"right":{"type":"literal","value":` + big + `}}}]}`
	lm, err := ParseLine([]byte(line), FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	out, err := ParseOutputFile([]byte("n="+big+"\n"), map[string]JobOutputSpec{"n": {Type: TypeInteger}}, []string{"n"})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		v    any
		want bool
	}{"exact output": {out["n"], true}, "off by one": {json.Number("9007199254740992"), false}} {
		ctx := EvalContext{From: "a", Stages: map[string]StageResult{"a": {Outputs: map[string]any{"n": tc.v}}}}
		if got, err := Evaluate(*lm.Transitions[0].When, ctx); err != nil || got != tc.want {
			t.Errorf("%s: eq = %v (%v), want %v", name, got, err, tc.want)
		}
	}
	if _, err := ParseJob([]byte(`{"job":{"name":"n","params":{"x":{"type":"number","default":1e400}}},"run":{"tasks":[]}}`), FormatJSON); err == nil ||
		!strings.Contains(err.Error(), "job.params.x.default: number 1e400 is out of range") {
		t.Errorf("out-of-range number: err = %v", err)
	}
}

func TestParseReportsEveryUnknownKey(t *testing.T) {
	_, err := ParseJob([]byte(`{"job":{"name":"x","nme":1},"run":{"tasks":[{"name":"t","steps":[{"exec":["true"],"exce":1}]}]},"extra":true}`), FormatJSON)
	ps := AsProblems(err)
	want := []string{"extra: unknown key", "job.nme: unknown key", "run.tasks[0].steps[0].exce: unknown key"}
	if len(ps) != len(want) {
		t.Fatalf("problems %v, want %v", ps, want)
	}
	for i, w := range want {
		if ps[i].String() != w {
			t.Errorf("problem %d = %q, want %q", i, ps[i], w)
		}
	}
}

// A manifest with shape problems (unknown keys, wrong types) still gets
// every other problem reported, and none that the shape problems cause.
func TestCheckReportsEveryProblem(t *testing.T) {
	job := `
[job]
name = "j"
bogus = 1
[job.params.n]
type = "integer"
required = true
default = 3
[[run.tasks]]
name = "t"
[[run.tasks.steps]]
exec = "not a list"
[[run.tasks.steps]]
exec = ["true"]
pause = true
`
	_, ps := CheckJob([]byte(job), FormatTOML)
	want := []string{
		"job.bogus: unknown key",
		"job.params.n.default: a required param cannot have a default",
		"run.tasks[0].steps[0].exec: expected a list, got a string",
		"run.tasks[0].steps[1]: exactly one of",
	}
	for _, w := range want {
		if !strings.Contains(ps.Error(), w) {
			t.Errorf("job problems:\n%v\nwant one containing %q", ps, w)
		}
	}
	if len(ps) != len(want) {
		t.Errorf("job problems:\n%v\nwant exactly %d", ps, len(want))
	}

	line := `{"line": {"name": "l"}, "trigger": {"type": "manual"}, "stages": [],
	  "limits": {"budget_usd": "abc", "max_iterations": -1}}`
	_, ps = CheckLine([]byte(line), FormatJSON)
	for _, w := range []string{"limits.budget_usd: expected a decimal amount", "limits.max_iterations", "stages"} {
		if !strings.Contains(ps.Error(), w) {
			t.Errorf("line problems:\n%v\nwant one containing %q", ps, w)
		}
	}
}
