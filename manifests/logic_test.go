package manifests

import (
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
		"count":  {Type: TypeInteger, Required: boolp(true)},
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
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, ps := ApplyParams(specs, tc.given)
			if ps == nil || !strings.Contains(ps.Error(), tc.want) {
				t.Fatalf("problems %v, want %q", ps, tc.want)
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
			"collect": {Type: TypeInteger, Reduce: ReduceCollect, Required: boolp(false)},
			"gather":  {Type: TypeArray, Items: TypeString, Reduce: ReduceGather},
			"scalars": {Type: TypeInteger, Reduce: ReduceGather, Required: boolp(false)},
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
	for in, want := range map[string]string{`"25.5"`: "25.50", `3`: "3.00", `0.015`: "0.02", `"-1"`: "-1.00"} {
		var u USD
		if err := u.UnmarshalJSON([]byte(in)); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if u.String() != want {
			t.Errorf("%s -> %s, want %s", in, u, want)
		}
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
