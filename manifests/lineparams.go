package manifests

import (
	"fmt"
	"strings"
)

// A line run's params are its inputs: the params of the entry stage's job,
// and every name an `input` binding (of a conditional transition or of an
// agentic option) reads. The functions here derive that set from a line and
// the job manifests its stages resolve to, check the bindings against the
// jobs they feed, and check the params given to a run. They are pure: the
// caller resolves the stages' jobs (keyed by stage id; a stage whose job is
// unknown is absent or nil and its bindings are not checked).

// LineInput is one param a line run accepts.
type LineInput struct {
	// Definition is what a deployment's input_params lists.
	Definition JobParamDefinition
	// Entry is the entry job's spec of the param, nil when only bindings
	// name it.
	Entry *JobParamSpec
	// Bound are the specs of the job params the input bindings naming this
	// input feed, in manifest order.
	Bound []BoundParam
}

// BoundParam is the job param an input binding feeds.
type BoundParam struct {
	Path  string // the binding's location, e.g. transitions[1].params.mode
	Stage string // the stage whose job declares the param
	Spec  JobParamSpec
}

// lineBinding is one param binding of a line, located.
type lineBinding struct {
	path  string // transitions[i].params.<param> or transitions[i].options[k].params.<param>
	to    string // the stage the binding feeds
	param string
	b     ParamBinding
}

// lineBindings lists a line's bindings in manifest order, params sorted.
func lineBindings(m *LineManifest) []lineBinding {
	var out []lineBinding
	add := func(p, to string, bs map[string]ParamBinding) {
		for _, name := range sortedKeys(bs) {
			out = append(out, lineBinding{path: p + ".params." + name, to: to, param: name, b: bs[name]})
		}
	}
	for i, t := range m.Transitions {
		p := at("transitions", i)
		switch t.Type {
		case TransitionConditional:
			add(p, t.To, t.Params)
		case TransitionAgentic:
			for k, o := range t.Options {
				add(at(p+".options", k), o.To, o.Params)
			}
		}
	}
	return out
}

// LineInputs derives the params a run of line m accepts, sorted by name.
//
// An input the entry job declares keeps the entry job's definition,
// required flag and default. An input only bindings name takes its
// definition (type, items, enum, pattern, prefix, description) from the job
// param the first binding naming it feeds. It is required only when a job
// param it feeds is required (a required param has no default): a run
// without it would fail when that transition is taken, and a user would
// rather be told at the start. An input that only feeds optional params is
// optional; left out, the job param keeps its default.
//
// Bindings that feed params of conflicting types (type, or item type of an
// array) with one input, or an entry job param of another type, are problems
// located at the binding's name. Bindings whose target param is not declared
// are left to CheckLineBindings.
func LineInputs(m *LineManifest, jobs map[string]*JobManifest) ([]LineInput, Problems) {
	byName := map[string]*LineInput{}
	var entryStage string
	if len(m.Stages) > 0 {
		entryStage = m.Stages[0].ID
		if entry := jobs[entryStage]; entry != nil {
			for name, spec := range entry.Job.Params {
				spec := spec
				byName[name] = &LineInput{Entry: &spec}
			}
		}
	}
	v := &validator{}
	for _, lb := range lineBindings(m) {
		if lb.b.Type != BindInput || lb.b.Name == "" {
			continue
		}
		job := jobs[lb.to]
		if job == nil {
			continue
		}
		spec, ok := job.Job.Params[lb.param]
		if !ok {
			continue
		}
		in := byName[lb.b.Name]
		if in == nil {
			in = &LineInput{}
			byName[lb.b.Name] = in
		}
		switch {
		case in.Entry != nil && !sameType(*in.Entry, spec):
			v.add(lb.path+".name", "input %q is declared %s by the entry job (stage %s) but feeds param %q of type %s here",
				lb.b.Name, specTypeName(*in.Entry), entryStage, lb.param, specTypeName(spec))
		case in.Entry == nil && len(in.Bound) > 0 && !sameType(in.Bound[0].Spec, spec):
			v.add(lb.path+".name", "input %q feeds a param of type %s here but one of type %s at %s",
				lb.b.Name, specTypeName(spec), specTypeName(in.Bound[0].Spec), in.Bound[0].Path)
		}
		in.Bound = append(in.Bound, BoundParam{Path: lb.path, Stage: lb.to, Spec: spec})
	}
	out := make([]LineInput, 0, len(byName))
	for _, name := range sortedKeys(byName) {
		in := byName[name]
		if in.Entry != nil {
			in.Definition = definition(name, *in.Entry, isRequired(*in.Entry))
		} else {
			required := false
			for _, b := range in.Bound {
				required = required || isRequired(b.Spec)
			}
			in.Definition = definition(name, in.Bound[0].Spec, required)
		}
		out = append(out, *in)
	}
	return out, v.result()
}

// InputDefinitions returns the definitions of inputs (a deployment's
// input_params).
func InputDefinitions(inputs []LineInput) []JobParamDefinition {
	defs := make([]JobParamDefinition, len(inputs))
	for i, in := range inputs {
		defs[i] = in.Definition
	}
	return defs
}

