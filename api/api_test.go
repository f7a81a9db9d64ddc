package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/gin-gonic/gin"

	"github.com/linefactory/linefactory/manifests"
)

func TestJobVersions(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		tomlBody := readExample(t, "jobs/hello/job.toml")
		r := h.do(req{method: "POST", path: "/jobs/hello/versions", body: tomlBody, contentType: "application/toml", scope: ScopeWrite})
		expect(t, r, http.StatusCreated)
		v1 := r.json(t)
		if v1["version_number"] != 1.0 || !strings.HasPrefix(v1["id"].(string), "jv_") {
			t.Fatalf("first version: %v", v1)
		}
		manifest := v1["manifest"].(map[string]any)
		if run := manifest["run"].(map[string]any); run["fail_fast"] != true || run["concurrency"] != 1.0 {
			t.Fatalf("defaults not filled in the returned manifest: %v", run)
		}

		// The same manifest as JSON: same hash, same version, 200.
		var m map[string]any
		if _, err := toml.Decode(tomlBody, &m); err != nil {
			t.Fatal(err)
		}
		r = h.do(req{method: "POST", path: "/jobs/hello/versions", body: map[string]any{"manifest": m}, scope: ScopeWrite})
		expect(t, r, http.StatusOK)
		if got := r.json(t); got["content_hash"] != v1["content_hash"] || got["id"] != v1["id"] {
			t.Fatalf("JSON deploy of the same manifest: %v, want hash %v and id %v", got, v1["content_hash"], v1["id"])
		}

		// A changed manifest is version 2.
		changed := strings.Replace(tomlBody, `default = "world"`, `default = "there"`, 1)
		r = h.do(req{method: "POST", path: "/jobs/hello/versions", body: changed, contentType: "application/toml", scope: ScopeWrite})
		expect(t, r, http.StatusCreated)
		v2 := r.json(t)
		if v2["version_number"] != 2.0 || v2["content_hash"] == v1["content_hash"] {
			t.Fatalf("second version: %v", v2)
		}

		r = h.do(req{method: "GET", path: "/jobs/hello/versions", scope: ScopeRead})
		expect(t, r, http.StatusOK)
		list := r.list(t)
		if len(list) != 2 || list[0]["version_number"] != 2.0 || list[0]["manifest"] != nil {
			t.Fatalf("versions newest first without manifest: %v", list)
		}
		r = h.do(req{method: "GET", path: "/jobs/hello/versions/" + v1["id"].(string), scope: ScopeRead})
		expect(t, r, http.StatusOK)
		if r.json(t)["version_number"] != 1.0 {
			t.Fatalf("get version 1: %s", r.Body)
		}
		expectError(t, h.do(req{method: "GET", path: "/jobs/hello/versions/jv_nope", scope: ScopeRead}), 404, CodeNotFound)

		r = h.do(req{method: "GET", path: "/jobs/hello", scope: ScopeRead})
		expect(t, r, http.StatusOK)
		if job := r.json(t); job["latest_version_number"] != 2.0 || job["latest_version"].(map[string]any)["id"] != v2["id"] {
			t.Fatalf("job: %v", job)
		}
		expectError(t, h.do(req{method: "GET", path: "/jobs/nope", scope: ScopeRead}), 404, CodeNotFound)
		expectError(t, h.do(req{method: "GET", path: "/jobs/nope/versions", scope: ScopeRead}), 404, CodeNotFound)
	})
}

