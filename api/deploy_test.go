package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// TestDeployKeepsScheduleInStep: a schedule trigger reaches the engine on
// every deploy (an identical redeploy repairs a failed engine call) without
// bumping the generation; a version whose trigger is no longer a schedule
// drops it; lines without a schedule trigger keep their PUT-made schedule.
func TestDeployKeepsScheduleInStep(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		var up atomic.Bool // the engine is down until up
		runs := (&fakeRuns{}).on("UpsertSchedule", func(context.Context, any) error {
			if !up.Load() {
				return errors.New("engine unreachable")
			}
			return nil
		})
		h.srv.cfg.Runs = runs
		h.deployExampleJob("nightly-report")
		nightly := readExample(t, "lines/nightly.toml")
		deploy := func(body string) response {
			t.Helper()
			return h.do(req{method: "POST", path: "/factory/lines/nightly/deploy", body: body, contentType: "application/toml", scope: ScopeWrite})
		}
		schedule := func() map[string]any {
			t.Helper()
			r := h.do(req{method: "GET", path: "/factory/lines/nightly/schedule", scope: ScopeRead})
			expect(t, r, http.StatusOK)
			return r.json(t)
		}

		// The engine is down: the version is stored, the answer is 502.
		expectError(t, deploy(nightly), http.StatusBadGateway, CodeBadGateway)
		if n := len(recorded(runs, &runs.schedules)); n != 0 {
			t.Fatalf("engine has %d schedules", n)
		}
		// An identical redeploy (200) hands the schedule to the engine.
		up.Store(true)
		expect(t, deploy(nightly), http.StatusOK)
		got := recorded(runs, &runs.schedules)
		if len(got) != 1 || got[0].Cron != "30 2 * * 1-5" || got[0].ScheduleGeneration != 1 {
			t.Fatalf("engine schedules after the repairing redeploy: %+v", got)
		}
		// Again: idempotent, the generation does not move.
		expect(t, deploy(nightly), http.StatusOK)
		if sc := schedule(); sc["schedule_generation"] != 1.0 {
			t.Fatalf("identical redeploy bumped the generation: %v", sc)
		}
		// A schedule paused by PUT survives an identical redeploy.
		expect(t, h.do(req{method: "PUT", path: "/factory/lines/nightly/schedule", body: map[string]any{"cron": "30 2 * * 1-5", "timezone": "America/New_York", "enabled": false, "inputs": map[string]any{"days": 7}}, scope: ScopeWrite}), http.StatusOK)
		expect(t, deploy(nightly), http.StatusOK)
		if sc := schedule(); sc["enabled"] != false || sc["schedule_generation"] != 2.0 {
			t.Fatalf("identical redeploy overwrote the PUT schedule: %v", sc)
		}
		// A changed schedule trigger is the new schedule.
		expect(t, deploy(strings.Replace(nightly, "30 2 * * 1-5", "0 4 * * *", 1)), http.StatusCreated)
		if sc := schedule(); sc["cron"] != "0 4 * * *" || sc["enabled"] != true || sc["schedule_generation"] != 3.0 {
			t.Fatalf("changed trigger: %v", sc)
		}
		// A version whose trigger is manual drops the schedule.
		manual := strings.Replace(nightly, `type = "schedule"
cron = "30 2 * * 1-5"
timezone = "America/New_York"
inputs = { days = 7 }`, `type = "manual"`, 1)
		expect(t, deploy(manual), http.StatusCreated)
		expectError(t, h.do(req{method: "GET", path: "/factory/lines/nightly/schedule", scope: ScopeRead}), http.StatusNotFound, CodeNotFound)
		if d := recorded(runs, &runs.deleted); len(d) != 1 || d[0] != "nightly" {
			t.Fatalf("engine deletes: %v", d)
		}
		// A PUT-made schedule of a manual line is left alone by deploys.
		expect(t, h.do(req{method: "PUT", path: "/factory/lines/nightly/schedule", body: map[string]any{"cron": "0 5 * * *"}, scope: ScopeWrite}), http.StatusOK)
		expect(t, deploy(manual), http.StatusOK)
		expect(t, deploy(strings.Replace(manual, `name = "nightly"`, "name = \"nightly\"\ndescription = \"changed\"", 1)), http.StatusCreated)
		if sc := schedule(); sc["cron"] != "0 5 * * *" {
			t.Fatalf("deploy of a manual line touched its PUT schedule: %v", sc)
		}
		if d := recorded(runs, &runs.deleted); len(d) != 1 {
			t.Fatalf("engine deletes after manual deploys: %v", d)
		}
	})
}

