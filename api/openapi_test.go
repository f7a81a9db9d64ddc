package api

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestManifestSchemas: every example manifest deploys and its response
// validates against the manifest schemas (the harness checks it), and the
// schemas are strict enough to catch a wrong manifest.
func TestManifestSchemas(t *testing.T) {
	h := newHarness(t, storetestSQLite(t))
	h.createExampleKnowledge()
	jobs, _ := filepath.Glob(filepath.Join("..", "manifests", "examples", "jobs", "*", "job.*"))
	if len(jobs) == 0 {
		t.Fatal("no example jobs")
	}
	var jobManifest map[string]any
	for _, f := range jobs {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := req{method: "POST", path: "/jobs/" + filepath.Base(filepath.Dir(f)) + "/versions", body: string(data), contentType: "application/toml", scope: ScopeWrite}
		if strings.HasSuffix(f, ".json") {
			r.body, r.contentType = `{"manifest": `+string(data)+`}`, ""
		}
		resp := h.do(r)
		expect(t, resp, http.StatusCreated)
		jobManifest = resp.json(t)["manifest"].(map[string]any)
	}
	lines, _ := filepath.Glob(filepath.Join("..", "manifests", "examples", "lines", "*"))
	var lineManifest map[string]any
	for _, f := range lines {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(f), ".toml"), ".json")
		r := req{method: "POST", path: "/factory/lines/" + name + "/deploy", body: string(data), contentType: "application/toml", scope: ScopeWrite}
		if strings.HasSuffix(f, ".json") {
			r.body, r.contentType = `{"manifest": `+string(data)+`}`, ""
		}
		resp := h.do(r)
		expect(t, resp, http.StatusCreated)
		lineManifest = resp.json(t)["manifest"].(map[string]any)
	}

	check := func(name string, doc map[string]any, valid bool) {
		t.Helper()
		var v any
		b, _ := json.Marshal(doc)
		_ = json.Unmarshal(b, &v)
		err := h.doc.Components.Schemas[name].Value.VisitJSON(v)
		if valid && err != nil {
			t.Errorf("%s does not validate: %v", name, err)
		}
		if !valid && err == nil {
			t.Errorf("%s validates a wrong manifest: %s", name, b)
		}
	}
	clone := func(m map[string]any) map[string]any {
		var out map[string]any
		b, _ := json.Marshal(m)
		_ = json.Unmarshal(b, &out)
		return out
	}
	check("JobManifest", jobManifest, true)
	check("LineManifest", lineManifest, true)

	bad := clone(jobManifest)
	bad["bogus"] = 1
	check("JobManifest", bad, false)
	bad = clone(jobManifest)
	bad["run"].(map[string]any)["tasks"].([]any)[0].(map[string]any)["steps"] = []any{map[string]any{"run_agent": map[string]any{"mode": "session", "harness": "custom"}}}
	check("JobManifest", bad, false) // custom is an exec-mode harness only
	bad = clone(jobManifest)
	bad["run"].(map[string]any)["tasks"].([]any)[0].(map[string]any)["steps"] = []any{map[string]any{"exec": []any{"true"}, "outputs": map[string]any{"k": map[string]any{"from": "x", "required": true}}}}
	check("JobManifest", bad, true) // outputs as a table
	bad = clone(lineManifest)
	bad["trigger"] = map[string]any{"type": "webhook"}
	check("LineManifest", bad, false) // webhook needs a path
	bad["trigger"] = map[string]any{"type": "schedule", "cron": "0 3 * * *", "path": "x"}
	check("LineManifest", bad, false) // path is not a schedule field
	bad["trigger"] = map[string]any{"type": "manual"}
	bad["transitions"] = []any{map[string]any{"type": "conditional", "id": "t", "from": "a", "to": "b",
		"when": map[string]any{"op": "all", "conditions": []any{map[string]any{"op": "not", "condition": map[string]any{"op": "eq", "left": map[string]any{"type": "literal", "value": 1}}}}}}}
	check("LineManifest", bad, false) // eq needs right, deep in a recursive condition
	bad["limits"] = map[string]any{"budget_usd": 25.5}
	delete(bad, "transitions")
	check("LineManifest", bad, false) // a number is input only
	check("LineManifestInput", bad, true)

	// The page parameters carry their bounds.
	op := h.doc.Paths.Find("/jobs").Get
	for _, p := range op.Parameters {
		s := p.Value.Schema.Value
		switch p.Value.Name {
		case "limit":
			if s.Min == nil || *s.Min != 1 || s.Max == nil || *s.Max != MaxLimit {
				t.Errorf("limit bounds: min %v max %v", s.Min, s.Max)
			}
		case "offset":
			if s.Min == nil || *s.Min != 0 {
				t.Errorf("offset minimum: %v", s.Min)
			}
		}
	}
}