func TestJobVersionInvalid(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		cases := []struct {
			name, path, body, ct, want string
		}{
			{"name mismatch", "/jobs/other/versions", readExample(t, "jobs/hello/job.toml"), "application/toml", `job.name: name "hello" does not match the path name "other"`},
			{"bad toml", "/jobs/x/versions", "[job\nname=", "application/toml", "invalid TOML"},
			{"no manifest key", "/jobs/x/versions", `{"manifests": {}}`, "", "manifest: is required"},
			{"not json", "/jobs/x/versions", `{"manifest":`, "", "must be JSON"},
			{"unknown key json", "/jobs/x/versions", `{"manifest": {"job": {"name": "x"}, "run": {"tasks": [{"name": "t", "steps": [{"exec": ["true"], "bogus": 1}]}]}}}`, "", "run.tasks[0].steps[0].bogus: unknown key"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				m := expectError(t, h.do(req{method: "POST", path: tc.path, body: tc.body, contentType: tc.ct, scope: ScopeWrite}), 422, CodeValidation)
				if !strings.Contains(m["message"].(string), tc.want) {
					t.Fatalf("message %q lacks %q", m["message"], tc.want)
				}
			})
		}
		// nothing was stored
		r := h.do(req{method: "GET", path: "/jobs", scope: ScopeRead})
		if l := r.list(t); len(l) != 0 {
			t.Fatalf("invalid deploys stored jobs: %v", l)
		}
	})
}

func TestInvalidCorpusOverAPI(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		h.deployExampleJob("hello")
		h.deployExampleJob("check")
		for _, kind := range []string{"jobs", "lines"} {
			files, _ := filepath.Glob(filepath.Join("..", "manifests", "testdata", "invalid", kind, "*.toml"))
			if len(files) == 0 {
				t.Fatal("no invalid corpus")
			}
			for _, f := range files {
				data, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				path := "/jobs/x/versions"
				if kind == "lines" {
					path = "/factory/lines/l/deploy"
				}
				r := h.do(req{method: "POST", path: path, body: string(data), contentType: "application/toml", scope: ScopeWrite})
				m := expectError(t, r, 422, CodeValidation)
				for _, want := range manifests.WantedProblems(data) {
					if !strings.Contains(m["message"].(string), want) {
						t.Errorf("%s: message %q lacks %q", f, m["message"], want)
					}
				}
			}
		}
	})
}

func TestConcurrentDeploysOverAPI(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		base := readExample(t, "jobs/hello/job.toml")
		var wg sync.WaitGroup
		nums := make([]int, 20)
		for i := range nums {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				body := strings.Replace(base, `default = "world"`, fmt.Sprintf(`default = "w%d"`, i), 1)
				r := h.do(req{method: "POST", path: "/jobs/hello/versions", body: body, contentType: "application/toml", scope: ScopeWrite})
				if r.Status != http.StatusCreated {
					t.Errorf("deploy %d: %d %s", i, r.Status, r.Body)
					return
				}
				var v struct {
					VersionNumber int `json:"version_number"`
				}
				_ = json.Unmarshal(r.Body, &v)
				nums[i] = v.VersionNumber
			}(i)
		}
		wg.Wait()
		sort.Ints(nums)
		for i, n := range nums {
			if n != i+1 {
				t.Fatalf("versions %v, want 1..20", nums)
			}
		}
	})
}