// TestReturnedManifestHasDefaults: every SPEC default is filled in the
// manifest a deploy returns.
func TestReturnedManifestHasDefaults(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		job := map[string]any{
			"job": map[string]any{"name": "defaults", "params": map[string]any{"who": map[string]any{"type": "string", "default": "x"}}},
			"run": map[string]any{"sandbox": map[string]any{"image": "alpine"},
				"tasks": []any{map[string]any{"name": "t", "steps": []any{map[string]any{"exec": []any{"true"}, "outputs": []any{"o"}}}}}},
			"schedule":     map[string]any{"cron": "0 3 * * *"},
			"verification": map[string]any{},
			"outputs":      map[string]any{"o": map[string]any{"type": "string"}},
		}
		r := h.do(req{method: "POST", path: "/jobs/defaults/versions", body: map[string]any{"manifest": job}, scope: ScopeWrite})
		expect(t, r, http.StatusCreated)
		m := r.json(t)["manifest"].(map[string]any)
		at := func(path ...string) any {
			var v any = m
			for _, p := range path {
				v = v.(map[string]any)[p]
			}
			return v
		}
		for _, tc := range []struct {
			path []string
			want any
		}{
			{[]string{"job", "params", "who", "required"}, false},
			{[]string{"run", "fail_fast"}, true},
			{[]string{"run", "fanout"}, false},
			{[]string{"run", "concurrency"}, 1.0},
			{[]string{"run", "sandbox", "mode"}, "provision"},
			{[]string{"run", "sandbox", "vcpus"}, 2.0},
			{[]string{"run", "sandbox", "memory_mb"}, 2048.0},
			{[]string{"run", "sandbox", "disk_gb"}, 10.0},
			{[]string{"run", "sandbox", "internet_enabled"}, true},
			{[]string{"schedule", "timezone"}, "UTC"},
			{[]string{"schedule", "enabled"}, true},
			{[]string{"verification", "enabled"}, false},
			{[]string{"outputs", "o", "required"}, true},
			{[]string{"outputs", "o", "reduce"}, "one"},
		} {
			if got := at(tc.path...); got != tc.want {
				t.Errorf("%s = %v, want %v", strings.Join(tc.path, "."), got, tc.want)
			}
		}

		h.deployExampleJob("hello")
		line := map[string]any{
			"line":    map[string]any{"name": "budget"},
			"trigger": map[string]any{"type": "schedule", "cron": "0 3 * * *"},
			"stages":  []any{map[string]any{"id": "s", "job": "hello"}},
			"limits":  map[string]any{"budget_usd": 25.5},
		}
		r = h.do(req{method: "POST", path: "/factory/lines/budget/deploy", body: map[string]any{"manifest": line}, scope: ScopeWrite})
		expect(t, r, http.StatusCreated)
		lm := r.json(t)["manifest"].(map[string]any)
		if got := lm["limits"].(map[string]any)["budget_usd"]; got != "25.50" {
			t.Errorf("budget_usd = %v, want \"25.50\"", got)
		}
		if got := lm["trigger"].(map[string]any)["timezone"]; got != "UTC" {
			t.Errorf("trigger.timezone = %v, want UTC", got)
		}
	})
}

