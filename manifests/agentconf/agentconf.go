package agentconf

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Harness names a run_agent step may use.
const (
	HarnessCustom = "custom"
)

// HarnessNames are the harness keys the file may configure, in listing order.
var HarnessNames = []string{"agent_a", "agent_b", "agent_c", "agent_d", HarnessCustom}

// Placeholders that command and resume_command arguments may hold.
var Placeholders = []string{"prompt_file", "model", "effort", "mcp_config", "session_id", "output_schema", "workdir"}

// Default router timeouts.
const (
	DefaultRouterTimeout     = 60 * time.Second
	DefaultRouterWaitTimeout = 24 * time.Hour
)

// Config is a parsed, validated server configuration file.
type Config struct {
	// Harnesses are keyed agent_a..agent_d and custom.
	Harnesses map[string]Harness
	// Inference is nil when [inference] is absent.
	Inference *Inference
	// Router is nil when [router] is absent.
	Router *Router
}

// Harness is one agent CLI the service may run in a sandbox.
type Harness struct {
	Name          string
	Command       []string
	ResumeCommand []string
	DefaultModel  string
	// Efforts are legal for every model of the harness that lists none.
	Efforts []string
	// Env is added to the environment of the harness's steps.
	Env    map[string]string
	Models []Model
}

// Model is a model a harness or the inference endpoint serves.
type Model struct {
	Name    string
	Efforts []string
	// InputCentsPerMTok and OutputCentsPerMTok are the price of a million
	// tokens in cents; nil means the model has no price (it costs 0).
	InputCentsPerMTok  *float64
	OutputCentsPerMTok *float64
}

// Inference is an OpenAI-compatible endpoint.
type Inference struct {
	BaseURL string
	// APIKeyEnv names the environment variable holding the key.
	APIKeyEnv string
	Models    []Model
}

// Router decides agentic transitions.
type Router struct {
	// Model is served by [inference]; empty means only the wait is configured.
	Model       string
	Timeout     time.Duration
	WaitTimeout time.Duration
}

// Problem is one thing wrong with a configuration file.
type Problem struct {
	Key    string
	Reason string
}

// Error lists every problem of a configuration file.
type Error struct {
	File     string
	Problems []Problem
}

func (e *Error) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		if p.Key == "" {
			parts[i] = fmt.Sprintf("%s: %s", e.File, p.Reason)
		} else {
			parts[i] = fmt.Sprintf("%s: %s: %s", e.File, p.Key, p.Reason)
		}
	}
	return strings.Join(parts, "; ")
}

// Harness returns the configured harness name, if any. A nil Config has none.
func (c *Config) Harness(name string) (Harness, bool) {
	if c == nil {
		return Harness{}, false
	}
	h, ok := c.Harnesses[name]
	return h, ok
}

// InferenceModel returns the [inference] model name, if listed.
func (c *Config) InferenceModel(name string) (Model, bool) {
	if c == nil || c.Inference == nil {
		return Model{}, false
	}
	return findModel(c.Inference.Models, name)
}

// Model returns the harness's model name, if listed.
func (h Harness) Model(name string) (Model, bool) {
	return findModel(h.Models, name)
}

// EffortsOf returns the efforts legal for model name of the harness: the
// model's own when it lists any, else the harness's.
func (h Harness) EffortsOf(name string) []string {
	if m, ok := h.Model(name); ok && len(m.Efforts) > 0 {
		return m.Efforts
	}
	return h.Efforts
}

// SortedHarnesses returns the configured harnesses in HarnessNames order.
func (c *Config) SortedHarnesses() []Harness {
	if c == nil {
		return nil
	}
	var out []Harness
	for _, n := range HarnessNames {
		if h, ok := c.Harnesses[n]; ok {
			out = append(out, h)
		}
	}
	return out
}

func findModel(ms []Model, name string) (Model, bool) {
	for _, m := range ms {
		if m.Name == name {
			return m, true
		}
	}
	return Model{}, false
}

// Priced reports whether the model has a price.
func (m Model) Priced() bool {
	return m.InputCentsPerMTok != nil || m.OutputCentsPerMTok != nil
}

// Usage is one usage line of a harness or one inference response.
type Usage struct {
	Model        string `json:"model"`
	InputTokens  int64  `json:"input_tokens"`
	OutputTokens int64  `json:"output_tokens"`
}