func TestLines(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		line := readExample(t, "lines/build-until-green.toml")
		m := expectError(t, h.do(req{method: "POST", path: "/factory/lines/build-until-green/deploy", body: line, contentType: "application/toml", scope: ScopeWrite}), 422, CodeValidation)
		if !strings.Contains(m["message"].(string), `stages[0].job: unknown job "hello"`) {
			t.Fatalf("missing job: %v", m["message"])
		}
		hello := h.deployExampleJob("hello")
		checkJob := h.deployExampleJob("check")

		// A pinned version must belong to the stage's job.
		pinned := strings.Replace(line, "job = \"check\"\n", fmt.Sprintf("job = \"check\"\njob_version_id = %q\n", hello["id"]), 1)
		m = expectError(t, h.do(req{method: "POST", path: "/factory/lines/build-until-green/deploy", body: pinned, contentType: "application/toml", scope: ScopeWrite}), 422, CodeValidation)
		if !strings.Contains(m["message"].(string), "stages[1].job_version_id") {
			t.Fatalf("foreign pinned version: %v", m["message"])
		}
		pinned = strings.Replace(line, "job = \"check\"\n", fmt.Sprintf("job = \"check\"\njob_version_id = %q\n", checkJob["id"]), 1)
		expect(t, h.do(req{method: "POST", path: "/factory/lines/build-until-green/deploy", body: pinned, contentType: "application/toml", scope: ScopeWrite}), 201)

		r := h.do(req{method: "POST", path: "/factory/lines/build-until-green/deploy", body: line, contentType: "application/toml", scope: ScopeWrite})
		expect(t, r, http.StatusCreated)
		d := r.json(t)
		if d["version_number"] != 2.0 || !strings.HasPrefix(d["id"].(string), "lv_") {
			t.Fatalf("deployment: %v", d)
		}
		params := d["input_params"].([]any)
		if len(params) != 1 || params[0].(map[string]any)["name"] != "who" || params[0].(map[string]any)["required"] != false {
			t.Fatalf("input_params: %v", params)
		}
		if lim := d["manifest"].(map[string]any)["limits"].(map[string]any); lim["budget_usd"] != "25.50" {
			t.Fatalf("budget_usd returned as %v, want \"25.50\"", lim["budget_usd"])
		}
		// identical → 200 same version; JSON body gives the same hash
		var lm map[string]any
		if _, err := toml.Decode(line, &lm); err != nil {
			t.Fatal(err)
		}
		r = h.do(req{method: "POST", path: "/factory/lines/build-until-green/deploy", body: map[string]any{"manifest": lm}, scope: ScopeWrite})
		expect(t, r, http.StatusOK)
		if r.json(t)["id"] != d["id"] {
			t.Fatalf("identical JSON redeploy gave another version: %s", r.Body)
		}

		r = h.do(req{method: "GET", path: "/factory/lines", scope: ScopeRead})
		expect(t, r, http.StatusOK)
		if l := r.list(t); len(l) != 1 || l[0]["name"] != "build-until-green" || l[0]["latest_version_number"] != 2.0 {
			t.Fatalf("lines: %v", l)
		}
		r = h.do(req{method: "GET", path: "/factory/lines/build-until-green", scope: ScopeRead})
		expect(t, r, http.StatusOK)
		if got := r.json(t); got["latest_deployment"].(map[string]any)["id"] != d["id"] || got["latest_version"].(map[string]any)["id"] != d["id"] {
			t.Fatalf("line: %v", got)
		}
		expectError(t, h.do(req{method: "GET", path: "/factory/lines/nope", scope: ScopeRead}), 404, CodeNotFound)
		m = expectError(t, h.do(req{method: "POST", path: "/factory/lines/other/deploy", body: line, contentType: "application/toml", scope: ScopeWrite}), 422, CodeValidation)
		if !strings.Contains(m["message"].(string), "line.name") {
			t.Fatalf("name mismatch: %v", m["message"])
		}
	})
}