// ApplyLineParams checks the params given to a line run against the line's
// inputs and returns them with the entry job's defaults applied, like
// ApplyParams: problems are located at "params.<name>". An input only
// bindings name gets no default here (the job param it feeds keeps its own).
// A given value must also fit every job param it is bound to.
func ApplyLineParams(inputs []LineInput, given map[string]any) (map[string]any, Problems) {
	specs := make(map[string]JobParamSpec, len(inputs))
	for _, in := range inputs {
		if in.Entry != nil {
			specs[in.Definition.Name] = *in.Entry
			continue
		}
		d := in.Definition
		s := JobParamSpec{Type: d.Type, Required: boolp(d.Required), Enum: d.Enum}
		if d.Items != nil {
			s.Items = *d.Items
		}
		if d.Pattern != nil {
			s.Pattern = *d.Pattern
		}
		if d.Prefix != nil {
			s.Prefix = *d.Prefix
		}
		specs[d.Name] = s
	}
	v := &validator{}
	known := make(map[string]any, len(given))
	for _, name := range sortedKeys(given) {
		if _, ok := specs[name]; !ok && name != ReservedRunID {
			v.add("params."+name, "unknown param (the line accepts: %s)", declared(specs))
			continue
		}
		known[name] = given[name]
	}
	out, ps := ApplyParams(specs, known)
	v.ps = append(v.ps, ps...)
	for _, in := range inputs {
		name := in.Definition.Name
		val, ok := out[name]
		if !ok || Normalize(given[name]) == nil {
			continue // not given: a default, or left to the job
		}
		for _, b := range in.Bound {
			if err := CheckValue(b.Spec.Spec(), val); err != nil {
				v.add("params."+name, "%v (the value feeds param %q of stage %s at %s)", err, pathParam(b.Path), b.Stage, b.Path)
				break
			}
		}
	}
	if ps := v.result(); ps != nil {
		ps.Sort()
		return nil, ps
	}
	return out, nil
}

// CheckLineBindings checks each binding of a line against the jobs its
// stages resolve to: the bound param must be a param of the target stage's
// job, a literal must fit that param's spec, and an output binding must
// name an output the source stage's job declares (when it declares any).
// What depends on a run (a missing input, an output a run did not publish)
// is left to the run.
func CheckLineBindings(m *LineManifest, jobs map[string]*JobManifest) Problems {
	stageJob := map[string]string{}
	for _, s := range m.Stages {
		stageJob[s.ID] = s.Job
	}
	v := &validator{}
	for _, lb := range lineBindings(m) {
		target := jobs[lb.to]
		if target == nil {
			continue
		}
		spec, ok := target.Job.Params[lb.param]
		if !ok {
			v.add(lb.path, "job %q of stage %s declares no param %q (it declares: %s)", stageJob[lb.to], lb.to, lb.param, declared(target.Job.Params))
			continue
		}
		switch lb.b.Type {
		case BindLiteral:
			if lb.b.Value == nil {
				continue
			}
			if err := CheckValue(spec.Spec(), Normalize(lb.b.Value)); err != nil {
				v.add(lb.path, "the literal does not fit param %q of job %q: %v", lb.param, stageJob[lb.to], err)
			}
		case BindOutput:
			source := jobs[lb.b.Stage]
			if source == nil || len(source.Outputs) == 0 || lb.b.Name == "" {
				continue
			}
			if _, ok := source.Outputs[lb.b.Name]; !ok {
				v.add(lb.path+".name", "job %q of stage %s declares no output %q (it declares: %s)",
					stageJob[lb.b.Stage], lb.b.Stage, lb.b.Name, fmt.Sprint(sortedKeys(source.Outputs)))
			}
		}
	}
	return v.result()
}

func isRequired(s JobParamSpec) bool { return s.Required != nil && *s.Required }

func sameType(a, b JobParamSpec) bool {
	return a.Type == b.Type && (a.Type != TypeArray || a.Items == b.Items)
}

func specTypeName(s JobParamSpec) string {
	if s.Type == TypeArray && s.Items != "" {
		return fmt.Sprintf("array of %s", s.Items)
	}
	return string(s.Type)
}

// pathParam returns the param name at the end of a binding's location.
func pathParam(p string) string {
	const marker = ".params."
	if i := strings.LastIndex(p, marker); i >= 0 {
		return p[i+len(marker):]
	}
	return p
}

// definition describes a param spec as a line input.
func definition(name string, p JobParamSpec, required bool) JobParamDefinition {
	d := JobParamDefinition{Name: name, Type: p.Type, Required: required, Enum: p.Enum}
	if p.Items != "" {
		items := p.Items
		d.Items = &items
	}
	if p.Description != "" {
		s := p.Description
		d.Description = &s
	}
	if p.Pattern != "" {
		s := p.Pattern
		d.Pattern = &s
	}
	if p.Prefix != "" {
		s := p.Prefix
		d.Prefix = &s
	}
	return d
}
