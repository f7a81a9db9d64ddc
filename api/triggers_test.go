package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestWebhookTrigger(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		runs := &fakeRuns{}
		h.srv.cfg.Runs = runs
		h.deployExampleJob("fanout-build")
		h.deployExampleJob("sandbox-lifecycle")
		expect(t, h.do(req{method: "POST", path: "/factory/lines/webhook-deploy/deploy", body: readExample(t, "lines/webhook-deploy.toml"), contentType: "application/toml", scope: ScopeWrite}), 201)

		send := func(path, delivery, body string) response {
			hr := httptest.NewRequest("POST", path, strings.NewReader(body))
			hr.Header.Set("Authorization", "Bearer "+h.tokens[ScopeWrite])
			hr.Header.Set("Content-Type", "application/json")
			hr.Header.Set("X-Event-Name", "push")
			if delivery != "" {
				hr.Header.Set("X-Delivery-Id", delivery)
			}
			rec := httptest.NewRecorder()
			h.srv.ServeHTTP(rec, hr)
			r := response{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
			h.validate(hr, r)
			return r
		}
		r := send("/factory/webhooks/deploy/main", "d-1", `{"ref":"main"}`)
		expect(t, r, http.StatusAccepted)
		list := r.list(t)
		if len(list) != 1 {
			t.Fatalf("started %v", list)
		}
		trig := list[0]["trigger"].(map[string]any)
		if trig["source"] != "webhook" || trig["delivery_id"] != "d-1" || trig["event_name"] != "push" || trig["payload"].(map[string]any)["body"] != nil {
			t.Fatalf("trigger summary in a list: %v", trig)
		}
		if len(runs.lines) != 1 || runs.lines[0].Trigger["body"].(map[string]any)["ref"] != "main" {
			t.Fatalf("engine got trigger %v", runs.lines)
		}
		// The single-run view carries the raw body.
		r = h.do(req{method: "GET", path: "/factory/line-runs/" + list[0]["id"].(string), scope: ScopeRead})
		if r.json(t)["trigger"].(map[string]any)["payload"].(map[string]any)["body"].(map[string]any)["ref"] != "main" {
			t.Fatalf("single run trigger: %s", r.Body)
		}
		// A repeated delivery starts nothing and answers with the earlier runs.
		r = send("/factory/webhooks/deploy/main", "d-1", `{"ref":"main"}`)
		expect(t, r, http.StatusOK)
		if l := r.list(t); len(l) != 1 || l[0]["id"] != list[0]["id"] || len(runs.lines) != 1 {
			t.Fatalf("repeated delivery: %v (engine runs %d)", l, len(runs.lines))
		}
		expectError(t, send("/factory/webhooks/nobody/listens", "", `{}`), 404, CodeNotFound)
		expectDetail(t, send("/factory/webhooks/deploy/main", strings.Repeat("d", 256), `{}`), "header", "X-Delivery-Id")
		expectDetail(t, send("/factory/webhooks/deploy/main", "", `{not json`), "body")
	})
}

func TestIntegrationTrigger(t *testing.T) {
	h := newHarness(t, storetestSQLite(t))
	runs := &fakeRuns{}
	h.srv.cfg.Runs = runs
	h.deployExampleJob("hello")
	expect(t, h.do(req{method: "POST", path: "/factory/lines/code-review/deploy", body: `{"manifest":` + readExample(t, "lines/code-review.json") + `}`, scope: ScopeWrite}), 201)

	send := func(provider, body, signature string) response {
		hr := httptest.NewRequest("POST", "/factory/integrations/"+provider+"/events", strings.NewReader(body))
		hr.Header.Set("Authorization", "Bearer "+h.tokens[ScopeWrite])
		hr.Header.Set("X-Event-Name", "pull_request.opened")
		if signature != "" {
			hr.Header.Set("X-Signature-256", signature)
		}
		rec := httptest.NewRecorder()
		h.srv.ServeHTTP(rec, hr)
		r := response{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
		h.validate(hr, r)
		return r
	}
	event := `{"repository":{"full_name":"acme/api"},"sender":{"login":"bob"}}`
	r := send("code_host", event, "")
	expect(t, r, http.StatusAccepted)
	run := r.list(t)[0]
	if run["run_params"].(map[string]any)["who"] != "bob" || run["trigger"].(map[string]any)["provider"] != "code_host" {
		t.Fatalf("run %v", run)
	}
	// Params the event yields that do not fit the line fail that run, and
	// the engine starts nothing for it.
	started := len(runs.lines)
	r = send("code_host", `{"repository":{"full_name":"acme/api"},"sender":{"login":42}}`, "")
	expect(t, r, http.StatusAccepted)
	bad := r.list(t)[0]
	if f, _ := bad["failure"].(map[string]any); bad["status"] != "failed" || f == nil || f["code"] != "stage_params_invalid" || f["domain"] != "config" {
		t.Fatalf("run with a param that does not fit: %v", bad)
	}
	if len(runs.lines) != started {
		t.Fatalf("the engine started a run whose params do not fit")
	}
	// The selector keeps other repositories out; unknown providers are 404.
	expectError(t, send("code_host", `{"repository":{"full_name":"acme/other"}}`, ""), 404, CodeNotFound)
	expectError(t, send("mail", event, ""), 404, CodeNotFound)

	// With a signing secret, the signature is required and checked.
	h.srv.cfg.IntegrationSecrets = map[string]string{"code_host": "s3cret"}
	expectError(t, send("code_host", event, ""), 401, CodeAuthRequired)
	expectError(t, send("code_host", event, "sha256=00"), 401, CodeAuthRequired)
	mac := hmac.New(sha256.New, []byte("s3cret"))
	mac.Write([]byte(event))
	expect(t, send("code_host", event, "sha256="+hex.EncodeToString(mac.Sum(nil))), http.StatusAccepted)
}