func TestSchedules(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		expectError(t, h.do(req{method: "PUT", path: "/factory/lines/nightly/schedule", body: map[string]any{"cron": "0 3 * * *"}, scope: ScopeWrite}), 404, CodeNotFound)
		h.deployExampleJob("nightly-report")
		expect(t, h.do(req{method: "POST", path: "/factory/lines/nightly/deploy", body: readExample(t, "lines/nightly.toml"), contentType: "application/toml", scope: ScopeWrite}), 201)

		expectDetail(t, h.do(req{method: "PUT", path: "/factory/lines/nightly/schedule", body: map[string]any{"cron": "every day"}, scope: ScopeWrite}), "body", "cron")
		expectDetail(t, h.do(req{method: "PUT", path: "/factory/lines/nightly/schedule", body: map[string]any{}, scope: ScopeWrite}), "body", "cron")
		expectDetail(t, h.do(req{method: "PUT", path: "/factory/lines/nightly/schedule", body: map[string]any{"cron": "0 3 * * *", "timezone": "Nowhere/City"}, scope: ScopeWrite}), "body", "timezone")
		expectDetail(t, h.do(req{method: "PUT", path: "/factory/lines/nightly/schedule", body: map[string]any{"cron": 5}, scope: ScopeWrite}), "body", "cron")

		// The line's schedule trigger is its first schedule (generation 1).
		r := h.do(req{method: "GET", path: "/factory/lines/nightly/schedule", scope: ScopeRead})
		expect(t, r, http.StatusOK)
		if sc := r.json(t); sc["cron"] != "30 2 * * 1-5" || sc["schedule_generation"] != 1.0 {
			t.Fatalf("schedule from the trigger: %v", sc)
		}
		r = h.do(req{method: "PUT", path: "/factory/lines/nightly/schedule", body: map[string]any{"cron": "0 3 * * *"}, scope: ScopeWrite})
		expect(t, r, http.StatusOK)
		if sc := r.json(t); sc["timezone"] != "UTC" || sc["enabled"] != true || sc["schedule_generation"] != 2.0 {
			t.Fatalf("defaults: %v", sc)
		}
		r = h.do(req{method: "PUT", path: "/factory/lines/nightly/schedule", body: map[string]any{"cron": "0 4 * * *", "timezone": "Europe/Paris", "enabled": false, "inputs": map[string]any{"days": 1}}, scope: ScopeWrite})
		expect(t, r, http.StatusOK)
		if sc := r.json(t); sc["schedule_generation"] != 3.0 || sc["enabled"] != false {
			t.Fatalf("changed: %v", sc)
		}
		r = h.do(req{method: "GET", path: "/factory/lines/nightly/schedule", scope: ScopeRead})
		expect(t, r, http.StatusOK)
		if sc := r.json(t); sc["cron"] != "0 4 * * *" || sc["inputs"].(map[string]any)["days"] != 1.0 {
			t.Fatalf("get: %v", sc)
		}
		expect(t, h.do(req{method: "DELETE", path: "/factory/lines/nightly/schedule", scope: ScopeWrite}), 204)
		expectError(t, h.do(req{method: "GET", path: "/factory/lines/nightly/schedule", scope: ScopeRead}), 404, CodeNotFound)
	})
}

