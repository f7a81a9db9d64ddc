package api

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/linefactory/linefactory/manifests/manifesttest"
)

// flagJob has a bindable param mode (an enum) and a required level.
var flagJob = manifesttest.Job("flag")

// countJob has a param mode of another type than flag's.
var countJob = manifesttest.Job("count")

func (h *harness) deployJobTOML(t *testing.T, name, manifest string) {
	t.Helper()
	r := h.do(req{method: "POST", path: "/jobs/" + name + "/versions", body: manifest, contentType: "application/toml", scope: ScopeWrite})
	if r.Status != http.StatusCreated && r.Status != http.StatusOK {
		t.Fatalf("deploy job %s: %d %s", name, r.Status, r.Body)
	}
}

// bindingLine is a line build (hello) → check (flag) whose transition has
// the given params, and optionally more transitions and a trigger.
func bindingLine(name string, params map[string]any, trigger map[string]any, more ...map[string]any) map[string]any {
	if trigger == nil {
		trigger = map[string]any{"type": "manual"}
	}
	transitions := []any{map[string]any{"type": "conditional", "id": "to-check", "from": "build", "to": "check",
		"when": map[string]any{"op": "always"}, "params": params}}
	for _, t := range more {
		transitions = append(transitions, t)
	}
	return map[string]any{"manifest": map[string]any{
		"line":    map[string]any{"name": name},
		"trigger": trigger,
		"stages": []any{map[string]any{"id": "build", "job": "hello"}, map[string]any{"id": "check", "job": "flag"},
			map[string]any{"id": "tally", "job": "count"}},
		"transitions": transitions,
	}}
}

func inputBinding(name string) map[string]any { return map[string]any{"type": "input", "name": name} }

func (h *harness) deployLineBody(t *testing.T, name string, body map[string]any) response {
	t.Helper()
	return h.do(req{method: "POST", path: "/factory/lines/" + name + "/deploy", body: body, scope: ScopeWrite})
}

func deployJobs(t *testing.T, h *harness) {
	t.Helper()
	h.deployExampleJob("hello")
	h.deployJobTOML(t, "flag", flagJob)
	h.deployJobTOML(t, "count", countJob)
}

// TestLineInputBindingParams: an input a binding reads is a run param of the
// line even when the entry job does not declare it; its definition is the
// bound job param's, required only when that param is required.
func TestLineInputBindingParams(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		runs := &fakeRuns{}
		h.srv.cfg.Runs = runs
		deployJobs(t, h)
		r := h.deployLineBody(t, "x", bindingLine("x", map[string]any{"mode": inputBinding("mode"), "level": inputBinding("lvl")}, nil))
		expect(t, r, http.StatusCreated)
		var dep struct {
			InputParams []map[string]any `json:"input_params"`
		}
		if err := json.Unmarshal(r.Body, &dep); err != nil {
			t.Fatal(err)
		}
		got := map[string]map[string]any{}
		var names []string
		for _, p := range dep.InputParams {
			got[p["name"].(string)] = p
			names = append(names, p["name"].(string))
		}
		if want := []string{"lvl", "mode", "who"}; !reflect.DeepEqual(names, want) {
			t.Fatalf("input_params names %v, want %v\n%s", names, want, r.Body)
		}
		if p := got["mode"]; p["type"] != "string" || p["required"] != false || p["description"] != "How the check ends." ||
			!reflect.DeepEqual(p["enum"], []any{"pass", "fail"}) {
			t.Errorf("mode definition %v", p)
		}
		if p := got["lvl"]; p["type"] != "integer" || p["required"] != true {
			t.Errorf("lvl definition %v (it feeds a required param)", p)
		}
		if p := got["who"]; p["type"] != "string" || p["required"] != false {
			t.Errorf("who definition %v", p)
		}

		start := func(params map[string]any) response {
			return h.do(req{method: "POST", path: "/factory/lines/x/runs", body: map[string]any{"params": params}, scope: ScopeWrite})
		}
		r = start(map[string]any{"mode": "fail", "lvl": 2})
		expect(t, r, http.StatusCreated)
		got2, _ := json.Marshal(runs.lines[len(runs.lines)-1].Params)
		if want := `{"lvl":2,"mode":"fail","who":"world"}`; string(got2) != want {
			t.Errorf("run params %s, want %s", got2, want)
		}
		expectDetail(t, start(map[string]any{"mode": "maybe", "lvl": 2}), "body", "params", "mode")
		expectDetail(t, start(map[string]any{"lvl": "two"}), "body", "params", "lvl")
		expectDetail(t, start(map[string]any{"mode": "fail"}), "body", "params", "lvl")
		expectDetail(t, start(map[string]any{"lvl": 1, "nope": 1}), "body", "params", "nope")
	})
}

