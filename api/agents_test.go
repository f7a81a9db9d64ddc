package api

import (
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/agentconf"
	"github.com/linefactory/linefactory/store"
)

const testAgentConfig = `
[harnesses.agent_a]
command        = ["agent-a", "--prompt-file={{prompt_file}}", "--model={{model}}"]
resume_command = ["agent-a", "--resume={{session_id}}"]
default_model  = "alpha-large"
efforts        = ["low", "medium", "high"]
[[harnesses.agent_a.models]]
name = "alpha-large"
efforts = ["low", "medium", "high", "max"]
input_cents_per_mtok = 300
output_cents_per_mtok = 1500
[[harnesses.agent_a.models]]
name = "alpha-small"

[harnesses.custom]

[inference]
base_url = "http://127.0.0.1:9/v1"
[[inference.models]]
name = "router-small"
input_cents_per_mtok = 20

[router]
model = "router-small"
wait_timeout = "2h"
`

// exampleAgents is manifests/examples/factory.toml, the configuration every
// test server has.
func exampleAgents(t *testing.T) *agentconf.Config {
	t.Helper()
	ac, err := agentconf.Parse([]byte(readExample(t, "factory.toml")), "factory.toml")
	if err != nil {
		t.Fatal(err)
	}
	return ac
}

// newAgentHarness is newHarness on a server configured with cfg.
func newAgentHarness(t *testing.T, st *store.Store, cfg string) *harness {
	t.Helper()
	h := newHarness(t, st)
	ac, err := agentconf.Parse([]byte(cfg), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	h.srv = New(Config{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), MaxBodyBytes: 1 << 20, Agents: ac}, st)
	return h
}

func TestInferenceModels(t *testing.T) {
	st := storetestSQLite(t)
	h := newAgentHarness(t, st, testAgentConfig)
	r := h.do(req{method: "GET", path: "/inference/models", scope: ScopeRead})
	expect(t, r, http.StatusOK)
	got := r.json(t)
	hs := got["harnesses"].([]any)
	if len(hs) != 2 {
		t.Fatalf("harnesses %v", hs)
	}
	a := hs[0].(map[string]any)
	if a["harness"] != "agent_a" || a["default_model"] != "alpha-large" || len(a["efforts"].([]any)) != 3 {
		t.Errorf("agent_a: %v", a)
	}
	models := a["models"].([]any)
	large, small := models[0].(map[string]any), models[1].(map[string]any)
	if large["name"] != "alpha-large" || len(large["efforts"].([]any)) != 4 || large["input_cents_per_mtok"] != 300.0 || large["output_cents_per_mtok"] != 1500.0 {
		t.Errorf("alpha-large: %v", large)
	}
	if small["name"] != "alpha-small" || len(small["efforts"].([]any)) != 3 || small["input_cents_per_mtok"] != nil {
		t.Errorf("alpha-small (harness efforts, no price): %v", small)
	}
	if c := hs[1].(map[string]any); c["harness"] != "custom" || c["default_model"] != nil || len(c["models"].([]any)) != 0 {
		t.Errorf("custom: %v", c)
	}
	im := got["inference_models"].([]any)
	if len(im) != 1 || im[0].(map[string]any)["name"] != "router-small" || im[0].(map[string]any)["input_cents_per_mtok"] != 20.0 {
		t.Errorf("inference_models: %v", im)
	}
	router := got["router"].(map[string]any)
	if router["configured"] != true || router["model"] != "router-small" || router["wait_timeout"] != "2h" {
		t.Errorf("router: %v", router)
	}

	expectError(t, h.do(req{method: "GET", path: "/inference/models"}), http.StatusUnauthorized, CodeAuthRequired)

	// Without a configuration file nothing is configured.
	bare := *h
	bare.srv = New(Config{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), MaxBodyBytes: 1 << 20}, st)
	r = bare.do(req{method: "GET", path: "/inference/models", scope: ScopeRead})
	expect(t, r, http.StatusOK)
	got = r.json(t)
	if len(got["harnesses"].([]any)) != 0 || len(got["inference_models"].([]any)) != 0 {
		t.Errorf("no config: %v", got)
	}
	// The default wait applies without a [router]: the listing shows it.
	if router := got["router"].(map[string]any); router["configured"] != false || router["model"] != nil || router["wait_timeout"] != "24h" {
		t.Errorf("no config router: %v", router)
	}
	noWait, err := agentconf.Parse([]byte("[router]\n"), "router.toml")
	if err != nil {
		t.Fatal(err)
	}
	if r := ListInferenceModels(noWait).Router; !r.Configured || r.Model != nil || r.WaitTimeout == nil || *r.WaitTimeout != "24h" {
		t.Errorf("[router] without wait_timeout: %+v", r)
	}
}

func TestCompactDuration(t *testing.T) {
	for in, want := range map[string]string{"24h": "24h", "2h30m": "2h30m", "60s": "1m", "90s": "1m30s", "1500ms": "1.5s", "1h0m1s": "1h0m1s"} {
		d, _ := time.ParseDuration(in)
		if got := compactDuration(d); got != want {
			t.Errorf("compactDuration(%s) = %s, want %s", in, got, want)
		}
	}
}

