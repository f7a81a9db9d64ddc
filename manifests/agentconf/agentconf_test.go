package agentconf

import (
	"strings"
	"testing"
	"time"
)

const full = `
[harnesses.agent_a]
command        = ["agent-a", "run", "--prompt-file={{prompt_file}}", "--model={{model}}", "--effort={{effort}}", "--mcp={{mcp_config}}", "--schema={{output_schema}}", "--cwd={{workdir}}"]
resume_command = ["agent-a", "resume", "--session={{session_id}}", "--prompt-file={{prompt_file}}"]
default_model  = "alpha-large"
efforts        = ["low", "medium", "high"]
env            = { AGENT_A_TELEMETRY = "off" }

[[harnesses.agent_a.models]]
name    = "alpha-large"
efforts = ["low", "medium", "high", "max"]
input_cents_per_mtok  = 300
output_cents_per_mtok = 1500

[[harnesses.agent_a.models]]
name = "alpha-small"
input_cents_per_mtok = 0.5

[[harnesses.agent_a.models]]
name = "alpha-free"

[harnesses.custom]
env = { X = "1" }

[inference]
base_url    = "http://127.0.0.1:8000/v1/"
api_key_env = "INFERENCE_API_KEY"
[[inference.models]]
name = "router-small"
input_cents_per_mtok  = 20
output_cents_per_mtok = 60

[router]
model        = "router-small"
timeout      = "30s"
wait_timeout = "2h"
`

func TestParseFull(t *testing.T) {
	c, err := Parse([]byte(full), "f.toml")
	if err != nil {
		t.Fatal(err)
	}
	a, ok := c.Harness("agent_a")
	if !ok {
		t.Fatal("agent_a missing")
	}
	if a.Name != "agent_a" || a.Command[0] != "agent-a" || len(a.Command) != 8 || a.ResumeCommand[1] != "resume" {
		t.Errorf("commands: %+v", a)
	}
	if a.DefaultModel != "alpha-large" || strings.Join(a.Efforts, ",") != "low,medium,high" || a.Env["AGENT_A_TELEMETRY"] != "off" {
		t.Errorf("harness fields: %+v", a)
	}
	if len(a.Models) != 3 || *a.Models[0].InputCentsPerMTok != 300 || *a.Models[0].OutputCentsPerMTok != 1500 {
		t.Errorf("models: %+v", a.Models)
	}
	if got := strings.Join(a.EffortsOf("alpha-large"), ","); got != "low,medium,high,max" {
		t.Errorf("EffortsOf(alpha-large) = %s", got)
	}
	if got := strings.Join(a.EffortsOf("alpha-small"), ","); got != "low,medium,high" {
		t.Errorf("EffortsOf(alpha-small) = %s", got)
	}
	if m, _ := a.Model("alpha-small"); m.OutputCentsPerMTok != nil || *m.InputCentsPerMTok != 0.5 {
		t.Errorf("alpha-small prices: %+v", m)
	}
	if m, _ := a.Model("alpha-free"); m.Priced() {
		t.Errorf("alpha-free priced")
	}
	cu, ok := c.Harness("custom")
	if !ok || cu.Command != nil || cu.Env["X"] != "1" {
		t.Errorf("custom: %+v %v", cu, ok)
	}
	if c.Inference == nil || c.Inference.BaseURL != "http://127.0.0.1:8000/v1" || c.Inference.APIKeyEnv != "INFERENCE_API_KEY" {
		t.Errorf("inference: %+v", c.Inference)
	}
	if m, ok := c.InferenceModel("router-small"); !ok || *m.OutputCentsPerMTok != 60 {
		t.Errorf("InferenceModel: %+v %v", m, ok)
	}
	if _, ok := c.InferenceModel("nope"); ok {
		t.Error("InferenceModel(nope) found")
	}
	if c.Router == nil || c.Router.Model != "router-small" || c.Router.Timeout != 30*time.Second || c.Router.WaitTimeout != 2*time.Hour {
		t.Errorf("router: %+v", c.Router)
	}
	hs := c.SortedHarnesses()
	if len(hs) != 2 || hs[0].Name != "agent_a" || hs[1].Name != "custom" {
		t.Errorf("SortedHarnesses: %+v", hs)
	}
}

