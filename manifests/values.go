package manifests

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
)

// ValueSpec is what a value must satisfy: the common part of a param spec and
// an output spec.
type ValueSpec struct {
	Type    ParamType
	Items   ParamType
	Enum    []any
	Pattern string
	Prefix  string
}

// Spec returns the value constraints of a param.
func (p JobParamSpec) Spec() ValueSpec {
	return ValueSpec{Type: p.Type, Items: p.Items, Enum: p.Enum, Pattern: p.Pattern, Prefix: p.Prefix}
}

// Spec returns the value constraints of an output.
func (o JobOutputSpec) Spec() ValueSpec {
	return ValueSpec{Type: o.Type, Items: o.Items, Enum: o.Enum}
}

var scalarTypes = map[ParamType]bool{TypeString: true, TypeInteger: true, TypeNumber: true, TypeBoolean: true}

func validType(t ParamType) bool { return scalarTypes[t] || t == TypeArray }

// CheckValue tells whether v satisfies spec: its type (and item type), enum,
// pattern and prefix. v is a decoded JSON or TOML value.
func CheckValue(spec ValueSpec, v any) error {
	if err := checkType(spec.Type, spec.Items, v); err != nil {
		return err
	}
	if len(spec.Enum) > 0 {
		items := []any{v}
		if spec.Type == TypeArray {
			items, _ = v.([]any)
		}
		for _, it := range items {
			if !inEnum(spec.Enum, it) {
				return fmt.Errorf("%s is not one of %s", compactJSON(it), compactJSON(spec.Enum))
			}
		}
	}
	if spec.Pattern != "" || spec.Prefix != "" {
		for _, s := range stringsOf(v) {
			if spec.Prefix != "" && !strings.HasPrefix(s, spec.Prefix) {
				return fmt.Errorf("%q does not start with %q", s, spec.Prefix)
			}
			if spec.Pattern != "" {
				re, err := regexp.Compile(spec.Pattern)
				if err != nil {
					return fmt.Errorf("pattern %q does not compile: %v", spec.Pattern, err)
				}
				if !re.MatchString(s) {
					return fmt.Errorf("%q does not match pattern %q", s, spec.Pattern)
				}
			}
		}
	}
	return nil
}

func checkType(t, items ParamType, v any) error {
	switch t {
	case TypeArray:
		list, ok := v.([]any)
		if !ok {
			return fmt.Errorf("expected an array, got %s", kindOf(v))
		}
		if items != "" {
			for i, e := range list {
				if err := checkType(items, "", e); err != nil {
					return fmt.Errorf("item %d: %w", i, err)
				}
			}
		}
		return nil
	case TypeString:
		if _, ok := v.(string); !ok {
			return fmt.Errorf("expected a string, got %s", kindOf(v))
		}
	case TypeBoolean:
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("expected a boolean, got %s", kindOf(v))
		}
	case TypeInteger:
		if !isWhole(v) {
			return fmt.Errorf("expected an integer, got %s", kindOf(v))
		}
	case TypeNumber:
		if !isNumber(v) {
			return fmt.Errorf("expected a number, got %s", kindOf(v))
		}
	default:
		return fmt.Errorf("unknown type %q", t)
	}
	return nil
}

func stringsOf(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func inEnum(enum []any, v any) bool {
	for _, e := range enum {
		if Equal(e, v) {
			return true
		}
	}
	return false
}

// maxExact is the largest magnitude up to which every whole number is exact
// as a float64 (2^53).
const maxExact = 1 << 53

// Normalize turns a decoded value into its JSON form (lists as []any, tables
// as map[string]any) so values from TOML and JSON compare equal. Numbers
// become float64, except whole numbers beyond 2^53 that fit an int64: those
// become a json.Number holding their exact decimal digits, so they keep their
// precision and a float64 and a json.Number of the same whole value are equal.
func Normalize(v any) any {
	switch x := v.(type) {
	case json.Number:
		if n, err := strconv.ParseInt(x.String(), 10, 64); err == nil {
			return normInt(n)
		}
		if f, err := x.Float64(); err == nil {
			return normFloat(f)
		}
		return x
	case int:
		return normInt(int64(x))
	case int64:
		return normInt(x)
	case float32:
		return normFloat(float64(x))
	case float64:
		return normFloat(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = Normalize(e)
		}
		return out
	case []map[string]any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = Normalize(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = Normalize(e)
		}
		return out
	case []string:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = e
		}
		return out
	}
	return v
}

// Equal compares two decoded values as JSON values (1 equals 1.0).
func Equal(a, b any) bool {
	return reflect.DeepEqual(Normalize(a), Normalize(b))
}

func normInt(n int64) any {
	if n >= -maxExact && n <= maxExact {
		return float64(n)
	}
	return json.Number(strconv.FormatInt(n, 10))
}

func normFloat(f float64) any {
	if a := math.Abs(f); a > maxExact && a < 1<<63 && f == math.Trunc(f) {
		return json.Number(strconv.FormatInt(int64(f), 10))
	}
	return f
}

func compactJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// Stringify renders a value for substitution into a command: strings as they
// are, whole numbers without a decimal point, other values as JSON.
func Stringify(v any) string {
	switch x := Normalize(v).(type) {
	case string:
		return x
	case float64:
		if x == float64(int64(x)) {
			return strconv.FormatInt(int64(x), 10)
		}
		return strconv.FormatFloat(x, 'f', -1, 64)
	case nil:
		return ""
	default:
		return compactJSON(x)
	}
}