// TestDeployBodyErrors: malformed deploy bodies answer 422 with the deploy
// error body.
func TestDeployBodyErrors(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		hello := readExample(t, "jobs/hello/job.toml")
		valid := `{"manifest": {"job": {"name": "x"}, "run": {"tasks": [{"name": "t", "steps": [{"exec": ["true"]}]}]}}}`
		for _, tc := range []struct {
			name, body, ct, want string
		}{
			{"trailing garbage", valid + " garbage", "", "unexpected data after the JSON body"},
			{"trailing brace", valid + "}", "", "unexpected data after the JSON body"},
			{"second document", valid + valid, "", "unexpected data after the JSON body"},
			{"empty body", "", "", "the request body is empty"},
			{"blank body", " \n", "", "the request body is empty"},
			{"toml as text/plain", hello, "text/plain", `Content-Type "text/plain"`},
			{"json as form", valid[:20], "application/x-www-form-urlencoded", "must be JSON"},
			{"a JSON array", "[]", "", "got a JSON array, not an object"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				m := expectError(t, h.do(req{method: "POST", path: "/jobs/x/versions", body: tc.body, contentType: tc.ct, scope: ScopeWrite}), 422, CodeValidation)
				if !strings.Contains(m["message"].(string), tc.want) {
					t.Fatalf("message %q lacks %q", m["message"], tc.want)
				}
			})
		}
		// Trailing data on a line deploy too.
		m := expectError(t, h.do(req{method: "POST", path: "/factory/lines/l/deploy", body: `{"manifest": {}} x`, scope: ScopeWrite}), 422, CodeValidation)
		if !strings.Contains(m["message"].(string), "unexpected data") {
			t.Fatalf("line deploy with trailing data: %v", m["message"])
		}
		// Several problems are listed together, each with its location.
		bad := `{"manifest": {"job": {"name": "Other Name!"}, "run": {"concurrency": 0, "tasks": [{"name": "t", "steps": [{"exec": ["true"], "pause": true}]}]}}}`
		m = expectError(t, h.do(req{method: "POST", path: "/jobs/x/versions", body: bad, scope: ScopeWrite}), 422, CodeValidation)
		msg := m["message"].(string)
		for _, want := range []string{"job.name", "run.concurrency", "run.tasks[0].steps[0]"} {
			if !strings.Contains(msg, want) {
				t.Errorf("message %q lacks %q", msg, want)
			}
		}
		// Unknown keys and wrong types do not hide the other problems.
		bad = `{"manifest": {"job": {"name": "x", "bogus": 1}, "run": {"fanout": "yes", "concurrency": 0, "tasks": [{"name": "t", "steps": [{"exec": ["true"], "pause": true}]}]}}}`
		m = expectError(t, h.do(req{method: "POST", path: "/jobs/x/versions", body: bad, scope: ScopeWrite}), 422, CodeValidation)
		msg = m["message"].(string)
		for _, want := range []string{"job.bogus: unknown key", "run.fanout: expected a boolean", "run.concurrency", "run.tasks[0].steps[0]"} {
			if !strings.Contains(msg, want) {
				t.Errorf("message %q lacks %q", msg, want)
			}
		}
		line := `{"manifest": {"line": {"name": "l", "colour": "red"}, "trigger": {"type": "manual"},
		  "stages": [{"id": "s", "job": "nosuch"}], "limits": {"budget_usd": "abc", "max_iterations": -1}}}`
		m = expectError(t, h.do(req{method: "POST", path: "/factory/lines/l/deploy", body: line, scope: ScopeWrite}), 422, CodeValidation)
		msg = m["message"].(string)
		for _, want := range []string{"line.colour: unknown key", "limits.budget_usd", "limits.max_iterations", "stages[0].job"} {
			if !strings.Contains(msg, want) {
				t.Errorf("line message %q lacks %q", msg, want)
			}
		}
		if r := h.do(req{method: "GET", path: "/jobs", scope: ScopeRead}); len(r.list(t)) != 0 {
			t.Fatalf("invalid deploys stored jobs: %s", r.Body)
		}
	})
}

// TestDeployLengthLimits: a cron longer than its column is a manifest
// problem, not a database error.
func TestDeployLengthLimits(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		h.deployExampleJob("nightly-report")
		long := strings.TrimSuffix(strings.Repeat("1,", 130), ",")
		line := strings.Replace(readExample(t, "lines/nightly.toml"), `cron = "30 2 * * 1-5"`, `cron = "`+long+` 2 * * *"`, 1)
		m := expectError(t, h.do(req{method: "POST", path: "/factory/lines/nightly/deploy", body: line, contentType: "application/toml", scope: ScopeWrite}), 422, CodeValidation)
		if !strings.Contains(m["message"].(string), "trigger.cron") {
			t.Fatalf("long cron: %v", m["message"])
		}
		expectDetail(t, h.do(req{method: "PUT", path: "/factory/lines/nightly/schedule", body: map[string]any{"cron": long + " 2 * * *"}, scope: ScopeWrite}), "body", "cron")
	})
}
