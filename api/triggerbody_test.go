package api

import (
	"net/http"
	"testing"
)

// A trigger payload is read as strictly as any request body (README: a JSON
// body must be an object; issue 16: "a body of null starts a run"): null, a
// list or a scalar is 422 for webhooks and provider events, and starts
// nothing (it started a run of every listening line); an empty body is {}.
func TestTriggerBodyMustBeAnObject(t *testing.T) {
	h := newHarness(t, storetestSQLite(t))
	runs := &fakeRuns{}
	h.srv.cfg.Runs = runs
	h.deployExampleJob("fanout-build")
	h.deployExampleJob("sandbox-lifecycle")
	expect(t, h.do(req{method: "POST", path: "/factory/lines/webhook-deploy/deploy", body: readExample(t, "lines/webhook-deploy.toml"), contentType: "application/toml", scope: ScopeWrite}), 201)
	for i, body := range []string{"null", "[1]", "5", `"x"`} {
		for _, path := range []string{"/factory/webhooks/deploy/main", "/factory/integrations/code_host/events"} {
			header := http.Header{"X-Delivery-Id": {"d-" + string(rune('a'+i))}, "X-Event-Name": {"push"}}
			expectDetail(t, h.do(req{method: "POST", path: path, body: body, header: header, scope: ScopeWrite}), "body")
		}
	}
	if len(runs.lines) != 0 {
		t.Fatalf("non-object payloads started %d line runs", len(runs.lines))
	}
	expect(t, h.do(req{method: "POST", path: "/factory/webhooks/deploy/main", body: "", header: http.Header{"X-Delivery-Id": {"d-empty"}}, scope: ScopeWrite}), http.StatusAccepted)
}
