package manifests

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/linefactory/linefactory/manifests/agentconf"
)

// CheckAgentSteps checks every run_agent step of a job against the server
// configuration (AGENTS.md): the harness is configured; model, when given
// and the harness lists models, is listed; effort is one of the model's
// efforts, else the harness's. A nil config configures no harness.
func CheckAgentSteps(m *JobManifest, cfg *agentconf.Config) Problems {
	var ps Problems
	add := func(path, format string, args ...any) {
		ps = append(ps, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	for i, t := range m.Run.Tasks {
		for j, s := range t.Steps {
			a := s.RunAgent
			if a == nil {
				continue
			}
			p := fmt.Sprintf("run.tasks[%d].steps[%d].run_agent", i, j)
			h, ok := cfg.Harness(a.Harness)
			if !ok {
				if a.Harness != "" {
					add(p+".harness", "harness %q is not configured on this server (see GET /inference/models)", a.Harness)
				}
				continue
			}
			model := a.Model
			if model != "" && len(h.Models) > 0 {
				if _, ok := h.Model(model); !ok {
					add(p+".model", "%q is not a model of %s (%s)", model, h.Name, strings.Join(modelNames(h.Models), ", "))
					continue
				}
			}
			if a.Effort == "" {
				continue
			}
			if model == "" {
				model = h.DefaultModel
			}
			efforts := h.EffortsOf(model)
			if !slices.Contains(efforts, a.Effort) {
				legal := strings.Join(efforts, ", ")
				if legal == "" {
					legal = "none configured"
				}
				add(p+".effort", "%q is not an effort of %s/%s (%s)", a.Effort, h.Name, model, legal)
			}
		}
	}
	return ps
}

func modelNames(ms []agentconf.Model) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}

// KnowledgeUse is one knowledge slug a manifest binds, with its location.
type KnowledgeUse struct {
	Path string
	Slug string
}

// JobKnowledge lists every knowledge slug a job binds: run_agent knowledge
// lists and knowledge prompts and resume prompts, in manifest order.
func JobKnowledge(m *JobManifest) []KnowledgeUse {
	var out []KnowledgeUse
	bind := func(p string, b *Binding) {
		if b != nil && b.Type == BindingKnowledge && b.Slug != "" {
			out = append(out, KnowledgeUse{Path: p + ".slug", Slug: b.Slug})
		}
	}
	for i, t := range m.Run.Tasks {
		for j, s := range t.Steps {
			a := s.RunAgent
			if a == nil {
				continue
			}
			p := fmt.Sprintf("run.tasks[%d].steps[%d].run_agent", i, j)
			bind(p+".prompt", a.Prompt)
			bind(p+".resume_prompt", a.ResumePrompt)
			for k, ref := range a.Knowledge {
				if ref.Slug != "" {
					out = append(out, KnowledgeUse{Path: fmt.Sprintf("%s.knowledge[%d].slug", p, k), Slug: ref.Slug})
				}
			}
		}
	}
	return out
}

// CheckKnowledge reports every use whose slug does not exist.
func CheckKnowledge(uses []KnowledgeUse, exists func(slug string) bool) Problems {
	var ps Problems
	for _, u := range uses {
		if !exists(u.Slug) {
			ps = append(ps, Problem{Path: u.Path, Message: fmt.Sprintf("knowledge item %q does not exist: create it (POST /knowledge) before deploying", u.Slug)})
		}
	}
	return ps
}

// checkMCPURL reports an MCP url that is not an http(s) URL.
func checkMCPURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Sprintf("%q is not an http(s) URL", raw)
	}
	return ""
}

// LiteralText is the text of a literal binding (a non-string value as
// Stringify writes it); ok is false for a missing or knowledge binding.
func LiteralText(b *Binding) (text string, ok bool) {
	if b == nil || b.Type != BindingLiteral || b.Value == nil {
		return "", false
	}
	return Stringify(b.Value), true
}

// LineKnowledge lists the knowledge slugs a line binds: agent.instructions
// and the instructions of agentic transitions.
func LineKnowledge(m *LineManifest) []KnowledgeUse {
	var out []KnowledgeUse
	if m.Agent != nil && m.Agent.Instructions != nil && m.Agent.Instructions.Type == BindingKnowledge && m.Agent.Instructions.Slug != "" {
		out = append(out, KnowledgeUse{Path: "agent.instructions.slug", Slug: m.Agent.Instructions.Slug})
	}
	for i, t := range m.Transitions {
		if b := t.Instructions; b != nil && b.Type == BindingKnowledge && b.Slug != "" {
			out = append(out, KnowledgeUse{Path: fmt.Sprintf("transitions[%d].instructions.slug", i), Slug: b.Slug})
		}
	}
	return out
}
