package manifests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// Format is the authoring format of a manifest.
type Format string

// Manifest formats.
const (
	FormatTOML Format = "toml"
	FormatJSON Format = "json"
)

// FormatFromPath tells the format from a file extension.
func FormatFromPath(path string) (Format, bool) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".toml":
		return FormatTOML, true
	case ".json":
		return FormatJSON, true
	}
	return "", false
}

// Problem is one thing wrong with a manifest, at a location such as
// "run.tasks[1].steps[0]". An empty Path means the whole document.
type Problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// String renders the problem as "path: message".
func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// Problems is every problem found in a manifest; it is an error.
type Problems []Problem

// Error renders one problem per line.
func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Sort orders problems by path, keeping the order of problems at one path.
func (ps Problems) Sort() {
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Path < ps[j].Path })
}

// AsProblems returns the problems an error carries, or a single problem with
// the error's text.
func AsProblems(err error) Problems {
	if err == nil {
		return nil
	}
	var ps Problems
	if errors.As(err, &ps) {
		return ps
	}
	return Problems{{Message: err.Error()}}
}

// ParseJob parses a job manifest strictly: unknown keys and wrong types are
// reported with their key paths. The error, if any, is Problems.
func ParseJob(data []byte, f Format) (*JobManifest, error) {
	var m JobManifest
	if err := parseInto(data, f, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// ParseLine parses a line manifest strictly; see ParseJob.
func ParseLine(data []byte, f Format) (*LineManifest, error) {
	var m LineManifest
	if err := parseInto(data, f, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// CheckJob parses and validates a job manifest and reports every problem:
// those of its shape (unknown keys, wrong types) and, for the rest of the
// document, those ValidateJob finds. The manifest is what could be decoded
// (the values with shape problems left out), nil only when nothing could;
// it is valid only when there are no problems.
func CheckJob(data []byte, f Format) (*JobManifest, Problems) {
	var m JobManifest
	shape, ok := parseLenient(data, f, &m)
	if !ok {
		return nil, shape
	}
	return checked(&m, shape, ValidateJob(&m))
}

// CheckLine is CheckJob for line manifests.
func CheckLine(data []byte, f Format) (*LineManifest, Problems) {
	var m LineManifest
	shape, ok := parseLenient(data, f, &m)
	if !ok {
		return nil, shape
	}
	return checked(&m, shape, ValidateLine(&m))
}

// checked merges shape and validation problems. A value with a shape
// problem was left out before validating, so validation problems at or
// below its location are consequences and are dropped.
func checked[M any](m *M, shape, valid Problems) (*M, Problems) {
	ps := MergeProblems(shape, valid)
	ps.Sort()
	return m, ps
}

// MergeProblems returns base with the problems of more that are not at or
// under a location base already reports (consequences of it).
func MergeProblems(base, more Problems) Problems {
	out := append(Problems{}, base...)
	for _, p := range more {
		if !underAny(p.Path, base) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func underAny(path string, ps Problems) bool {
	for _, p := range ps {
		if p.Path == "" {
			continue
		}
		if path == p.Path || strings.HasPrefix(path, p.Path+".") || strings.HasPrefix(path, p.Path+"[") {
			return true
		}
	}
	return false
}

// DecodeJSONObject decodes a JSON value into a manifest struct with the same
// strictness as ParseJob/ParseLine (used for manifests embedded in request
// bodies). out must be *JobManifest or *LineManifest.
func DecodeJSONObject(raw json.RawMessage, out any) error {
	return parseInto(raw, FormatJSON, out)
}

func parseInto(data []byte, f Format, out any) error {
	ps, ok := parseLenient(data, f, out)
	if !ok || len(ps) > 0 {
		return ps
	}
	return nil
}

// parseLenient decodes a manifest into out, reporting every problem of its
// shape and leaving the offending values out; ok is false when nothing
// could be decoded (a syntax error, a document that is no table).
func parseLenient(data []byte, f Format, out any) (Problems, bool) {
	ps, err := decodeLenient(data, f, out)
	if err != nil {
		return AsProblems(err), false
	}
	return ps, true
}

func decodeLenient(data []byte, f Format, out any) (Problems, error) {
	if le := CheckSize(data, f); le != nil {
		return nil, Problems{le.Problem()}
	}
	var doc any
	switch f {
	case FormatTOML:
		var m map[string]any
		if _, err := toml.Decode(string(data), &m); err != nil {
			return nil, Problems{{Message: "invalid TOML: " + tomlErrorText(err)}}
		}
		doc = m
	case FormatJSON:
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			return nil, Problems{{Message: "invalid JSON: " + err.Error()}}
		}
		if dec.More() {
			return nil, Problems{{Message: "invalid JSON: unexpected data after the document"}}
		}
	default:
		return nil, Problems{{Message: fmt.Sprintf("unknown manifest format %q", f)}}
	}
	if _, ok := doc.(map[string]any); !ok {
		return nil, Problems{{Message: "a manifest must be an object (table)"}}
	}
	// checkShape drops what it reports, so the rest decodes cleanly.
	var ps Problems
	checkShape(doc, reflect.TypeOf(out).Elem(), nil, &ps)
	ps.Sort()
	buf, err := json.Marshal(doc)
	if err != nil {
		return nil, Problems{{Message: "manifest cannot be encoded: " + err.Error()}}
	}
	dec := json.NewDecoder(bytes.NewReader(buf))
	dec.DisallowUnknownFields()
	// Free-form values (defaults, literals, inputs) decode as json.Number and
	// are then normalized, so whole numbers beyond 2^53 keep every digit.
	dec.UseNumber()
	if err := dec.Decode(out); err != nil {
		return nil, append(ps, jsonProblem(err))
	}
	normalizeValues(reflect.ValueOf(out).Elem())
	return ps, nil
}

// normalizeValues replaces every free-form (any) value inside v with its
// Normalize form.
func normalizeValues(v reflect.Value) {
	switch v.Kind() {
	case reflect.Interface:
		if !v.IsNil() && v.CanSet() {
			if n := Normalize(v.Interface()); n != nil {
				v.Set(reflect.ValueOf(n))
			}
		}
	case reflect.Pointer:
		if !v.IsNil() {
			normalizeValues(v.Elem())
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				normalizeValues(v.Field(i))
			}
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			normalizeValues(v.Index(i))
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(iter.Value())
			normalizeValues(e)
			v.SetMapIndex(iter.Key(), e)
		}
	}
}

func tomlErrorText(err error) string {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return fmt.Sprintf("line %d: %s", pe.Position.Line, pe.Message)
	}
	return err.Error()
}

func jsonProblem(err error) Problem {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return Problem{Path: te.Field, Message: fmt.Sprintf("expected %s, got %s", typeName(te.Type), te.Value)}
	}
	return Problem{Message: err.Error()}
}

// replaceOrDelete puts the empty value of t in place of an unusable value,
// so that the key stays present (rules about presence do not fire as well),
// or deletes the key when t has no such value.
func replaceOrDelete(m map[string]any, k string, t reflect.Type) {
	if z := zeroOf(t); z != nil {
		m[k] = z
		return
	}
	delete(m, k)
}

// zeroOf is the empty value of a manifest type as a decoded document holds
// it, or nil for free-form and special types.
func zeroOf(t reflect.Type) any {
	t = derefType(t)
	if t == anyType || t == usdType || t == stepOutputsType {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return map[string]any{}
	case reflect.Slice:
		return []any{}
	case reflect.String:
		return ""
	case reflect.Bool:
		return false
	case reflect.Int, reflect.Int64, reflect.Float64:
		return json.Number("0")
	}
	return nil
}

func derefType(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// claimNames keeps the unique names of a step's outputs list.
func claimNames(list []any) []any {
	out := make([]any, 0, len(list))
	seen := map[string]bool{}
	for _, e := range list {
		if k, ok := e.(string); ok && !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := make(map[string]reflect.Type, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

func kindOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case int64, int, float64:
		return "a number"
	case []any, []map[string]any:
		return "a list"
	case map[string]any:
		return "a table"
	default:
		return fmt.Sprintf("%T", x)
	}
}

func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int64, reflect.Float64:
		return "a number"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a table"
	}
	return t.String()
}

// isNumber reports whether v is a number in any of the decoded forms.
func isNumber(v any) bool {
	switch x := v.(type) {
	case json.Number:
		_, err := x.Float64()
		return err == nil
	case int, int64, float64:
		return true
	}
	return false
}

// isWhole reports whether v is a number without a fractional part.
func isWhole(v any) bool {
	switch x := v.(type) {
	case json.Number:
		if _, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return true
		}
		f, err := x.Float64()
		return err == nil && f == float64(int64(f))
	case int, int64:
		return true
	case float64:
		return x == float64(int64(x))
	}
	return false
}