// CostMicroCents prices u at the model's prices in millionths of a cent
// (rounded up); ok is false when the model has no price (cost 0).
func (m Model) CostMicroCents(u Usage) (micro int64, ok bool) {
	if !m.Priced() {
		return 0, false
	}
	var total float64
	if m.InputCentsPerMTok != nil {
		total += float64(u.InputTokens) * *m.InputCentsPerMTok
	}
	if m.OutputCentsPerMTok != nil {
		total += float64(u.OutputTokens) * *m.OutputCentsPerMTok
	}
	return int64(math.Ceil(total - 1e-9)), true
}

// CentsRoundedUp converts micro-cents to whole cents, rounding up.
func CentsRoundedUp(micro int64) int64 {
	if micro <= 0 {
		return 0
	}
	return (micro + 999_999) / 1_000_000
}

// Priced is the price of a run's usage lines.
type Priced struct {
	MicroCents int64
	// Unpriced lists, sorted, the models of usage lines that have no price
	// (unknown models included); they cost 0.
	Unpriced []string
}

// Cents is the priced usage in whole cents, rounded up.
func (p Priced) Cents() int64 { return CentsRoundedUp(p.MicroCents) }

// PriceUsage prices usage lines with lookup (a harness's or the inference
// models); a line without a model is priced as defaultModel.
func PriceUsage(lines []Usage, defaultModel string, lookup func(string) (Model, bool)) Priced {
	var p Priced
	seen := map[string]bool{}
	for _, u := range lines {
		name := u.Model
		if name == "" {
			name = defaultModel
		}
		m, ok := lookup(name)
		var micro int64
		if ok {
			micro, ok = m.CostMicroCents(u)
		}
		if !ok {
			if !seen[name] {
				seen[name] = true
				p.Unpriced = append(p.Unpriced, name)
			}
			continue
		}
		p.MicroCents += micro
	}
	sort.Strings(p.Unpriced)
	return p
}

// Parse reads a configuration file's bytes; file names it in errors.
func Parse(data []byte, file string) (*Config, error) {
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		var pe toml.ParseError
		reason := err.Error()
		if errors.As(err, &pe) {
			reason = fmt.Sprintf("invalid TOML at line %d: %s", pe.Position.Line, pe.Message)
		}
		return nil, &Error{File: file, Problems: []Problem{{Reason: reason}}}
	}
	p := &parser{}
	c := p.config(raw)
	if len(p.problems) > 0 {
		return nil, &Error{File: file, Problems: p.problems}
	}
	return c, nil
}

type parser struct{ problems []Problem }

func (p *parser) add(key, format string, args ...any) {
	p.problems = append(p.problems, Problem{Key: key, Reason: fmt.Sprintf(format, args...)})
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// known reports keys of m not in allowed.
func (p *parser) known(path string, m map[string]any, allowed ...string) {
	for _, k := range sortedKeys(m) {
		ok := false
		for _, a := range allowed {
			if k == a {
				ok = true
				break
			}
		}
		if !ok {
			p.add(join(path, k), "unknown key (expected one of %s)", strings.Join(allowed, ", "))
		}
	}
}

func typeName(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case map[string]any:
		return "a table"
	case []map[string]any:
		return "an array of tables"
	case []any:
		return "an array"
	case time.Time:
		return "a date/time"
	}
	return fmt.Sprintf("%T", v)
}

func (p *parser) table(path string, v any) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		p.add(path, "expected a table, got %s", typeName(v))
	}
	return m, ok
}

func (p *parser) str(path string, v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		p.add(path, "expected a string, got %s", typeName(v))
	}
	return s, ok
}

func (p *parser) strings(path string, v any) ([]string, bool) {
	arr, ok := v.([]any)
	if !ok {
		if _, empty := v.([]map[string]any); empty {
			return nil, true
		}
		p.add(path, "expected an array of strings, got %s", typeName(v))
		return nil, false
	}
	out := make([]string, 0, len(arr))
	good := true
	for i, e := range arr {
		s, ok := e.(string)
		if !ok {
			p.add(fmt.Sprintf("%s[%d]", path, i), "expected a string, got %s", typeName(e))
			good = false
			continue
		}
		out = append(out, s)
	}
	return out, good
}

func (p *parser) tables(path string, v any) ([]map[string]any, bool) {
	switch x := v.(type) {
	case []map[string]any:
		return x, true
	case []any:
		out := make([]map[string]any, 0, len(x))
		for i, e := range x {
			m, ok := e.(map[string]any)
			if !ok {
				p.add(fmt.Sprintf("%s[%d]", path, i), "expected a table, got %s", typeName(e))
				return nil, false
			}
			out = append(out, m)
		}
		return out, true
	}
	p.add(path, "expected an array of tables, got %s", typeName(v))
	return nil, false
}

