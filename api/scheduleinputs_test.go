package api

import (
	"net/http"
	"strings"
	"testing"
)

// A schedule's inputs are every firing's params: over the params limit
// (README, Limits: 256 KiB, 413 with limit and requested) the PUT is
// refused instead of stored (it answered 200, and a firing with inputs over
// Temporal's blob limit could never start).
func TestScheduleInputsOverTheParamsLimit(t *testing.T) {
	h := newHarness(t, storetestSQLite(t))
	runs := &fakeRuns{}
	h.srv.cfg.Runs = runs
	h.deployExampleJob("nightly-report")
	expect(t, h.do(req{method: "POST", path: "/factory/lines/nightly/deploy", body: readExample(t, "lines/nightly.toml"), contentType: "application/toml", scope: ScopeWrite}), 201)
	engine := len(runs.schedules)
	big := map[string]any{"cron": "0 5 * * *", "inputs": map[string]any{"days": strings.Repeat("x", 300<<10)}}
	r := h.do(req{method: "PUT", path: "/factory/lines/nightly/schedule", body: big, scope: ScopeWrite})
	expectError(t, r, http.StatusRequestEntityTooLarge, CodeInvalidRequest)
	body := r.json(t)
	if body["limit"] != float64(256<<10) || body["requested"].(float64) <= 256<<10 || !strings.Contains(body["message"].(string), "inputs") {
		t.Fatalf("413 body: %v", body)
	}
	if len(runs.schedules) != engine {
		t.Fatalf("the refused schedule reached the engine: %+v", runs.schedules[engine:])
	}
	r = h.do(req{method: "GET", path: "/factory/lines/nightly/schedule", scope: ScopeRead})
	if r.json(t)["cron"] != "30 2 * * 1-5" {
		t.Fatalf("the stored schedule changed: %s", r.Body)
	}
}
