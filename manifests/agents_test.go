package manifests

import (
	"os"
	"strings"
	"testing"

	"github.com/linefactory/linefactory/manifests/agentconf"
)

const agentTestConfig = `
[harnesses.agent_a]
command = ["agent-a"]
default_model = "alpha-large"
efforts = ["low", "medium", "high"]
[[harnesses.agent_a.models]]
name = "alpha-large"
efforts = ["low", "medium", "high", "max"]
[[harnesses.agent_a.models]]
name = "alpha-small"

[harnesses.agent_b]
command = ["agent-b"]

[harnesses.custom]
`

func agentJob(t *testing.T, steps string) *JobManifest {
	t.Helper()
	doc := "[job]\nname = \"j\"\n[job.params.ticket]\ntype = \"string\"\n[[run.tasks]]\nname = \"t\"\n" + steps
	m, err := ParseJob([]byte(doc), FormatTOML)
	if err != nil {
		t.Fatal(err)
	}
	if ps := ValidateJob(m); ps != nil {
		t.Fatalf("invalid: %v", ps)
	}
	return m
}

func TestCheckAgentSteps(t *testing.T) {
	cfg, err := agentconf.Parse([]byte(agentTestConfig), "c.toml")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, step string
		cfg        *agentconf.Config
		want       string // "" = no problem
	}{
		{"configured", `run_agent = { mode = "session", harness = "agent_a" }`, cfg, ""},
		{"model and effort", `run_agent = { mode = "session", harness = "agent_a", model = "alpha-large", effort = "max" }`, cfg, ""},
		{"harness effort", `run_agent = { mode = "session", harness = "agent_a", model = "alpha-small", effort = "high" }`, cfg, ""},
		{"custom exec", `run_agent = { mode = "exec", harness = "custom", command = ["x"] }`, cfg, ""},
		{"any model without a model list", `run_agent = { mode = "session", harness = "agent_b", model = "whatever" }`, cfg, ""},
		{"effort not legal", `run_agent = { mode = "session", harness = "agent_a", model = "alpha-small", effort = "max" }`, cfg,
			`run.tasks[0].steps[1].run_agent.effort: "max" is not an effort of agent_a/alpha-small (low, medium, high)`},
		{"no efforts configured", `run_agent = { mode = "session", harness = "agent_b", model = "m", effort = "low" }`, cfg,
			`run.tasks[0].steps[1].run_agent.effort: "low" is not an effort of agent_b/m (none configured)`},
		{"model not listed", `run_agent = { mode = "session", harness = "agent_a", model = "beta" }`, cfg,
			`run.tasks[0].steps[1].run_agent.model: "beta" is not a model of agent_a (alpha-large, alpha-small)`},
		{"harness not configured", `run_agent = { mode = "session", harness = "agent_c" }`, cfg,
			`run.tasks[0].steps[1].run_agent.harness: harness "agent_c" is not configured on this server`},
		{"no config", `run_agent = { mode = "exec", harness = "custom", command = ["x"] }`, nil,
			`run.tasks[0].steps[1].run_agent.harness: harness "custom" is not configured on this server`},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			m := agentJob(t, "[[run.tasks.steps]]\nexec = [\"true\"]\n[[run.tasks.steps]]\n"+tc.step+"\n")
			ps := CheckAgentSteps(m, tc.cfg)
			switch {
			case tc.want == "" && len(ps) > 0:
				t.Errorf("got %v, want no problem", ps)
			case tc.want != "" && (len(ps) != 1 || !strings.HasPrefix(ps[0].String(), tc.want)):
				t.Errorf("got %v, want %q", ps, tc.want)
			}
		})
	}
}

func TestJobKnowledge(t *testing.T) {
	m := agentJob(t, `[[run.tasks.steps]]
run_agent = { mode = "session", harness = "agent_a", prompt = { type = "knowledge", slug = "p" }, resume_prompt = { type = "literal", value = "go on {{ticket}}" }, knowledge = [{ slug = "k1" }, { slug = "k2" }] }
[[run.tasks.steps]]
run_agent = { mode = "session", harness = "agent_a", resume_prompt = { type = "knowledge", slug = "r" } }
`)
	uses := JobKnowledge(m)
	var got []string
	for _, u := range uses {
		got = append(got, u.Path+"="+u.Slug)
	}
	want := "run.tasks[0].steps[0].run_agent.prompt.slug=p run.tasks[0].steps[0].run_agent.knowledge[0].slug=k1 " +
		"run.tasks[0].steps[0].run_agent.knowledge[1].slug=k2 run.tasks[0].steps[1].run_agent.resume_prompt.slug=r"
	if strings.Join(got, " ") != want {
		t.Errorf("got %s\nwant %s", strings.Join(got, " "), want)
	}
	ps := CheckKnowledge(uses, func(s string) bool { return s != "k2" })
	if len(ps) != 1 || ps[0].String() != `run.tasks[0].steps[0].run_agent.knowledge[1].slug: knowledge item "k2" does not exist: create it (POST /knowledge) before deploying` {
		t.Errorf("CheckKnowledge: %v", ps)
	}
	if text, ok := LiteralText(m.Run.Tasks[0].Steps[0].RunAgent.ResumePrompt); !ok || text != "go on {{ticket}}" {
		t.Errorf("LiteralText = %q %v", text, ok)
	}
	if _, ok := LiteralText(m.Run.Tasks[0].Steps[0].RunAgent.Prompt); ok {
		t.Error("LiteralText of a knowledge binding")
	}
}

func TestExampleAgentJobsFitExampleConfig(t *testing.T) {
	data, err := os.ReadFile("examples/factory.toml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := agentconf.Parse(data, "examples/factory.toml")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for name, m := range loadExampleJobs(t) {
		if len(JobKnowledge(m)) > 0 || strings.Contains(name, "agent") {
			n++
		}
		if ps := CheckAgentSteps(m, cfg); ps != nil {
			t.Errorf("%s: %v", name, ps)
		}
	}
	if n < 2 {
		t.Errorf("%d example agent jobs, want at least 2", n)
	}
}
