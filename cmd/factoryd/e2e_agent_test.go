package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/linefactory/linefactory/internal/testwait"
	"github.com/linefactory/linefactory/manifests/manifesttest"
)

// agentJob has an exec-mode step (custom harness) that waits for a gate
// file in its workspace (unless gate is "none"), then two session steps of one named session; its sandbox is ensured
// by name, so a later run resumes the session.
var agentJob = manifesttest.Job("agent-e2e")

var agentLine = manifesttest.Line("agents")

var agentFailJob = manifesttest.Job("agent-fail")

func TestEndToEndAgentSteps(t *testing.T) {
	script, err := os.ReadFile("testdata/fake-agent.sh")
	if err != nil {
		t.Fatal(err)
	}
	// The fake CLI is given inline: an isolated sandbox sees only system
	// directories, its workspace and its /tmp.
	inline := `"sh", "-c", '''` + string(script) + `''', "fake-agent"`
	dir := t.TempDir()
	cfg := filepath.Join(dir, "factory.toml")
	if err := os.WriteFile(cfg, []byte(`
[harnesses.agent_a]
command        = [`+inline+`, "--prompt-file={{prompt_file}}", "--model={{model}}", "--effort={{effort}}", "--mcp={{mcp_config}}"]
resume_command = [`+inline+`, "--resume={{session_id}}", "--prompt-file={{prompt_file}}", "--model={{model}}"]
default_model  = "fake-large"
[[harnesses.agent_a.models]]
name = "fake-large"
input_cents_per_mtok  = 100
output_cents_per_mtok = 1000
[harnesses.custom]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FACTORY_CONFIG", cfg)
	d := startDaemon(t, filepath.Join(dir, "data"), nil)
	workspace := func(box string) string { return filepath.Join(dir, "data", "sandboxes", "sandboxes", box, "workspace") }

	code, listing := d.call("GET", "/inference/models", "", nil)
	if code != 200 || len(listing["harnesses"].([]any)) != 2 {
		t.Fatalf("GET /inference/models: %d %v", code, listing)
	}
	knowledge := func(slug, body string) {
		t.Helper()
		path, payload := "/knowledge", map[string]any{"identifier": slug, "type": "prompt", "level": "prompt", "format": "markdown", "body": body}
		if code, _ := d.call("GET", "/knowledge/"+slug, "", nil); code == 200 {
			path = "/knowledge/" + slug + "/versions"
			delete(payload, "identifier")
		}
		data, _ := json.Marshal(payload)
		if code, m := d.call("POST", path, "application/json", data); code != 201 {
			t.Fatalf("knowledge %s: %d %v", slug, code, m)
		}
	}
	// Deploy refuses a job whose knowledge does not exist yet.
	if code, m := d.call("POST", "/jobs/agent-e2e/versions", "application/toml", []byte(agentJob)); code != 422 || !strings.Contains(fmt.Sprint(m["message"]), `knowledge item "guide" does not exist`) {
		t.Fatalf("deploy without knowledge: %d %v", code, m)
	}
	knowledge("guide", "GUIDE-V1")
	knowledge("resume", "Continue {{ticket}}")
	d.deploy("agent-e2e", agentJob)

	// Run 1: knowledge v2 is deployed while the run waits at its gate.
	id := d.start("agent-e2e", map[string]any{"ticket": "T-1", "gate": "gate1"})
	var m map[string]any
	if !testwait.UntilEvery(60*time.Second, 100*time.Millisecond, func() bool {
		_, m = d.call("GET", "/job-runs/"+id, "", nil)
		kv, _ := m["knowledge_versions"].([]any)
		return m["status"] == "running" && len(kv) == 2
	}) {
		t.Fatalf("run never started with its knowledge: %v", m)
	}
	knowledge("guide", "GUIDE-V2")
	// The run is running before its sandbox exists: open the gate once the
	// workspace is there.
	if !testwait.UntilEvery(60*time.Second, 100*time.Millisecond, func() bool {
		err = os.WriteFile(filepath.Join(workspace("agent-box"), "gate1"), nil, 0o644)
		return err == nil
	}) {
		t.Fatalf("open gate1: %v", err)
	}
	run := d.wait(id, 90*time.Second)
	if run["status"] != "succeeded" {
		t.Fatalf("run 1: %v", run)
	}
	kv := run["knowledge_versions"].([]any)[0].(map[string]any)
	if kv["slug"] != "guide" || kv["version_number"] != 1.0 || kv["version_id"] == "" || !strings.HasPrefix(fmt.Sprint(kv["content_hash"]), "sha256:") {
		t.Errorf("knowledge_versions %v", run["knowledge_versions"])
	}
	outputs := run["result_payload"].(map[string]any)["outputs"].(map[string]any)
	if outputs["note"] != "exec-T-1" {
		t.Errorf("exec-mode output %v", outputs["note"])
	}
	summary, resumed := fmt.Sprint(outputs["summary"]), fmt.Sprint(outputs["resumed"])
	for _, want := range []string{"prompt=Fix T-1;", "knowledge=GUIDE-V1;", "mcp=http://127.0.0.1:9/mcp", "resume=;", "model=fake-large;"} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary %q lacks %q", summary, want)
		}
	}
	firstSession := "sess-" + id + "-first"
	for _, want := range []string{"prompt=Continue T-1;", "resume=" + firstSession + ";"} {
		if !strings.Contains(resumed, want) {
			t.Errorf("resumed %q lacks %q", resumed, want)
		}
	}
	steps := map[string]map[string]any{}
	for _, e := range run["step_timeline"].([]any) {
		steps[e.(map[string]any)["name"].(string)] = e.(map[string]any)
	}
	if steps["first"]["agent_session_id"] != firstSession || steps["second"]["agent_session_id"] != firstSession {
		t.Errorf("session ids: first %v second %v", steps["first"]["agent_session_id"], steps["second"]["agent_session_id"])
	}
	if steps["first"]["inference_cost_cents"] != 200.0 || len(steps["first"]["usage"].([]any)) != 1 {
		t.Errorf("first step cost %v usage %v", steps["first"]["inference_cost_cents"], steps["first"]["usage"])
	}
	if steps["tool"]["inference_cost_cents"] != 0.0 || !strings.Contains(fmt.Sprint(steps["tool"]["error_details"]), "anything") {
		t.Errorf("unpriced exec step: %v", steps["tool"])
	}
	if run["inference_cost_cents"] != 400.0 || run["total_cost_cents"].(float64) != run["compute_cost_cents"].(float64)+400 {
		t.Errorf("run costs: inference %v compute %v total %v", run["inference_cost_cents"], run["compute_cost_cents"], run["total_cost_cents"])
	}
	if refs := run["artifact_refs"].([]any); len(refs) != 2 {
		t.Errorf("artifact_refs %v", refs)
	}

	// Run 2 ensures the same sandbox: its first step resumes run 1's session
	// and sees knowledge v2.
	run = d.wait(d.start("agent-e2e", map[string]any{"ticket": "T-2", "gate": "none"}), 90*time.Second)
	summary = fmt.Sprint(run["result_payload"].(map[string]any)["outputs"].(map[string]any)["summary"])
	if run["status"] != "succeeded" || !strings.Contains(summary, "resume="+firstSession+";") || !strings.Contains(summary, "knowledge=GUIDE-V2;") {
		t.Fatalf("run 2: %v", run)
	}

	// A line with an agent stage: costs and artifacts on the stage and the run.
	if code, m := d.call("POST", "/factory/lines/agents/deploy", "application/toml", []byte(agentLine)); code != 201 {
		t.Fatalf("deploy line: %d %v", code, m)
	}
	code, lr := d.call("POST", "/factory/lines/agents/runs", "application/json", []byte(`{"params":{"ticket":"T-3","gate":"none","box":"line-box"}}`))
	if code != 201 {
		t.Fatalf("start line: %d %v", code, lr)
	}
	lr = d.waitLine(lr["id"].(string), 120*time.Second)
	if lr["status"] != "succeeded" {
		t.Fatalf("line run: %v", lr)
	}
	stage := lr["stages"].([]any)[0].(map[string]any)
	if stage["inference_cost_cents"] != 400.0 || stage["artifact_count"] != 2.0 || lr["inference_cost_cents"] != 400.0 ||
		lr["artifact_count"] != 2.0 || len(lr["artifacts"].([]any)) != 2 || lr["total_cost_cents"].(float64) < 400 {
		t.Errorf("line costs and artifacts: stage %v run inference %v total %v artifacts %v", stage, lr["inference_cost_cents"], lr["total_cost_cents"], lr["artifacts"])
	}

	// A line whose stage fails in an agent step fails in the agent domain.
	d.deploy("agent-fail", agentFailJob)
	if code, m := d.call("POST", "/factory/lines/agent-fail/deploy", "application/toml", []byte(manifesttest.OneStageLine("agent-fail", manifesttest.Manual, "think", "agent-fail"))); code != 201 {
		t.Fatalf("deploy agent-fail line: %d %v", code, m)
	}
	_, lr = d.call("POST", "/factory/lines/agent-fail/runs", "application/json", []byte(`{"params":{"mode":"FAIL"}}`))
	lr = d.waitLine(lr["id"].(string), 90*time.Second)
	f, _ := lr["failure"].(map[string]any)
	if lr["status"] != "failed" || f["domain"] != "agent" || f["error_code"] != "AGENT_FAILED" || f["failure_class"] != "agent" {
		t.Errorf("failed agent line: status %v failure %v", lr["status"], f)
	}

	// Stopping a session step leaves no process behind.
	id = d.start("agent-fail", map[string]any{"mode": "SLEEP"})
	if !testwait.UntilEvery(60*time.Second, 100*time.Millisecond, func() bool { return len(processesWith("sleep 3127")) > 0 }) {
		t.Fatal("the session step never started its sleep")
	}
	if code, m := d.call("POST", "/jobs/agent-fail/runs/"+id+"/stop", "application/json", []byte(`{"reason":"enough"}`)); code != 202 {
		t.Fatalf("stop: %d %v", code, m)
	}
	if run = d.wait(id, 60*time.Second); run["status"] != "cancelled" {
		t.Errorf("stopped run: %v", run["status"])
	}
	if !testwait.UntilEvery(30*time.Second, 100*time.Millisecond, func() bool {
		return len(processesWith("sleep 3127"))+len(processesWith("fake-agent")) == 0
	}) {
		t.Fatalf("processes left after the stop: %v %v", processesWith("sleep 3127"), processesWith("fake-agent"))
	}
}