func TestKnowledge(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		body := map[string]any{"identifier": "review-guide", "type": "prompt", "level": "procedural", "format": "markdown", "body": "Be kind.",
			"links": []any{map[string]any{"link_type": "tag", "value": "review"}}}
		r := h.do(req{method: "POST", path: "/knowledge", body: body, scope: ScopeWrite})
		expect(t, r, http.StatusCreated)
		v1 := r.json(t)
		if v1["version_number"] != 1.0 || v1["byte_size"] != 8.0 || !strings.HasPrefix(v1["content_hash"].(string), "sha256:") || !strings.HasPrefix(v1["id"].(string), "kv_") {
			t.Fatalf("created: %v", v1)
		}
		expectError(t, h.do(req{method: "POST", path: "/knowledge", body: body, scope: ScopeWrite}), 409, CodeInvalidRequest)

		delete(body, "identifier")
		r = h.do(req{method: "POST", path: "/knowledge/review-guide/versions", body: body, scope: ScopeWrite})
		expect(t, r, http.StatusOK)
		if r.json(t)["id"] != v1["id"] {
			t.Fatalf("identical version: %s", r.Body)
		}
		body["body"] = "Be very kind."
		r = h.do(req{method: "POST", path: "/knowledge/review-guide/versions", body: body, scope: ScopeWrite})
		expect(t, r, http.StatusCreated)
		if r.json(t)["version_number"] != 2.0 {
			t.Fatalf("second version: %s", r.Body)
		}
		expectError(t, h.do(req{method: "POST", path: "/knowledge/nope/versions", body: body, scope: ScopeWrite}), 404, CodeNotFound)

		r = h.do(req{method: "GET", path: "/knowledge", scope: ScopeRead})
		if l := r.list(t); len(l) != 1 || l[0]["latest_version_number"] != 2.0 {
			t.Fatalf("list: %v", l)
		}
		r = h.do(req{method: "GET", path: "/knowledge/review-guide", scope: ScopeRead})
		expect(t, r, http.StatusOK)
		if item := r.json(t); item["latest_version"].(map[string]any)["body"] != "Be very kind." {
			t.Fatalf("item: %v", item)
		}
		r = h.do(req{method: "GET", path: "/knowledge/review-guide/versions/1", scope: ScopeRead})
		expect(t, r, http.StatusOK)
		if r.json(t)["body"] != "Be kind." {
			t.Fatalf("version 1: %s", r.Body)
		}
		expectDetail(t, h.do(req{method: "GET", path: "/knowledge/review-guide/versions/one", scope: ScopeRead}), "path", "version_number")
		expectError(t, h.do(req{method: "GET", path: "/knowledge/review-guide/versions/9", scope: ScopeRead}), 404, CodeNotFound)

		bad := []struct {
			name string
			body map[string]any
			loc  []any
		}{
			{"identifier uppercase", map[string]any{"identifier": "Bad_Id", "type": "prompt", "level": "prompt", "format": "text", "body": "x"}, []any{"body", "identifier"}},
			{"missing body", map[string]any{"identifier": "a", "type": "prompt", "level": "prompt", "format": "text"}, []any{"body", "body"}},
			{"bad type", map[string]any{"identifier": "a", "type": "poem", "level": "prompt", "format": "text", "body": "x"}, []any{"body", "type"}},
			{"wrong json type", map[string]any{"identifier": "a", "type": "prompt", "level": "prompt", "format": "text", "body": 5}, []any{"body", "body"}},
			{"unknown field", map[string]any{"identifier": "a", "type": "prompt", "level": "prompt", "format": "text", "body": "x", "colour": 1}, []any{"body", "colour"}},
			{"bad link", map[string]any{"identifier": "a", "type": "prompt", "level": "prompt", "format": "text", "body": "x", "links": []any{map[string]any{"link_type": "url", "value": "v"}}}, []any{"body", "links", 0.0, "link_type"}},
		}
		for _, tc := range bad {
			t.Run(tc.name, func(t *testing.T) {
				expectDetail(t, h.do(req{method: "POST", path: "/knowledge", body: tc.body, scope: ScopeWrite}), tc.loc...)
			})
		}
		expectDetail(t, h.do(req{method: "POST", path: "/knowledge", body: `{"identifier":`, scope: ScopeWrite}), "body")
		// Any run of lowercase letters, digits and hyphens is an identifier.
		for _, id := range []string{"a--b", "-lead", "trail-", "0"} {
			expect(t, h.do(req{method: "POST", path: "/knowledge", body: map[string]any{"identifier": id, "type": "prompt", "level": "prompt", "format": "text", "body": "x"}, scope: ScopeWrite}), http.StatusCreated)
		}
	})
}

func TestPagination(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		for _, name := range []string{"hello", "check", "agent-exec"} {
			h.deployExampleJob(name)
		}
		r := h.do(req{method: "GET", path: "/jobs?limit=2&offset=1", scope: ScopeRead})
		expect(t, r, http.StatusOK)
		if l := r.list(t); len(l) != 2 || l[0]["name"] != "check" || l[1]["name"] != "hello" {
			t.Fatalf("page: %v", l)
		}
		for _, q := range []string{"limit=0", "limit=201", "limit=abc", "limit=-1"} {
			expectDetail(t, h.do(req{method: "GET", path: "/jobs?" + q, scope: ScopeRead}), "query", "limit")
		}
		for _, q := range []string{"offset=-1", "offset=x"} {
			expectDetail(t, h.do(req{method: "GET", path: "/factory/lines?" + q, scope: ScopeRead}), "query", "offset")
		}
		expect(t, h.do(req{method: "GET", path: "/jobs?limit=200&offset=0", scope: ScopeRead}), 200)
	})
}

