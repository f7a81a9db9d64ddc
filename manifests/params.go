package manifests

import (
	"fmt"
)

// ApplyParams checks the params given to a run against a job's param specs and
// returns them with defaults applied. Unknown params, missing required params
// and values that do not fit their spec are problems located at
// "params.<name>". The reserved run_id cannot be given. A param given as null
// counts as not given: an optional param gets its default (or stays unset), a
// required one is a problem.
func ApplyParams(specs map[string]JobParamSpec, given map[string]any) (map[string]any, Problems) {
	v := &validator{}
	out := make(map[string]any, len(specs))
	bad := map[string]bool{} // given values already reported
	for _, name := range sortedKeys(given) {
		if name == ReservedRunID {
			v.add("params."+name, "%q is reserved and set by the service", ReservedRunID)
			continue
		}
		spec, ok := specs[name]
		if !ok {
			v.add("params."+name, "unknown param (the job declares: %s)", declared(specs))
			continue
		}
		val := Normalize(given[name])
		if val == nil {
			continue
		}
		if err := CheckValue(spec.Spec(), val); err != nil {
			v.add("params."+name, "%v", err)
			bad[name] = true
			continue
		}
		out[name] = val
	}
	for _, name := range sortedKeys(specs) {
		if _, ok := out[name]; ok || bad[name] {
			continue
		}
		spec := specs[name]
		switch {
		case spec.Default != nil:
			out[name] = Normalize(spec.Default)
		case spec.Required != nil && *spec.Required:
			if _, given := given[name]; given {
				v.add("params."+name, "is required: null is not a value")
			} else {
				v.add("params."+name, "is required")
			}
		}
	}
	if ps := v.result(); ps != nil {
		return nil, ps
	}
	return out, nil
}

func declared(specs map[string]JobParamSpec) string {
	if len(specs) == 0 {
		return "none"
	}
	return fmt.Sprint(sortedKeys(specs))
}

// ParamSpecs turns input param definitions back into specs, to check the
// params of a line run.
func ParamSpecs(defs []JobParamDefinition) map[string]JobParamSpec {
	specs := make(map[string]JobParamSpec, len(defs))
	for _, d := range defs {
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
	return specs
}