func (p *parser) price(path string, v any) *float64 {
	var f float64
	switch x := v.(type) {
	case int64:
		f = float64(x)
	case float64:
		f = x
	default:
		p.add(path, "expected a number, got %s", typeName(v))
		return nil
	}
	if f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		p.add(path, "must be a finite number >= 0, got %v", v)
		return nil
	}
	return &f
}

func (p *parser) duration(path string, v any, def time.Duration) time.Duration {
	if v == nil {
		return def
	}
	s, ok := p.str(path, v)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		p.add(path, "%q is not a positive duration (like \"60s\", \"24h\")", s)
		return def
	}
	return d
}

var (
	nameRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$`)
	envRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	holderRE = regexp.MustCompile(`\{\{\s*([^}]*?)\s*\}\}`)
)

func (p *parser) config(raw map[string]any) *Config {
	c := &Config{Harnesses: map[string]Harness{}}
	p.known("", raw, "harnesses", "inference", "router")
	if v, ok := raw["harnesses"]; ok {
		if hs, ok := p.table("harnesses", v); ok {
			p.known("harnesses", hs, HarnessNames...)
			for _, name := range HarnessNames {
				if hv, ok := hs[name]; ok {
					if h, ok := p.harness("harnesses."+name, name, hv); ok {
						c.Harnesses[name] = h
					}
				}
			}
		}
	}
	if v, ok := raw["inference"]; ok {
		c.Inference = p.inference(v)
	}
	if v, ok := raw["router"]; ok {
		c.Router = p.router(v, c.Inference)
	}
	return c
}

func (p *parser) harness(path, name string, v any) (Harness, bool) {
	m, ok := p.table(path, v)
	if !ok {
		return Harness{}, false
	}
	h := Harness{Name: name, Env: map[string]string{}}
	p.known(path, m, "command", "resume_command", "default_model", "efforts", "env", "models")
	for _, key := range []string{"command", "resume_command"} {
		cv, ok := m[key]
		if !ok {
			continue
		}
		args, ok := p.harnessCommand(join(path, key), name, cv)
		if !ok {
			continue
		}
		if key == "command" {
			h.Command = args
		} else {
			h.ResumeCommand = args
		}
	}
	if name != HarnessCustom && h.Command == nil {
		if _, present := m["command"]; !present {
			p.add(join(path, "command"), "required (the harness's command template)")
		}
	}
	if ev, ok := m["efforts"]; ok {
		h.Efforts = p.efforts(join(path, "efforts"), ev)
	}
	if ev, ok := m["env"]; ok {
		p.harnessEnv(join(path, "env"), ev, h.Env)
	}
	if mv, ok := m["models"]; ok {
		h.Models = p.models(join(path, "models"), mv, true)
	}
	if dv, ok := m["default_model"]; ok {
		kp := join(path, "default_model")
		if s, ok := p.str(kp, dv); ok {
			switch {
			case s == "":
				p.add(kp, "must not be empty")
			case len(h.Models) > 0:
				if _, ok := findModel(h.Models, s); !ok {
					p.add(kp, "%q is not one of the harness's models (%s)", s, strings.Join(modelNames(h.Models), ", "))
				}
			}
			h.DefaultModel = s
		}
	}
	return h, true
}

// harnessCommand checks a harness's command or resume command template at
// kp: a list of strings starting with a program, with known placeholders.
func (p *parser) harnessCommand(kp, name string, v any) ([]string, bool) {
	if name == HarnessCustom {
		p.add(kp, "not allowed for custom (its steps run their own command, exec mode only)")
		return nil, false
	}
	args, ok := p.strings(kp, v)
	if !ok {
		return nil, false
	}
	if len(args) == 0 || strings.TrimSpace(args[0]) == "" {
		p.add(kp, "must start with the program to run")
		return nil, false
	}
	for i, a := range args {
		for _, sub := range holderRE.FindAllStringSubmatch(a, -1) {
			if !contains(Placeholders, sub[1]) {
				p.add(fmt.Sprintf("%s[%d]", kp, i), "unknown placeholder {{%s}} (expected one of %s)", sub[1], strings.Join(Placeholders, ", "))
			}
		}
		if i == 0 && holderRE.MatchString(a) {
			p.add(fmt.Sprintf("%s[%d]", kp, i), "the program may not be a placeholder")
		}
	}
	return args, true
}

// harnessEnv reads a harness's env table at path into env: valid names,
// none of the service's SVC_ variables.
func (p *parser) harnessEnv(path string, v any, env map[string]string) {
	em, ok := p.table(path, v)
	if !ok {
		return
	}
	for _, k := range sortedKeys(em) {
		kp := join(path, k)
		if !envRE.MatchString(k) {
			p.add(kp, "not a valid environment variable name")
			continue
		}
		if strings.HasPrefix(k, "SVC_") {
			p.add(kp, "SVC_ variables are set by the service")
			continue
		}
		if s, ok := p.str(kp, em[k]); ok {
			env[k] = s
		}
	}
}

func (p *parser) efforts(path string, v any) []string {
	es, ok := p.strings(path, v)
	if !ok {
		return nil
	}
	seen := map[string]bool{}
	for i, e := range es {
		kp := fmt.Sprintf("%s[%d]", path, i)
		switch {
		case !nameRE.MatchString(e):
			p.add(kp, "%q is not a valid effort name", e)
		case seen[e]:
			p.add(kp, "duplicate effort %q", e)
		}
		seen[e] = true
	}
	return es
}

func (p *parser) models(path string, v any, withEfforts bool) []Model {
	ts, ok := p.tables(path, v)
	if !ok {
		return nil
	}
	var out []Model
	seen := map[string]bool{}
	for i, t := range ts {
		mp := fmt.Sprintf("%s[%d]", path, i)
		if withEfforts {
			p.known(mp, t, "name", "efforts", "input_cents_per_mtok", "output_cents_per_mtok")
		} else {
			p.known(mp, t, "name", "input_cents_per_mtok", "output_cents_per_mtok")
		}
		var m Model
		nv, ok := t["name"]
		if !ok {
			p.add(join(mp, "name"), "required")
		} else if s, ok := p.str(join(mp, "name"), nv); ok {
			switch {
			case !nameRE.MatchString(s):
				p.add(join(mp, "name"), "%q is not a valid model name", s)
			case seen[s]:
				p.add(join(mp, "name"), "duplicate model %q", s)
			}
			seen[s] = true
			m.Name = s
		}
		if ev, ok := t["efforts"]; ok && withEfforts {
			m.Efforts = p.efforts(join(mp, "efforts"), ev)
		}
		if pv, ok := t["input_cents_per_mtok"]; ok {
			m.InputCentsPerMTok = p.price(join(mp, "input_cents_per_mtok"), pv)
		}
		if pv, ok := t["output_cents_per_mtok"]; ok {
			m.OutputCentsPerMTok = p.price(join(mp, "output_cents_per_mtok"), pv)
		}
		out = append(out, m)
	}
	return out
}

func (p *parser) inference(v any) *Inference {
	m, ok := p.table("inference", v)
	if !ok {
		return nil
	}
	p.known("inference", m, "base_url", "api_key_env", "models")
	in := &Inference{}
	if bv, ok := m["base_url"]; !ok {
		p.add("inference.base_url", "required (the OpenAI-compatible endpoint, like http://127.0.0.1:8000/v1)")
	} else if s, ok := p.str("inference.base_url", bv); ok {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.add("inference.base_url", "%q is not an http(s) URL", s)
		}
		in.BaseURL = strings.TrimRight(s, "/")
	}
	if kv, ok := m["api_key_env"]; ok {
		if s, ok := p.str("inference.api_key_env", kv); ok {
			if !envRE.MatchString(s) {
				p.add("inference.api_key_env", "%q is not an environment variable name (name the variable that holds the key, never the key)", s)
			}
			in.APIKeyEnv = s
		}
	}
	if mv, ok := m["models"]; ok {
		in.Models = p.models("inference.models", mv, false)
	}
	return in
}

func (p *parser) router(v any, in *Inference) *Router {
	m, ok := p.table("router", v)
	if !ok {
		return nil
	}
	p.known("router", m, "model", "timeout", "wait_timeout")
	r := &Router{
		Timeout:     p.duration("router.timeout", m["timeout"], DefaultRouterTimeout),
		WaitTimeout: p.duration("router.wait_timeout", m["wait_timeout"], DefaultRouterWaitTimeout),
	}
	if mv, ok := m["model"]; ok {
		if s, ok := p.str("router.model", mv); ok {
			switch {
			case s == "":
				p.add("router.model", "must not be empty (leave it out to configure only the wait)")
			case in == nil:
				p.add("router.model", "%q needs an [inference] section to serve it", s)
			case len(in.Models) > 0:
				if _, ok := findModel(in.Models, s); !ok {
					p.add("router.model", "%q is not one of the inference models (%s)", s, strings.Join(modelNames(in.Models), ", "))
				}
			}
			r.Model = s
		}
	}
	return r
}

func modelNames(ms []Model) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, e := range xs {
		if e == x {
			return true
		}
	}
	return false
}