// TestAuthOnEveryRoute: every protected route answers 401 without a valid
// token and 403 to a token whose scope is too low.
func TestAuthOnEveryRoute(t *testing.T) {
	h := newHarness(t, storetestSQLite(t))
	for _, rt := range h.srv.Routes() {
		path := strings.NewReplacer(":name", "x", ":version_id", "jv_x", ":identifier", "x", ":version_number", "1", "*path", "hook", ":provider", "code_host").Replace(rt.Path)
		if rt.Scope == "" {
			r := h.do(req{method: rt.Method, path: path})
			if r.Status == 401 || r.Status == 403 {
				t.Errorf("public %s %s answered %d", rt.Method, path, r.Status)
			}
			continue
		}
		for _, scope := range []string{"", "bad"} {
			expectError(t, h.do(req{method: rt.Method, path: path, scope: scope}), 401, CodeAuthRequired)
		}
		for _, scope := range []string{ScopeRead, ScopeWrite} {
			if scopeRank[scope] < scopeRank[rt.Scope] {
				expectError(t, h.do(req{method: rt.Method, path: path, scope: scope}), 403, CodeAccessDenied)
			}
		}
	}
}

func TestErrorsAndOperations(t *testing.T) {
	h := newHarness(t, storetestSQLite(t))
	expectError(t, h.do(req{method: "GET", path: "/no/such/route", scope: ScopeRead}), 404, CodeNotFound)
	expectError(t, h.do(req{method: "PATCH", path: "/jobs", scope: ScopeRead}), 405, CodeInvalidRequest)
	big := strings.Repeat("x", 2<<20)
	expectError(t, h.do(req{method: "POST", path: "/knowledge", body: `{"body":"` + big + `"}`, scope: ScopeWrite}), 413, CodeInvalidRequest)

	// A panicking handler is a 500 error body, not a dropped connection.
	h.srv.engine.GET("/test-panic", func(c *gin.Context) { panic("boom") })
	m := expectError(t, h.do(req{method: "GET", path: "/test-panic"}), 500, CodeInternal)
	if strings.Contains(m["message"].(string), "boom") {
		t.Fatalf("internal details leaked: %v", m["message"])
	}
	// An incoming request id is kept.
	hr := req{method: "GET", path: "/healthz"}
	if r := h.do(hr); r.Status != 200 {
		t.Fatalf("healthz: %d", r.Status)
	}
	r := h.do(req{method: "GET", path: "/readyz"})
	expect(t, r, 200)
	r = h.do(req{method: "GET", path: "/metrics"})
	expect(t, r, 200)
	if !strings.Contains(string(r.Body), `linefactory_http_requests_total{method="GET",route="/healthz",status="200"} 1`) {
		t.Fatalf("metrics lack the healthz request count:\n%s", r.Body)
	}
	if !strings.Contains(string(r.Body), "linefactory_http_request_duration_seconds_bucket") {
		t.Fatal("metrics lack the latency histogram")
	}
}

func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	h := newHarness(t, storetestSQLite(t))
	r := h.do(req{method: "GET", path: "/openapi.json"})
	expect(t, r, 200)
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(r.Body, &doc); err != nil {
		t.Fatal(err)
	}
	for _, rt := range h.srv.Routes() {
		ops := doc.Paths[openAPIPath(rt.Path)]
		if _, ok := ops[strings.ToLower(rt.Method)]; !ok {
			t.Errorf("%s %s is not in /openapi.json", rt.Method, rt.Path)
		}
	}
}