// TestLineInputBindingConflict: one input bound to params of two types is
// refused at deploy, with both locations.
func TestLineInputBindingConflict(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		deployJobs(t, h)
		more := map[string]any{"type": "conditional", "id": "to-tally", "from": "check", "to": "tally",
			"when": map[string]any{"op": "always"}, "params": map[string]any{"mode": inputBinding("mode")}}
		r := h.deployLineBody(t, "x", bindingLine("x", map[string]any{"mode": inputBinding("mode"), "level": map[string]any{"type": "literal", "value": 1}}, nil, more))
		m := expectError(t, r, http.StatusUnprocessableEntity, CodeValidation)
		msg, _ := m["message"].(string)
		if !strings.Contains(msg, "transitions[1].params.mode.name") || !strings.Contains(msg, "transitions[0].params.mode") {
			t.Fatalf("message does not locate both bindings: %s", msg)
		}
		// An input the entry job declares with another type conflicts too.
		more["params"] = map[string]any{"mode": inputBinding("who")}
		r = h.deployLineBody(t, "x", bindingLine("x", map[string]any{"level": map[string]any{"type": "literal", "value": 1}}, nil, more))
		m = expectError(t, r, http.StatusUnprocessableEntity, CodeValidation)
		if msg, _ := m["message"].(string); !strings.Contains(msg, "transitions[1].params.mode.name") {
			t.Fatalf("message %s", msg)
		}
	})
}

// TestLineDeployChecksBindings: bindings are checked against the jobs they
// feed and read at deploy.
func TestLineDeployChecksBindings(t *testing.T) {
	lit := func(v any) map[string]any { return map[string]any{"type": "literal", "value": v} }
	out := func(stage, name string) map[string]any {
		return map[string]any{"type": "output", "stage": stage, "name": name}
	}
	agentic := func(params map[string]any) map[string]any {
		return map[string]any{"type": "agentic", "id": "pick", "from": "check", "instructions": lit("choose"),
			"options": []any{map[string]any{"name": "again", "to": "check", "params": params}}}
	}
	for _, tc := range []struct {
		name   string
		params map[string]any
		more   []map[string]any
		want   string // a location in the message; "" = deploys
	}{
		{"ok", map[string]any{"mode": lit("pass"), "level": out("build", "greeting")}, nil, ""},
		{"undeclared_param", map[string]any{"zzz": lit("x")}, nil, "transitions[0].params.zzz:"},
		{"literal_type", map[string]any{"level": lit("high")}, nil, "transitions[0].params.level:"},
		{"literal_enum", map[string]any{"mode": lit("maybe")}, nil, "transitions[0].params.mode:"},
		{"unknown_output", map[string]any{"mode": out("build", "nope")}, nil, "transitions[0].params.mode.name:"},
		{"option_undeclared_param", map[string]any{"mode": lit("pass")}, []map[string]any{agentic(map[string]any{"zzz": lit(1)})},
			"transitions[1].options[0].params.zzz:"},
		{"option_literal", map[string]any{"mode": lit("pass")}, []map[string]any{agentic(map[string]any{"level": lit(true)})},
			"transitions[1].options[0].params.level:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, h *harness) {
				deployJobs(t, h)
				r := h.deployLineBody(t, "x", bindingLine("x", tc.params, nil, tc.more...))
				if tc.want == "" {
					expect(t, r, http.StatusCreated)
					return
				}
				m := expectError(t, r, http.StatusUnprocessableEntity, CodeValidation)
				if msg, _ := m["message"].(string); !strings.Contains(msg, tc.want) {
					t.Fatalf("message %q does not locate %s", msg, tc.want)
				}
			})
		})
	}
}

