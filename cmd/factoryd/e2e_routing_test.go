package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/activities/inferencetest"
	"github.com/linefactory/linefactory/internal/testwait"
	"github.com/linefactory/linefactory/manifests/inference"
	"github.com/linefactory/linefactory/manifests/manifesttest"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// triageE2ELine routes its triage stage with an agentic transition: fix
// (binding a param) or drop.
var triageE2ELine = manifesttest.Line("triage-greet")

// newFakeInference is the upstream the daemon's inference calls reach: the
// router's chat completions answer content; other models answer "hi";
// every answer carries usage 1M input and 0.5M output tokens.
func newFakeInference(content string) *inferencetest.Server {
	return &inferencetest.Server{Content: content, Model: "router-small", PromptTokens: 1_000_000, CompletionTokens: 500_000}
}

// startRoutingDaemon starts factoryd with the configuration file cfg.
func startRoutingDaemon(t *testing.T, cfg string, extraEnv ...string) *daemon {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "factory.toml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "FACTORYD_E2E_CHILD=1",
		"FACTORY_DATA_DIR="+dir,
		"FACTORY_BOOTSTRAP_TOKEN="+e2eToken,
		"FACTORY_CONFIG="+file,
		"E2E_INFERENCE_KEY=upstream-key",
		fmt.Sprintf("FACTORY_HTTP_ADDR=127.0.0.1:%d", freePort(t)),
		fmt.Sprintf("FACTORY_TEMPORAL_PORT=%d", freePort(t)),
		"FACTORY_TEMPORAL_UI_ADDR=off",
	)
	return startDaemon(t, dir, append(env, extraEnv...))
}

func (d *daemon) routingStart(line string) string {
	d.t.Helper()
	code, m := d.call("POST", "/factory/lines/"+line+"/runs", "application/json", []byte(`{}`))
	if code != 201 {
		d.t.Fatalf("start line %s: %d %v", line, code, m)
	}
	return m["id"].(string)
}

// waitStatus polls a line run until it has status.
func (d *daemon) routingWaitStatus(id, status string, limit time.Duration) map[string]any {
	d.t.Helper()
	var m map[string]any
	if !testwait.UntilEvery(limit, 100*time.Millisecond, func() bool {
		_, m = d.call("GET", "/factory/line-runs/"+id, "", nil)
		return m["status"] == status
	}) {
		d.t.Fatalf("line run %s is %v after %s, want %s: %v", id, m["status"], limit, status, m)
	}
	return m
}

func (d *daemon) routingControl(id string, body map[string]any) (int, map[string]any) {
	d.t.Helper()
	data, _ := json.Marshal(body)
	return d.call("POST", "/factory/line-runs/"+id+"/control", "application/json", data)
}

func routingDetailType(m map[string]any) string {
	detail, _ := m["detail"].([]any)
	if len(detail) == 0 {
		return ""
	}
	first, _ := detail[0].(map[string]any)
	typ, _ := first["type"].(string)
	return typ
}

