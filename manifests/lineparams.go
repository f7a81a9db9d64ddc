package manifests

import (
	"fmt"
)

// A line run's params are its inputs: the params of the entry stage's job,
// every name an `input` binding (of a conditional transition or of an
// agentic option) reads, and the params of later stages' jobs that the run
// fills by name (a job param a transition into its stage does not bind takes
// the run param of the same name). The functions here derive that set from a
// line and the job manifests its stages resolve to, check the bindings
// against the jobs they feed, and check the params given to a run. They are
// pure: the caller resolves the stages' jobs (keyed by stage id; a stage
// whose job is unknown is absent or nil and its bindings are not checked).

// LineInput is one param a line run accepts.
type LineInput struct {
	// Definition is what a deployment's input_params lists.
	Definition JobParamDefinition
	// Entry is the entry job's spec of the param, nil when only bindings
	// name it.
	Entry *JobParamSpec
	// Bound are the specs of the job params this input feeds: those the
	// input bindings naming it feed, in manifest order, then the later
	// stages' params it fills by name, in stage order.
	Bound []BoundParam
}

// BoundParam is a job param a line input feeds.
type BoundParam struct {
	// Path locates what feeds the param: the binding, e.g.
	// transitions[1].params.mode, or, for a param filled by name, the
	// stage's job, e.g. stages[2].job.
	Path   string
	Stage  string // the stage whose job declares the param
	Param  string // the job param
	ByName bool   // filled from the run param of the same name, not bound
	Spec   JobParamSpec
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
// A later (non-entry) stage's job param that some transition into the stage
// (a conditional transition, or an agentic option whose `to` is the stage)
// does not bind is filled from the run param of the same name, so that name
// is an input too. Named by no binding nor the entry job, it takes the job
// param's definition (of the first such stage) and is optional, even when
// the job param is required: nothing in the line asks the run for it (unlike
// an input binding, which the author wrote), the stage may never be reached,
// and requiring it would make every run of a line with a rarely taken branch
// supply it. A stage no transition leads to never runs and adds no inputs.
//
// Bindings that feed params of conflicting types (type, or item type of an
// array) with one input, or an entry job param of another type, are problems
// located at the binding's name; a param filled by name that conflicts so is
// a problem located at its stage's job (stages[i].job). Bindings whose
// target param is not declared are left to CheckLineBindings.
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
		in.Bound = append(in.Bound, BoundParam{Path: lb.path, Stage: lb.to, Param: lb.param, Spec: spec})
	}
	into := incoming(m)
	for i, st := range m.Stages {
		job := jobs[st.ID]
		if i == 0 || job == nil {
			continue
		}
		for _, name := range sortedKeys(job.Job.Params) {
			if !unboundInto(into[st.ID], name) {
				continue
			}
			spec := job.Job.Params[name]
			p := at("stages", i) + ".job"
			in := byName[name]
			if in == nil {
				in = &LineInput{}
				byName[name] = in
			}
			switch {
			case in.Entry != nil && !sameType(*in.Entry, spec):
				v.add(p, "job %q of stage %s takes param %q of type %s from the run param of that name, which the entry job (stage %s) declares %s; bind %q in every transition into %s",
					st.Job, st.ID, name, specTypeName(spec), entryStage, specTypeName(*in.Entry), name, st.ID)
			case in.Entry == nil && len(in.Bound) > 0 && !sameType(in.Bound[0].Spec, spec):
				v.add(p, "job %q of stage %s takes param %q of type %s from the run param of that name, which feeds a param of type %s at %s; bind %q in every transition into %s",
					st.Job, st.ID, name, specTypeName(spec), specTypeName(in.Bound[0].Spec), in.Bound[0].Path, name, st.ID)
			}
			in.Bound = append(in.Bound, BoundParam{Path: p, Stage: st.ID, Param: name, ByName: true, Spec: spec})
		}
	}
	return defineInputs(byName), v.result()
}

// defineInputs gives each input its definition, from the entry job's param
// when it has one, else from the first param it feeds (required when any
// param bound to it explicitly is), in name order.
func defineInputs(byName map[string]*LineInput) []LineInput {
	out := make([]LineInput, 0, len(byName))
	for _, name := range sortedKeys(byName) {
		in := byName[name]
		if in.Entry != nil {
			in.Definition = definition(name, *in.Entry, isRequired(*in.Entry))
		} else {
			required := false
			for _, b := range in.Bound {
				required = required || !b.ByName && isRequired(b.Spec)
			}
			in.Definition = definition(name, in.Bound[0].Spec, required)
		}
		out = append(out, *in)
	}
	return out
}

// incoming returns, by stage, the bindings of each transition (or agentic
// option) into it.
func incoming(m *LineManifest) map[string][]map[string]ParamBinding {
	into := map[string][]map[string]ParamBinding{}
	for _, t := range m.Transitions {
		switch t.Type {
		case TransitionConditional:
			into[t.To] = append(into[t.To], t.Params)
		case TransitionAgentic:
			for _, o := range t.Options {
				into[o.To] = append(into[o.To], o.Params)
			}
		}
	}
	return into
}

// unboundInto tells whether some transition, of those whose bindings are
// given, leaves param unbound.
func unboundInto(transitions []map[string]ParamBinding, param string) bool {
	for _, bs := range transitions {
		if _, ok := bs[param]; !ok {
			return true
		}
	}
	return false
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
// ApplyParams: problems are located at "params.<name>". An input the entry
// job does not declare gets no default here (the job params it feeds keep
// their own). A given value must also fit every job param it feeds, bound
// or filled by name.
func ApplyLineParams(inputs []LineInput, given map[string]any) (map[string]any, Problems) {
	specs := make(map[string]JobParamSpec, len(inputs))
	for _, in := range inputs {
		if in.Entry != nil {
			specs[in.Definition.Name] = *in.Entry
			continue
		}
		d := in.Definition
		s := JobParamSpec{Type: d.Type, Required: new(d.Required), Enum: d.Enum}
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
				if b.ByName {
					v.add("params."+name, "%v (stage %s takes the value as its job's param %q)", err, b.Stage, b.Param)
				} else {
					v.add("params."+name, "%v (the value feeds param %q of stage %s at %s)", err, b.Param, b.Stage, b.Path)
				}
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

// ApplyLineRunParams checks the params a line run is started with (a manual
// start's params, a schedule's inputs, a trigger's extracted values)
// against the line's inputs as its stages' jobs resolve now (by stage id),
// and returns them with defaults applied. Problems are located at
// "params.<name>".
func ApplyLineRunParams(m *LineManifest, jobs map[string]*JobManifest, given map[string]any) (map[string]any, Problems) {
	// Conflicting bindings were refused at deploy; if the jobs changed
	// since, a value cannot fit both and is refused by ApplyLineParams.
	inputs, _ := LineInputs(m, jobs)
	return ApplyLineParams(inputs, given)
}
