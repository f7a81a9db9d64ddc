package manifests

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

var (
	stepOutputsType = reflect.TypeOf(StepOutputs{})
	usdType         = reflect.TypeOf(USD{})
	anyType         = reflect.TypeOf((*any)(nil)).Elem()
)

// loc is a location in a document being walked, from the innermost key or
// index outwards; nil is the whole document. A walk adds one small node per
// level and renders the path only for a problem, so walking a value nested
// n deep costs O(n) memory (a path string per level would cost O(n²)).
type loc struct {
	parent *loc
	key    string
	index  int // when key is ""
}

func (l *loc) child(key string) *loc { return &loc{parent: l, key: key} }

func (l *loc) item(i int) *loc { return &loc{parent: l, index: i} }

// String renders the location as "run.tasks[1].steps[0]".
func (l *loc) String() string {
	var parts []*loc
	for p := l; p != nil; p = p.parent {
		parts = append(parts, p)
	}
	var b strings.Builder
	for i := len(parts) - 1; i >= 0; i-- {
		p := parts[i]
		switch {
		case p.key == "":
			fmt.Fprintf(&b, "[%d]", p.index)
		case b.Len() > 0:
			b.WriteString("." + p.key)
		default:
			b.WriteString(p.key)
		}
	}
	return b.String()
}

func (l *loc) problem(ps *Problems, format string, args ...any) {
	*ps = append(*ps, Problem{Path: l.String(), Message: fmt.Sprintf(format, args...)})
}

// checkNumbers reports numbers inside a free-form value that no float64 can
// hold.
func checkNumbers(v any, path string, ps *Problems) {
	var at *loc
	if path != "" {
		at = (*loc)(nil).child(path)
	}
	checkNumbersAt(v, at, ps)
}

func checkNumbersAt(v any, at *loc, ps *Problems) {
	switch x := v.(type) {
	case json.Number:
		if _, err := x.Float64(); err != nil {
			at.problem(ps, "number %s is out of range", x)
		}
	case []any:
		for i, e := range x {
			checkNumbersAt(e, at.item(i), ps)
		}
	case []map[string]any:
		for i, e := range x {
			checkNumbersAt(e, at.item(i), ps)
		}
	case map[string]any:
		for _, k := range sortedKeys(x) {
			checkNumbersAt(x[k], at.child(k), ps)
		}
	}
}

// checkShape walks a generic decoded document against a manifest type and
// reports every unknown key and every value of the wrong kind, with its path.
// It removes what it reports from the document (unknown keys and unusable
// values in tables, unusable list items become null) and returns false when
// v itself is unusable as a t, for the caller to remove.
func checkShape(v any, t reflect.Type, at *loc, ps *Problems) bool {
	if v == nil {
		return true
	}
	t = derefType(t)
	switch t {
	case anyType:
		n := len(*ps)
		checkNumbersAt(v, at, ps)
		return len(*ps) == n
	case usdType:
		return checkUSD(v, at, ps)
	case stepOutputsType:
		return checkStepOutputs(v, at, ps)
	}
	switch t.Kind() {
	case reflect.Struct:
		return checkStruct(v, t, at, ps)
	case reflect.Map:
		return checkMap(v, t, at, ps)
	case reflect.Slice:
		return checkSlice(v, t, at, ps)
	}
	if want := scalarFits(v, t.Kind()); want != "" {
		at.problem(ps, "expected %s, got %s", want, kindOf(v))
		return false
	}
	return true
}

// scalarFits returns what a scalar of kind k should have been when v does
// not fit it, else "".
func scalarFits(v any, k reflect.Kind) string {
	switch k {
	case reflect.String:
		if _, ok := v.(string); !ok {
			return "a string"
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return "a boolean"
		}
	case reflect.Int, reflect.Int64:
		if !isWhole(v) {
			return "an integer"
		}
	case reflect.Float64:
		if !isNumber(v) {
			return "a number"
		}
	}
	return ""
}

// checkUSD checks a dollar amount, given as a number or a decimal string.
func checkUSD(v any, at *loc, ps *Problems) bool {
	var s string
	switch x := v.(type) {
	case json.Number:
		s = x.String()
	case int64:
		s = strconv.FormatInt(x, 10)
	case float64:
		s = strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		s = x
	default:
		at.problem(ps, "expected a decimal amount in dollars, got %s", kindOf(v))
		return false
	}
	if _, err := ParseUSD(s); err != nil {
		at.problem(ps, "expected a decimal amount in dollars: %v", err)
		return false
	}
	return true
}

// checkStepOutputs checks a step's outputs: a list of key names or a table
// keyed by output key.
func checkStepOutputs(v any, at *loc, ps *Problems) bool {
	switch x := v.(type) {
	case []any:
		// The caller keeps the list's unique names (claimNames).
		seen := map[string]bool{}
		for i, e := range x {
			k, ok := e.(string)
			switch {
			case !ok:
				at.item(i).problem(ps, "expected an output key name (string)")
			case seen[k]:
				at.item(i).problem(ps, "duplicate output key %q", k)
			}
			seen[k] = true
		}
		return true
	case map[string]any:
		for _, k := range sortedKeys(x) {
			if !checkShape(x[k], reflect.TypeOf(StepOutputClaim{}), at.child(k), ps) {
				delete(x, k)
			}
		}
		return true
	}
	at.problem(ps, "expected a list of output keys or a table keyed by output key")
	return false
}

// checkStruct checks a table against a manifest struct: unknown keys are
// reported and removed, each field checked against its type.
func checkStruct(v any, t reflect.Type, at *loc, ps *Problems) bool {
	m, ok := v.(map[string]any)
	if !ok {
		at.problem(ps, "expected a table (object), got %s", kindOf(v))
		return false
	}
	fields := jsonFields(t)
	for _, k := range sortedKeys(m) {
		ft, ok := fields[k]
		if !ok {
			at.child(k).problem(ps, "unknown key")
			delete(m, k)
			continue
		}
		if !checkShape(m[k], ft, at.child(k), ps) {
			replaceOrDelete(m, k, ft)
		} else if list, ok := m[k].([]any); ok && derefType(ft) == stepOutputsType {
			m[k] = claimNames(list)
		}
	}
	return true
}

// checkMap checks a table whose values all have the map's element type.
func checkMap(v any, t reflect.Type, at *loc, ps *Problems) bool {
	m, ok := v.(map[string]any)
	if !ok {
		at.problem(ps, "expected a table (object), got %s", kindOf(v))
		return false
	}
	for _, k := range sortedKeys(m) {
		if !checkShape(m[k], t.Elem(), at.child(k), ps) {
			replaceOrDelete(m, k, t.Elem())
		}
	}
	return true
}

// checkSlice checks a list (or a TOML array of tables) item by item.
func checkSlice(v any, t reflect.Type, at *loc, ps *Problems) bool {
	switch s := v.(type) {
	case []map[string]any:
		for i, e := range s {
			checkShape(e, t.Elem(), at.item(i), ps)
		}
	case []any:
		for i, e := range s {
			if !checkShape(e, t.Elem(), at.item(i), ps) {
				s[i] = zeroOf(t.Elem())
			}
		}
	default:
		at.problem(ps, "expected a list, got %s", kindOf(v))
		return false
	}
	return true
}