// createExampleKnowledge creates every knowledge item the example jobs and
// lines bind, so they deploy.
func (h *harness) createExampleKnowledge() {
	h.t.Helper()
	slugs := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join("..", "manifests", "examples", "*", "*"))
	more, _ := filepath.Glob(filepath.Join("..", "manifests", "examples", "jobs", "*", "job.*"))
	for _, f := range append(files, more...) {
		format, ok := manifests.FormatFromPath(f)
		data, err := os.ReadFile(f)
		if !ok || err != nil {
			continue
		}
		var uses []manifests.KnowledgeUse
		if m, err := manifests.ParseJob(data, format); err == nil && len(m.Run.Tasks) > 0 {
			uses = manifests.JobKnowledge(m)
		} else if l, err := manifests.ParseLine(data, format); err == nil {
			uses = manifests.LineKnowledge(l)
		}
		for _, u := range uses {
			slugs[u.Slug] = true
		}
	}
	for slug := range slugs {
		r := h.do(req{method: "POST", path: "/knowledge", body: map[string]any{"identifier": slug, "type": "prompt", "level": "prompt", "format": "markdown", "body": "# " + slug}, scope: ScopeWrite})
		if r.Status != http.StatusCreated {
			h.t.Fatalf("create knowledge %s: %d %s", slug, r.Status, r.Body)
		}
	}
}

func TestDeployChecksAgents(t *testing.T) {
	h := newAgentHarness(t, storetestSQLite(t), testAgentConfig)
	deploy := func(step string) response {
		doc := "[job]\nname = \"a\"\n[[run.tasks]]\nname = \"t\"\n[[run.tasks.steps]]\nexec = [\"true\"]\n[[run.tasks.steps]]\n" + step + "\n"
		return h.do(req{method: "POST", path: "/jobs/a/versions", body: doc, contentType: "application/toml", scope: ScopeWrite})
	}
	for _, tc := range []struct{ step, want string }{
		{`run_agent = { mode = "session", harness = "agent_a", model = "alpha-small", effort = "max" }`,
			`run.tasks[0].steps[1].run_agent.effort: "max" is not an effort of agent_a/alpha-small (low, medium, high)`},
		{`run_agent = { mode = "session", harness = "agent_a", model = "gamma" }`, `run.tasks[0].steps[1].run_agent.model: "gamma" is not a model of agent_a (alpha-large, alpha-small)`},
		{`run_agent = { mode = "session", harness = "agent_b" }`, `run.tasks[0].steps[1].run_agent.harness: harness "agent_b" is not configured on this server`},
		{`run_agent = { mode = "session", harness = "agent_a", knowledge = [{ slug = "guide" }] }`, `run.tasks[0].steps[1].run_agent.knowledge[0].slug: knowledge item "guide" does not exist`},
		{`run_agent = { mode = "session", harness = "agent_a", prompt = { type = "knowledge", slug = "p" } }`, `run.tasks[0].steps[1].run_agent.prompt.slug: knowledge item "p" does not exist`},
		{`run_agent = { mode = "session", harness = "agent_a", mcp = [{ key = "k", url = "file:///etc/passwd" }] }`, `run.tasks[0].steps[1].run_agent.mcp[0].url: "file:///etc/passwd" is not an http(s) URL`},
		{`run_agent = { mode = "session", harness = "agent_a", prompt = { type = "literal", value = "hi {{who}}" } }`, `run.tasks[0].steps[1].run_agent.prompt.value: unknown placeholder {{who}}`},
	} {
		r := expectError(t, deploy(tc.step), http.StatusUnprocessableEntity, CodeValidation)
		if msg, _ := r["message"].(string); !strings.Contains(msg, tc.want) {
			t.Errorf("message %q lacks %q", msg, tc.want)
		}
	}
	expect(t, h.do(req{method: "POST", path: "/knowledge", body: map[string]any{"identifier": "guide", "type": "prompt", "level": "prompt", "format": "markdown", "body": "g"}, scope: ScopeWrite}), http.StatusCreated)
	expect(t, deploy(`run_agent = { mode = "session", harness = "agent_a", model = "alpha-large", effort = "max", knowledge = [{ slug = "guide" }] }`), http.StatusCreated)

	// A line's knowledge must exist too.
	line := `{"line":{"name":"l"},"agent":{"instructions":{"type":"knowledge","slug":"rules"}},"trigger":{"type":"manual"},"stages":[{"id":"s","job":"a"}]}`
	r := expectError(t, h.do(req{method: "POST", path: "/factory/lines/l/deploy", body: `{"manifest": ` + line + `}`, scope: ScopeWrite}), http.StatusUnprocessableEntity, CodeValidation)
	if msg, _ := r["message"].(string); !strings.Contains(msg, `agent.instructions.slug: knowledge item "rules" does not exist`) {
		t.Errorf("line message %q", msg)
	}
	// A stage job checked against a configuration that changed since.
	bare := *h
	bare.srv = New(Config{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), MaxBodyBytes: 1 << 20}, h.srv.store)
	r = expectError(t, bare.do(req{method: "POST", path: "/factory/lines/m/deploy", body: `{"manifest": {"line":{"name":"m"},"trigger":{"type":"manual"},"stages":[{"id":"s","job":"a"}]}}`, scope: ScopeWrite}), http.StatusUnprocessableEntity, CodeValidation)
	if msg, _ := r["message"].(string); !strings.Contains(msg, `stages[0].job: job a: run.tasks[0].steps[1].run_agent.harness: harness "agent_a" is not configured`) {
		t.Errorf("stage job message %q", msg)
	}
}