// TestEndToEndRouterRoutes: the router picks the option (params bound,
// the option's stage runs), its tokens priced into the line run; and the
// inference gateway meters a running job run through its own token.
func TestEndToEndRouterRoutes(t *testing.T) {
	fake := newFakeInference(`{"option": "fix", "reason": "it can be fixed"}`)
	upstreamURL := fake.Start(t)
	d := startRoutingDaemon(t, fmt.Sprintf(`
[inference]
base_url = "%s/v1"
api_key_env = "E2E_INFERENCE_KEY"
[[inference.models]]
name = "router-small"
input_cents_per_mtok = 20
output_cents_per_mtok = 60
[[inference.models]]
name = "worker-large"
input_cents_per_mtok = 100
output_cents_per_mtok = 300
[router]
model = "router-small"
timeout = "10s"
`, upstreamURL))
	d.deploy("greet", greetJob)
	if code, m := d.call("POST", "/factory/lines/triage/deploy", "application/toml", []byte(triageE2ELine)); code != 201 {
		t.Fatalf("deploy line: %d %v", code, m)
	}
	id := d.routingStart("triage")
	lr := d.waitLine(id, 60*time.Second)
	if lr["status"] != "succeeded" {
		t.Fatalf("line run %v", lr)
	}
	tr := lr["transitions"].([]any)[0].(map[string]any)
	if tr["option"] != "fix" || tr["decided_by"] != "router" || tr["reason"] != "it can be fixed" || tr["decided_at"] == nil || tr["to"] != "fix" {
		t.Fatalf("taken transition %v", tr)
	}
	if g := lr["stage_outputs"].(map[string]any)["fix"].(map[string]any)["greeting"]; g != "hello-fixer" {
		t.Fatalf("fix greeting %v", g)
	}
	// 1M x 20 + 0.5M x 60 = 50 cents of routing.
	if c := lr["inference_cost_cents"].(float64); c != 50 {
		t.Fatalf("line run inference_cost_cents %v, want 50", c)
	}

	// The gateway, against a job run record of the daemon: a running job
	// run gets a token (as a svc_inference step would), its calls reach
	// the upstream with the upstream key, the usage is priced onto it, and
	// the token stops working when it ends.
	d.deploy("nap", manifesttest.Job("nap"))
	jr := d.start("nap", nil)
	if !testwait.UntilEvery(30*time.Second, 50*time.Millisecond, func() bool {
		_, m := d.call("GET", "/job-runs/"+jr, "", nil)
		return m["status"] == "running"
	}) {
		t.Fatal("the job run never ran")
	}
	st, err := store.Open(context.Background(), filepath.Join(routingEnv(d, "FACTORY_DATA_DIR"), "factory.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	acts := &activities.Activities{Inference: &inference.Config{BaseURL: upstreamURL + "/v1", GatewayURL: d.base + "/inference/v1"}, InferenceTokens: st}
	stepEnv, err := acts.InferenceStepEnv(context.Background(), jr, "think")
	if err != nil {
		t.Fatal(err)
	}
	gateway := func(token string) (int, string) {
		req, _ := http.NewRequest("POST", stepEnv[activities.EnvOpenAIBaseURL]+"/chat/completions",
			strings.NewReader(`{"model": "worker-large", "messages": [{"role": "user", "content": "hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := gateway(stepEnv[activities.EnvInferenceToken]); code != 200 || !strings.Contains(body, `"content":"hi"`) {
		t.Fatalf("gateway: %d %s", code, body)
	}
	auth, models := fake.Auth(), fake.Models()
	if auth[len(auth)-1] != "Bearer upstream-key" || models[len(models)-1] != "worker-large" {
		t.Fatalf("the upstream saw %v %v", auth, models)
	}
	for _, a := range auth {
		if strings.Contains(a, stepEnv[activities.EnvInferenceToken]) {
			t.Fatal("the run's token reached the upstream")
		}
	}
	done := d.wait(jr, 30*time.Second)
	// 1M x 100 + 0.5M x 300 = 250 cents.
	if done["inference_cost_cents"].(float64) != 250 || done["total_cost_cents"].(float64) != 250+done["compute_cost_cents"].(float64) {
		t.Fatalf("job run costs %v / %v / %v", done["inference_cost_cents"], done["compute_cost_cents"], done["total_cost_cents"])
	}
	if code, _ := gateway(stepEnv[activities.EnvInferenceToken]); code != 401 {
		t.Fatalf("the token of an ended run answered %d", code)
	}
}

func routingEnv(d *daemon, name string) string {
	for _, kv := range d.env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// TestEndToEndWaitAndSelect: without a router model the run waits (GET,
// list, the Temporal search attribute), a bad select is refused without
// touching the run's history, a select resumes it to the end; another run
// waits out its wait_timeout, a third is stopped while waiting.
func TestEndToEndWaitAndSelect(t *testing.T) {
	d := startRoutingDaemon(t, "[router]\nwait_timeout = \"15s\"\n")
	d.deploy("greet", greetJob)
	if code, m := d.call("POST", "/factory/lines/triage/deploy", "application/toml", []byte(triageE2ELine)); code != 201 {
		t.Fatalf("deploy line: %d %v", code, m)
	}
	answered, expiring, stopped := d.routingStart("triage"), d.routingStart("triage"), d.routingStart("triage")
	lr := d.routingWaitStatus(answered, "waiting", 60*time.Second)
	w, _ := lr["waiting"].(map[string]any)
	if w == nil || w["transition_id"] != "route" || len(w["options"].([]any)) != 2 || w["expires_at"] == nil {
		t.Fatalf("waiting %v", lr["waiting"])
	}
	found := false
	for _, r := range d.list("/factory/lines/triage/runs") {
		if r["id"] == answered {
			found = r["status"] == "waiting" && r["waiting"] != nil
		}
	}
	if !found {
		t.Fatal("the list does not show the run waiting")
	}
	c := temporalClient(t, d)
	ctx := context.Background()
	wfID := run.LineRunWorkflowID(answered)
	// Operators find waiting runs in the Web UI by the search attribute.
	var err error
	if !testwait.UntilEvery(20*time.Second, 200*time.Millisecond, func() bool {
		var resp *workflowservice.ListWorkflowExecutionsResponse
		resp, err = c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: `LinefactoryStatus = "waiting"`})
		return err == nil && routingHasWorkflow(resp, wfID)
	}) {
		t.Fatalf("no waiting run in the visibility store (err %v)", err)
	}
	events := func() int {
		n := 0
		it := c.GetWorkflowHistory(ctx, wfID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			if _, err := it.Next(); err != nil {
				t.Fatal(err)
			}
			n++
		}
		return n
	}
	before := events()
	for _, tc := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"action": "select", "transition_id": "route", "option": "escalate"}, "control_wait_unknown_selection"},
		{map[string]any{"action": "select", "transition_id": "other", "option": "fix"}, "control_target_invalid"},
		{map[string]any{"action": "select", "option": "fix"}, "control_missing_id"},
		{map[string]any{"action": "pick"}, "control_payload_invalid"},
	} {
		if code, m := d.routingControl(answered, tc.body); code != 422 || routingDetailType(m) != tc.want {
			t.Fatalf("%v: %d %v, want 422 %s", tc.body, code, m, tc.want)
		}
	}
	if after := events(); after != before {
		t.Fatalf("refused selects changed the history: %d events, then %d", before, after)
	}
	code, m := d.routingControl(answered, map[string]any{"action": "select", "transition_id": "route", "option": "fix", "reason": "looks fixable"})
	if code != 202 || m["status"] != "running" || m["waiting"] != nil {
		t.Fatalf("select: %d %v", code, m)
	}
	lr = d.waitLine(answered, 60*time.Second)
	tr := lr["transitions"].([]any)[0].(map[string]any)
	if lr["status"] != "succeeded" || tr["option"] != "fix" || tr["decided_by"] != "bootstrap" || tr["reason"] != "looks fixable" {
		t.Fatalf("answered run %v %v", lr["status"], tr)
	}
	if code, m := d.routingControl(answered, map[string]any{"action": "select", "transition_id": "route", "option": "fix"}); code != 422 || routingDetailType(m) != "control_target_invalid" {
		t.Fatalf("select of a finished run: %d %v", code, m)
	}

	// Stop while waiting.
	d.routingWaitStatus(stopped, "waiting", 60*time.Second)
	if code, m := d.call("POST", "/factory/line-runs/"+stopped+"/stop", "application/json", []byte(`{}`)); code != 202 {
		t.Fatalf("stop: %d %v", code, m)
	}
	lr = d.waitLine(stopped, 30*time.Second)
	if lr["status"] != "cancelled" || lr["failure"].(map[string]any)["code"] != "user_cancelled" || lr["waiting"] != nil {
		t.Fatalf("stopped run %v %v", lr["status"], lr["failure"])
	}

	// The wait expires.
	lr = d.waitLine(expiring, 60*time.Second)
	f := lr["failure"].(map[string]any)
	if lr["status"] != "failed" || f["code"] != "routing_wait_expired" || f["domain"] != "user" {
		t.Fatalf("expired run %v %v", lr["status"], f)
	}
	if code, m := d.routingControl(expiring, map[string]any{"action": "select", "transition_id": "route", "option": "fix"}); code != 422 || routingDetailType(m) != "control_wait_expired" {
		t.Fatalf("select after the wait expired: %d %v", code, m)
	}
}

func routingHasWorkflow(resp *workflowservice.ListWorkflowExecutionsResponse, id string) bool {
	for _, e := range resp.GetExecutions() {
		if e.GetExecution().GetWorkflowId() == id {
			return true
		}
	}
	return false
}

// gatewayAgentScript is the agent_a harness of the gateway test: it calls
// the gateway with the run's token and reports whether the upstream key is
// anywhere in its environment.
const gatewayAgentScript = `curl -sf -X POST "$OPENAI_BASE_URL/chat/completions" -H "Authorization: Bearer $OPENAI_API_KEY" -H 'Content-Type: application/json' -d '{"model": "worker-large", "messages": [{"role": "user", "content": "hi"}]}' > answer.json || exit 9; if env | grep -q upstream-key; then leaked=yes; else leaked=no; fi; printf '{"leaked": "%s", "token": "%s", "base": "%s"}' "$leaked" "$SVC_INFERENCE_TOKEN" "$SVC_INFERENCE_BASE_URL" > "$SVC_OUTPUT"`

// TestEndToEndGatewaySessionStep: an isolated session step with
// model_provider = "svc_inference" calls the gateway with its own token; the upstream sees
// the upstream key (the step never does), the job run's inference cost is
// the fake's usage x price, and the token is refused after the run ends.
func TestEndToEndGatewaySessionStep(t *testing.T) {
	// The step runs isolated (the default, bwrap), where it reaches nothing
	// of the host but the gateway, forwarded to its own loopback.
	requireIsolation(t)
	fake := newFakeInference("")
	upstreamURL := fake.Start(t)
	script, _ := json.Marshal(gatewayAgentScript)
	d := startRoutingDaemon(t, fmt.Sprintf(`
[harnesses.agent_a]
command = ["sh", "-c", %s]
[inference]
base_url = "%s/v1"
api_key_env = "E2E_INFERENCE_KEY"
[[inference.models]]
name = "worker-large"
input_cents_per_mtok = 100
output_cents_per_mtok = 300
`, script, upstreamURL))
	d.deploy("gw", manifesttest.Job("gateway-session"))
	jr := d.wait(d.start("gw", nil), 60*time.Second)
	if jr["status"] != "succeeded" {
		t.Fatalf("job run %v", jr)
	}
	out := jr["result_payload"].(map[string]any)["outputs"].(map[string]any)
	if out["leaked"] != "no" || !strings.HasPrefix(out["token"].(string), inference.TokenPrefix) || out["base"] != fmt.Sprintf("http://127.0.0.1:%d/inference/v1", activities.InferenceSandboxPort) {
		t.Fatalf("step outputs %v", out)
	}
	auth, models := fake.Auth(), fake.Models()
	if len(auth) != 1 || auth[0] != "Bearer upstream-key" || models[0] != "worker-large" {
		t.Fatalf("the upstream saw %v %v", auth, models)
	}
	// 1M x 100 + 0.5M x 300 = 250 cents.
	if c := jr["inference_cost_cents"].(float64); c != 250 || jr["total_cost_cents"].(float64) != 250+jr["compute_cost_cents"].(float64) {
		t.Fatalf("job run costs %v / %v / %v", jr["inference_cost_cents"], jr["compute_cost_cents"], jr["total_cost_cents"])
	}
	// The step's timeline entry shows the same measured usage and cost.
	if e := jr["step_timeline"].([]any)[0].(map[string]any); e["inference_cost_cents"] != 250.0 || len(e["usage"].([]any)) != 1 {
		t.Fatalf("step entry: cost %v usage %v", e["inference_cost_cents"], e["usage"])
	}
	req, _ := http.NewRequest("GET", d.base+"/inference/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+out["token"].(string))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("the token after the run ended answered %d", resp.StatusCode)
	}
}