// TestScheduleInputsValidated: a schedule's inputs are checked like a manual
// start's params, on PUT and in a schedule trigger at deploy.
func TestScheduleInputsValidated(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		h.srv.cfg.Runs = &fakeRuns{}
		deployJobs(t, h)
		params := map[string]any{"mode": inputBinding("mode"), "level": inputBinding("lvl")}
		expect(t, h.deployLineBody(t, "x", bindingLine("x", params, nil)), http.StatusCreated)
		put := func(inputs map[string]any) response {
			return h.do(req{method: "PUT", path: "/factory/lines/x/schedule", body: map[string]any{"cron": "* * * * *", "inputs": inputs}, scope: ScopeWrite})
		}
		expectDetail(t, put(map[string]any{"nope": 1, "lvl": 1}), "body", "inputs", "nope")
		expectDetail(t, put(map[string]any{"mode": "pass"}), "body", "inputs", "lvl")
		expectDetail(t, put(map[string]any{"lvl": 1, "mode": 3}), "body", "inputs", "mode")
		r := put(map[string]any{"lvl": 1, "mode": "fail"})
		expect(t, r, http.StatusOK)
		if m := r.json(t); !reflect.DeepEqual(m["inputs"], map[string]any{"lvl": 1.0, "mode": "fail"}) {
			t.Fatalf("schedule %s", r.Body)
		}

		trigger := func(inputs map[string]any) map[string]any {
			return map[string]any{"type": "schedule", "cron": "0 * * * *", "inputs": inputs}
		}
		r = h.deployLineBody(t, "y", bindingLine("y", params, trigger(map[string]any{"nope": 1, "lvl": 1})))
		m := expectError(t, r, http.StatusUnprocessableEntity, CodeValidation)
		if msg, _ := m["message"].(string); !strings.Contains(msg, "trigger.inputs.nope:") {
			t.Fatalf("message %s", msg)
		}
		r = h.deployLineBody(t, "y", bindingLine("y", params, trigger(nil)))
		m = expectError(t, r, http.StatusUnprocessableEntity, CodeValidation)
		if msg, _ := m["message"].(string); !strings.Contains(msg, "trigger.inputs.lvl:") {
			t.Fatalf("a required input is missing, message %s", msg)
		}
		expect(t, h.deployLineBody(t, "y", bindingLine("y", params, trigger(map[string]any{"lvl": 3}))), http.StatusCreated)
	})
}

// needsJob has a required param req no line binds in TestLineFillByNameInputs.
var needsJob = manifesttest.Job("needs")

// TestLineFillByNameInputs: a later stage's job param no transition into
// it binds is filled from the run param of that name, so it is an (optional)
// input of the line, given at the start like the entry job's params.
func TestLineFillByNameInputs(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		runs := &fakeRuns{}
		h.srv.cfg.Runs = runs
		h.deployExampleJob("hello")
		h.deployJobTOML(t, "needs", needsJob)
		r := h.deployLineBody(t, "x", map[string]any{"manifest": map[string]any{
			"line":    map[string]any{"name": "x"},
			"trigger": map[string]any{"type": "manual"},
			"stages":  []any{map[string]any{"id": "a", "job": "hello"}, map[string]any{"id": "b", "job": "needs"}},
			"transitions": []any{map[string]any{"type": "conditional", "id": "a-b", "from": "a", "to": "b",
				"when": map[string]any{"op": "always"}}},
		}})
		expect(t, r, http.StatusCreated)
		var dep struct {
			InputParams []map[string]any `json:"input_params"`
		}
		if err := json.Unmarshal(r.Body, &dep); err != nil {
			t.Fatal(err)
		}
		var def map[string]any
		for _, p := range dep.InputParams {
			if p["name"] == "req" {
				def = p
			}
		}
		if def == nil || def["type"] != "string" || def["required"] != false || def["description"] != "Filled by name." {
			t.Fatalf("input_params %s: want req (string, optional, b's description)", r.Body)
		}

		start := func(params map[string]any) response {
			return h.do(req{method: "POST", path: "/factory/lines/x/runs", body: map[string]any{"params": params}, scope: ScopeWrite})
		}
		r = start(map[string]any{"req": "x"})
		expect(t, r, http.StatusCreated)
		if got := runs.lines[len(runs.lines)-1].Params["req"]; got != "x" {
			t.Errorf("run params %v, want req = x", runs.lines[len(runs.lines)-1].Params)
		}
		if rp, _ := r.json(t)["run_params"].(map[string]any); rp["req"] != "x" {
			t.Errorf("response %s: want run_params.req = x", r.Body)
		}
		expectDetail(t, start(map[string]any{"req": 3}), "body", "params", "req")
	})
}