func TestParseEmptyAndDefaults(t *testing.T) {
	c, err := Parse(nil, "empty.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Harnesses) != 0 || c.Inference != nil || c.Router != nil {
		t.Errorf("empty config: %+v", c)
	}
	var nilc *Config
	if _, ok := nilc.Harness("agent_a"); ok {
		t.Error("nil config has a harness")
	}
	if _, ok := nilc.InferenceModel("x"); ok {
		t.Error("nil config has an inference model")
	}
	if nilc.SortedHarnesses() != nil {
		t.Error("nil config lists harnesses")
	}
	c, err = Parse([]byte("[router]\n"), "r.toml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Router.Model != "" || c.Router.Timeout != DefaultRouterTimeout || c.Router.WaitTimeout != DefaultRouterWaitTimeout {
		t.Errorf("router defaults: %+v", c.Router)
	}
	c, err = Parse([]byte("[inference]\nbase_url = \"https://x.example/v1\"\n[router]\nmodel = \"any\"\n"), "r.toml")
	if err != nil {
		t.Fatalf("router model with an inference listing no models: %v", err)
	}
	if c.Router.Model != "any" {
		t.Errorf("router model %q", c.Router.Model)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, doc, want string
	}{
		{"bad toml", "[harnesses", "c.toml: invalid TOML at line 1"},
		{"unknown top key", "foo = 1", "c.toml: foo: unknown key"},
		{"harnesses not table", "harnesses = 1", "c.toml: harnesses: expected a table, got an integer"},
		{"unknown harness", "[harnesses.agent_z]\ncommand=[\"x\"]", "c.toml: harnesses.agent_z: unknown key (expected one of agent_a, agent_b, agent_c, agent_d, custom)"},
		{"harness not table", "[harnesses]\nagent_a = 3", "c.toml: harnesses.agent_a: expected a table, got an integer"},
		{"unknown harness key", "[harnesses.agent_a]\ncommand=[\"x\"]\nfoo=1", "c.toml: harnesses.agent_a.foo: unknown key"},
		{"command missing", "[harnesses.agent_b]\nefforts=[\"low\"]", "c.toml: harnesses.agent_b.command: required"},
		{"command type", "[harnesses.agent_a]\ncommand=\"x\"", "c.toml: harnesses.agent_a.command: expected an array of strings, got a string"},
		{"command element type", "[harnesses.agent_a]\ncommand=[\"x\", 1]", "c.toml: harnesses.agent_a.command[1]: expected a string, got an integer"},
		{"command empty", "[harnesses.agent_a]\ncommand=[]", "c.toml: harnesses.agent_a.command: must start with the program to run"},
		{"command blank program", "[harnesses.agent_a]\ncommand=[\" \"]", "c.toml: harnesses.agent_a.command: must start with the program to run"},
		{"unknown placeholder", "[harnesses.agent_a]\ncommand=[\"x\", \"--p={{prompt}}\"]", "c.toml: harnesses.agent_a.command[1]: unknown placeholder {{prompt}}"},
		{"placeholder program", "[harnesses.agent_a]\ncommand=[\"{{workdir}}\"]", "c.toml: harnesses.agent_a.command[0]: the program may not be a placeholder"},
		{"resume placeholder", "[harnesses.agent_a]\ncommand=[\"x\"]\nresume_command=[\"x\", \"{{sesion_id}}\"]", "c.toml: harnesses.agent_a.resume_command[1]: unknown placeholder {{sesion_id}}"},
		{"custom command", "[harnesses.custom]\ncommand=[\"x\"]", "c.toml: harnesses.custom.command: not allowed for custom"},
		{"custom resume", "[harnesses.custom]\nresume_command=[\"x\"]", "c.toml: harnesses.custom.resume_command: not allowed for custom"},
		{"default model type", "[harnesses.agent_a]\ncommand=[\"x\"]\ndefault_model=1", "c.toml: harnesses.agent_a.default_model: expected a string, got an integer"},
		{"default model empty", "[harnesses.agent_a]\ncommand=[\"x\"]\ndefault_model=\"\"", "c.toml: harnesses.agent_a.default_model: must not be empty"},
		{"default model unlisted", "[harnesses.agent_a]\ncommand=[\"x\"]\ndefault_model=\"b\"\n[[harnesses.agent_a.models]]\nname=\"a\"", "c.toml: harnesses.agent_a.default_model: \"b\" is not one of the harness's models (a)"},
		{"efforts type", "[harnesses.agent_a]\ncommand=[\"x\"]\nefforts=\"low\"", "c.toml: harnesses.agent_a.efforts: expected an array of strings"},
		{"effort bad", "[harnesses.agent_a]\ncommand=[\"x\"]\nefforts=[\"lo w\"]", "c.toml: harnesses.agent_a.efforts[0]: \"lo w\" is not a valid effort name"},
		{"effort dup", "[harnesses.agent_a]\ncommand=[\"x\"]\nefforts=[\"low\",\"low\"]", "c.toml: harnesses.agent_a.efforts[1]: duplicate effort \"low\""},
		{"env type", "[harnesses.agent_a]\ncommand=[\"x\"]\nenv=[\"A\"]", "c.toml: harnesses.agent_a.env: expected a table, got an array"},
		{"env value type", "[harnesses.agent_a]\ncommand=[\"x\"]\nenv={A=1}", "c.toml: harnesses.agent_a.env.A: expected a string, got an integer"},
		{"env name", "[harnesses.agent_a]\ncommand=[\"x\"]\nenv={\"1A\"=\"x\"}", "c.toml: harnesses.agent_a.env.1A: not a valid environment variable name"},
		{"env svc", "[harnesses.agent_a]\ncommand=[\"x\"]\nenv={SVC_MODEL=\"x\"}", "c.toml: harnesses.agent_a.env.SVC_MODEL: SVC_ variables are set by the service"},
		{"models type", "[harnesses.agent_a]\ncommand=[\"x\"]\nmodels=1", "c.toml: harnesses.agent_a.models: expected an array of tables, got an integer"},
		{"models element type", "[harnesses.agent_a]\ncommand=[\"x\"]\nmodels=[1]", "c.toml: harnesses.agent_a.models[0]: expected a table, got an integer"},
		{"model name missing", "[harnesses.agent_a]\ncommand=[\"x\"]\n[[harnesses.agent_a.models]]\nefforts=[\"a\"]", "c.toml: harnesses.agent_a.models[0].name: required"},
		{"model name type", "[harnesses.agent_a]\ncommand=[\"x\"]\n[[harnesses.agent_a.models]]\nname=2", "c.toml: harnesses.agent_a.models[0].name: expected a string, got an integer"},
		{"model name bad", "[harnesses.agent_a]\ncommand=[\"x\"]\n[[harnesses.agent_a.models]]\nname=\"a b\"", "c.toml: harnesses.agent_a.models[0].name: \"a b\" is not a valid model name"},
		{"model dup", "[harnesses.agent_a]\ncommand=[\"x\"]\n[[harnesses.agent_a.models]]\nname=\"a\"\n[[harnesses.agent_a.models]]\nname=\"a\"", "c.toml: harnesses.agent_a.models[1].name: duplicate model \"a\""},
		{"model unknown key", "[harnesses.agent_a]\ncommand=[\"x\"]\n[[harnesses.agent_a.models]]\nname=\"a\"\nprice=1", "c.toml: harnesses.agent_a.models[0].price: unknown key"},
		{"model effort dup", "[harnesses.agent_a]\ncommand=[\"x\"]\n[[harnesses.agent_a.models]]\nname=\"a\"\nefforts=[\"x\",\"x\"]", "c.toml: harnesses.agent_a.models[0].efforts[1]: duplicate effort \"x\""},
		{"price type", "[harnesses.agent_a]\ncommand=[\"x\"]\n[[harnesses.agent_a.models]]\nname=\"a\"\ninput_cents_per_mtok=\"3\"", "c.toml: harnesses.agent_a.models[0].input_cents_per_mtok: expected a number, got a string"},
		{"price negative", "[harnesses.agent_a]\ncommand=[\"x\"]\n[[harnesses.agent_a.models]]\nname=\"a\"\noutput_cents_per_mtok=-1", "c.toml: harnesses.agent_a.models[0].output_cents_per_mtok: must be a finite number >= 0"},
		{"price inf", "[harnesses.agent_a]\ncommand=[\"x\"]\n[[harnesses.agent_a.models]]\nname=\"a\"\noutput_cents_per_mtok=inf", "c.toml: harnesses.agent_a.models[0].output_cents_per_mtok: must be a finite number >= 0"},
		{"inference not table", "inference = \"x\"", "c.toml: inference: expected a table, got a string"},
		{"inference unknown", "[inference]\nbase_url=\"http://a\"\nkey=\"k\"", "c.toml: inference.key: unknown key"},
		{"inference base missing", "[inference]\n", "c.toml: inference.base_url: required"},
		{"inference base type", "[inference]\nbase_url=1", "c.toml: inference.base_url: expected a string, got an integer"},
		{"inference base scheme", "[inference]\nbase_url=\"ftp://x\"", "c.toml: inference.base_url: \"ftp://x\" is not an http(s) URL"},
		{"inference key env", "[inference]\nbase_url=\"http://x\"\napi_key_env=\"sk-123\"", "c.toml: inference.api_key_env: \"sk-123\" is not an environment variable name"},
		{"inference key env type", "[inference]\nbase_url=\"http://x\"\napi_key_env=1", "c.toml: inference.api_key_env: expected a string, got an integer"},
		{"inference model efforts", "[inference]\nbase_url=\"http://x\"\n[[inference.models]]\nname=\"a\"\nefforts=[\"x\"]", "c.toml: inference.models[0].efforts: unknown key"},
		{"router not table", "router = 1", "c.toml: router: expected a table, got an integer"},
		{"router unknown", "[router]\nmodl=\"x\"", "c.toml: router.modl: unknown key"},
		{"router model type", "[router]\nmodel=1", "c.toml: router.model: expected a string, got an integer"},
		{"router model empty", "[router]\nmodel=\"\"", "c.toml: router.model: must not be empty"},
		{"router model no inference", "[router]\nmodel=\"m\"", "c.toml: router.model: \"m\" needs an [inference] section"},
		{"router model unlisted", "[inference]\nbase_url=\"http://x\"\n[[inference.models]]\nname=\"a\"\n[router]\nmodel=\"m\"", "c.toml: router.model: \"m\" is not one of the inference models (a)"},
		{"router timeout", "[router]\ntimeout=\"soon\"", "c.toml: router.timeout: \"soon\" is not a positive duration"},
		{"router timeout type", "[router]\ntimeout=60", "c.toml: router.timeout: expected a string, got an integer"},
		{"router wait negative", "[router]\nwait_timeout=\"-1h\"", "c.toml: router.wait_timeout: \"-1h\" is not a positive duration"},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			_, err := Parse([]byte(tc.doc), "c.toml")
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %q, want it to contain %q", err.Error(), tc.want)
			}
		})
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	_, err := Parse([]byte("foo=1\n[router]\ntimeout=\"x\"\nwait_timeout=\"y\""), "c.toml")
	e, ok := err.(*Error)
	if !ok {
		t.Fatalf("error %T %v", err, err)
	}
	if len(e.Problems) != 3 || e.File != "c.toml" {
		t.Errorf("problems %+v", e.Problems)
	}
}

