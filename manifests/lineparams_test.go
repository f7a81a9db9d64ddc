package manifests

import (
	"reflect"
	"strings"
	"testing"
)

// paramsJob returns a job manifest declaring params.
func paramsJob(params map[string]JobParamSpec) *JobManifest {
	return &JobManifest{Job: JobSection{Name: "j", Params: params}}
}

func always() *Condition { return &Condition{Op: OpAlways} }

// TestLineInputsFillByName: a later stage's job param a transition into the
// stage does not bind is filled from the run param of the same name, so it
// is an (optional) input of the line; one every transition binds is not.
func TestLineInputsFillByName(t *testing.T) {
	req := JobParamSpec{Type: TypeString, Required: new(true), Description: "Needed by b.", Pattern: "^[a-z]+$"}
	jobs := map[string]*JobManifest{
		"a": paramsJob(map[string]JobParamSpec{"who": {Type: TypeString, Default: "world"}}),
		"b": paramsJob(map[string]JobParamSpec{"req": req, "lit": {Type: TypeInteger, Required: new(true)}}),
		"c": paramsJob(map[string]JobParamSpec{"opt": {Type: TypeBoolean}, "bound": {Type: TypeString}}),
		"z": paramsJob(map[string]JobParamSpec{"never": {Type: TypeString, Required: new(true)}}),
	}
	m := &LineManifest{
		Stages: []LineStage{{ID: "a", Job: "hello"}, {ID: "b", Job: "needs"}, {ID: "c", Job: "more"}, {ID: "z", Job: "orphan"}},
		Transitions: []Transition{
			{Type: TransitionConditional, ID: "ab", From: "a", To: "b", When: always(),
				Params: map[string]ParamBinding{"lit": {Type: BindLiteral, Value: 1}}},
			{Type: TransitionAgentic, ID: "pick", From: "b", Options: []AgenticTransitionOption{
				{Name: "c1", To: "c", Params: map[string]ParamBinding{"bound": {Type: BindLiteral, Value: "x"}}},
				{Name: "c2", To: "c", Params: map[string]ParamBinding{"bound": {Type: BindLiteral, Value: "y"}, "opt": {Type: BindLiteral, Value: true}}},
			}},
		},
	}
	inputs, ps := LineInputs(m, jobs)
	if ps != nil {
		t.Fatalf("problems: %v", ps)
	}
	var names []string
	byName := map[string]LineInput{}
	for _, in := range inputs {
		names = append(names, in.Definition.Name)
		byName[in.Definition.Name] = in
	}
	// lit and bound are bound by every transition into their stage; never's
	// stage has no transition into it.
	if want := []string{"opt", "req", "who"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("inputs %v, want %v", names, want)
	}
	d := byName["req"].Definition
	if d.Type != TypeString || d.Required || d.Description == nil || *d.Description != "Needed by b." || d.Pattern == nil || *d.Pattern != "^[a-z]+$" {
		t.Errorf("req definition %+v, want b's (optional)", d)
	}
	if b := byName["req"].Bound; len(b) != 1 || !b[0].ByName || b[0].Stage != "b" || b[0].Path != "stages[1].job" {
		t.Errorf("req bound %+v", b)
	}
	if d := byName["opt"].Definition; d.Type != TypeBoolean || d.Required {
		t.Errorf("opt definition %+v (c1 leaves it unbound)", d)
	}

	got, ps := ApplyLineParams(inputs, map[string]any{"req": "x"})
	if ps != nil {
		t.Fatalf("ApplyLineParams(req): %v", ps)
	}
	if got["req"] != "x" || got["who"] != "world" {
		t.Errorf("params %v", got)
	}
	if _, ps := ApplyLineParams(inputs, map[string]any{}); ps != nil {
		t.Errorf("req is optional, got %v", ps)
	}
	for _, tc := range []struct {
		name  string
		given map[string]any
	}{
		{"wrong_type", map[string]any{"req": 3}},
		{"pattern", map[string]any{"req": "NOPE"}},
		{"unknown", map[string]any{"never": "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ps := ApplyLineParams(inputs, tc.given)
			if len(ps) != 1 || !strings.HasPrefix(ps[0].Path, "params.") {
				t.Fatalf("problems %v, want one at params.<name>", ps)
			}
		})
	}
}

// TestLineInputsFillByNameConflict: a param filled by name whose type
// conflicts with the entry job's or a bound input's is a problem at its
// stage's job.
func TestLineInputsFillByNameConflict(t *testing.T) {
	jobs := map[string]*JobManifest{
		"a": paramsJob(map[string]JobParamSpec{"who": {Type: TypeString}}),
		"b": paramsJob(map[string]JobParamSpec{"who": {Type: TypeInteger}, "mode": {Type: TypeString}}),
		"c": paramsJob(map[string]JobParamSpec{"mode": {Type: TypeArray, Items: TypeString}}),
	}
	m := &LineManifest{
		Stages: []LineStage{{ID: "a", Job: "a"}, {ID: "b", Job: "b"}, {ID: "c", Job: "c"}},
		Transitions: []Transition{
			{Type: TransitionConditional, ID: "ab", From: "a", To: "b", When: always()},
			{Type: TransitionConditional, ID: "bc", From: "b", To: "c", When: always()},
		},
	}
	_, ps := LineInputs(m, jobs)
	var paths []string
	for _, p := range ps {
		paths = append(paths, p.Path)
	}
	if want := []string{"stages[1].job", "stages[2].job"}; !reflect.DeepEqual(paths, want) {
		t.Fatalf("problems %v, want at %v", ps, want)
	}
	if !strings.Contains(ps[1].Message, "stages[1].job") {
		t.Errorf("message %q does not name the other location", ps[1].Message)
	}
	// Binding the param in every transition into the stage resolves it.
	m.Transitions[0].Params = map[string]ParamBinding{"who": {Type: BindLiteral, Value: 1}}
	m.Transitions[1].Params = map[string]ParamBinding{"mode": {Type: BindLiteral, Value: []any{"x"}}}
	if _, ps := LineInputs(m, jobs); ps != nil {
		t.Fatalf("bound everywhere, got %v", ps)
	}
}
