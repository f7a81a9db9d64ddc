package manifests

import (
	"fmt"
	"strconv"
	"strings"
)

// StageResult is what a condition sees of a visited stage.
type StageResult struct {
	Status    string         `json:"status"`
	Outputs   map[string]any `json:"outputs"`
	JobRunID  string         `json:"job_run_id"`
	Iteration int            `json:"iteration"`
}

// EvalContext is what conditions are evaluated against: the stage just
// visited (From), every visited stage's latest result, how often each
// transition was taken, and the trigger envelope.
type EvalContext struct {
	From        string
	Stages      map[string]StageResult
	Transitions map[string]int
	Trigger     map[string]any
}

// Evaluate evaluates a condition. A path that resolves to nothing is absent:
// exists is false, eq is false, ne is true.
func Evaluate(c Condition, ctx EvalContext) (bool, error) {
	switch c.Op {
	case OpAlways:
		return true, nil
	case OpAll, OpAny:
		for _, sub := range c.Conditions {
			ok, err := Evaluate(sub, ctx)
			if err != nil {
				return false, err
			}
			if c.Op == OpAll && !ok {
				return false, nil
			}
			if c.Op == OpAny && ok {
				return true, nil
			}
		}
		return c.Op == OpAll, nil
	case OpNot:
		if c.Condition == nil {
			return false, fmt.Errorf("op not without condition")
		}
		ok, err := Evaluate(*c.Condition, ctx)
		return !ok, err
	case OpEq, OpNe, OpContains, OpNotContains:
		if c.Left == nil || c.Right == nil {
			return false, fmt.Errorf("op %s needs left and right", c.Op)
		}
		l, lok, err := resolveOperand(*c.Left, ctx)
		if err != nil {
			return false, err
		}
		r, rok, err := resolveOperand(*c.Right, ctx)
		if err != nil {
			return false, err
		}
		switch c.Op {
		case OpEq:
			return lok && rok && Equal(l, r), nil
		case OpNe:
			return !(lok && rok && Equal(l, r)), nil
		case OpContains:
			return lok && rok && contains(l, r), nil
		default:
			return !(lok && rok && contains(l, r)), nil
		}
	case OpExists, OpMissing, OpTruthy, OpFalsy:
		if c.Operand == nil {
			return false, fmt.Errorf("op %s needs operand", c.Op)
		}
		v, ok, err := resolveOperand(*c.Operand, ctx)
		if err != nil {
			return false, err
		}
		switch c.Op {
		case OpExists:
			return ok, nil
		case OpMissing:
			return !ok, nil
		case OpTruthy:
			return ok && Truthy(v), nil
		default:
			return !ok || !Truthy(v), nil
		}
	}
	return false, fmt.Errorf("unknown op %q", c.Op)
}

func resolveOperand(o Operand, ctx EvalContext) (any, bool, error) {
	switch o.Type {
	case OperandLiteral:
		return o.Value, true, nil
	case OperandStage:
		name := o.Stage
		if name == "" {
			name = ctx.From
		}
		st, ok := ctx.Stages[name]
		if !ok {
			return nil, false, nil
		}
		outputs := map[string]any{}
		for k, v := range st.Outputs {
			outputs[k] = v
		}
		root := map[string]any{"status": st.Status, "outputs": outputs, "job_run_id": st.JobRunID, "iteration": float64(st.Iteration)}
		v, ok := ResolvePath(root, o.Path)
		return v, ok, nil
	case OperandTransition:
		root := map[string]any{"id": o.ID, "iterations": float64(ctx.Transitions[o.ID])}
		v, ok := ResolvePath(root, o.Path)
		return v, ok, nil
	case OperandTrigger:
		v, ok := ResolvePath(ctx.Trigger, o.Path)
		return v, ok, nil
	}
	return nil, false, fmt.Errorf("unknown operand type %q", o.Type)
}

// Truthy is JSON truthiness: true, a non-zero number, a non-empty string,
// list or object.
func Truthy(v any) bool {
	switch x := Normalize(v).(type) {
	case nil:
		return false
	case bool:
		return x
	case float64:
		return x != 0
	case string:
		return x != ""
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return true
}

func contains(haystack, needle any) bool {
	switch h := Normalize(haystack).(type) {
	case string:
		s, ok := Normalize(needle).(string)
		return ok && strings.Contains(h, s)
	case []any:
		for _, e := range h {
			if Equal(e, needle) {
				return true
			}
		}
	case map[string]any:
		s, ok := Normalize(needle).(string)
		if ok {
			_, has := h[s]
			return has
		}
	}
	return false
}

type pathPart struct {
	key   string
	index int
	isIdx bool
}

func splitPath(p string) ([]pathPart, error) {
	var parts []pathPart
	for _, seg := range strings.Split(p, ".") {
		name := seg
		var idxs []int
		if i := strings.IndexByte(seg, '['); i >= 0 {
			name = seg[:i]
			rest := seg[i:]
			for rest != "" {
				if rest[0] != '[' {
					return nil, fmt.Errorf("invalid path %q", p)
				}
				end := strings.IndexByte(rest, ']')
				if end < 0 {
					return nil, fmt.Errorf("invalid path %q: unclosed [", p)
				}
				n, err := strconv.Atoi(rest[1:end])
				if err != nil || n < 0 {
					return nil, fmt.Errorf("invalid path %q: index must be a non-negative integer", p)
				}
				idxs = append(idxs, n)
				rest = rest[end+1:]
			}
		}
		if name == "" && len(idxs) == 0 {
			return nil, fmt.Errorf("invalid path %q: empty segment", p)
		}
		if name != "" {
			parts = append(parts, pathPart{key: name})
		}
		for _, n := range idxs {
			parts = append(parts, pathPart{index: n, isIdx: true})
		}
	}
	return parts, nil
}

func checkPath(p string) error {
	_, err := splitPath(p)
	return err
}

// ResolvePath follows a dotted path with [n] indexes ("outputs.items[0].id")
// into a decoded JSON value.
func ResolvePath(root any, path string) (any, bool) {
	parts, err := splitPath(path)
	if err != nil {
		return nil, false
	}
	cur := Normalize(root)
	for _, p := range parts {
		if p.isIdx {
			list, ok := cur.([]any)
			if !ok || p.index >= len(list) {
				return nil, false
			}
			cur = list[p.index]
			continue
		}
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		cur, ok = m[p.key]
		if !ok {
			return nil, false
		}
	}
	return cur, true
}