func f(v float64) *float64 { return &v }

func TestPricing(t *testing.T) {
	m := Model{Name: "a", InputCentsPerMTok: f(300), OutputCentsPerMTok: f(1500)}
	micro, ok := m.CostMicroCents(Usage{InputTokens: 1000, OutputTokens: 200})
	if !ok || micro != 600_000 { // 1000*300 + 200*1500
		t.Errorf("cost = %d %v, want 600000", micro, ok)
	}
	if _, ok := (Model{}).CostMicroCents(Usage{InputTokens: 5}); ok {
		t.Error("unpriced model priced")
	}
	half := Model{InputCentsPerMTok: f(0.5)}
	if micro, _ := half.CostMicroCents(Usage{InputTokens: 3, OutputTokens: 100}); micro != 2 {
		t.Errorf("fractional cost = %d, want 2 (1.5 rounded up, output unpriced)", micro)
	}
	for _, tc := range []struct{ micro, cents int64 }{{0, 0}, {-5, 0}, {1, 1}, {1_000_000, 1}, {1_000_001, 2}, {600_000, 1}} {
		if got := CentsRoundedUp(tc.micro); got != tc.cents {
			t.Errorf("CentsRoundedUp(%d) = %d, want %d", tc.micro, got, tc.cents)
		}
	}
	models := map[string]Model{"a": m, "free": {Name: "free"}}
	lookup := func(n string) (Model, bool) { mm, ok := models[n]; return mm, ok }
	p := PriceUsage([]Usage{
		{Model: "a", InputTokens: 1000, OutputTokens: 200},
		{InputTokens: 2000},               // default model a: 600000
		{Model: "free", InputTokens: 9e6}, // no price
		{Model: "ghost", OutputTokens: 1}, // unknown
		{Model: "free", InputTokens: 1},
	}, "a", lookup)
	if p.MicroCents != 1_200_000 || p.Cents() != 2 {
		t.Errorf("priced %d micro, %d cents; want 1200000, 2", p.MicroCents, p.Cents())
	}
	if strings.Join(p.Unpriced, ",") != "free,ghost" {
		t.Errorf("unpriced %v", p.Unpriced)
	}
}
