package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
)

// Page bounds (API.md "Pagination").
const (
	DefaultLimit = 50
	MaxLimit     = 200
)

// page reads limit and offset from the query.
func page(c *gin.Context) (limit, offset int, err error) {
	limit, offset = DefaultLimit, 0
	if raw, ok := c.GetQuery("limit"); ok {
		n, err := strconv.Atoi(raw)
		switch {
		case err != nil:
			return 0, 0, invalid("int_parsing", "limit must be an integer", "query", "limit")
		case n < 1 || n > MaxLimit:
			return 0, 0, invalid("range_error", fmt.Sprintf("limit must be between 1 and %d", MaxLimit), "query", "limit")
		}
		limit = n
	}
	if raw, ok := c.GetQuery("offset"); ok {
		n, err := strconv.Atoi(raw)
		switch {
		case err != nil:
			return 0, 0, invalid("int_parsing", "offset must be an integer", "query", "offset")
		case n < 0:
			return 0, 0, invalid("range_error", "offset must be 0 or more", "query", "offset")
		}
		offset = n
	}
	return limit, offset, nil
}

// readBody reads the request body, which the body-size middleware bounds.
func readBody(c *gin.Context) ([]byte, error) {
	data, err := io.ReadAll(c.Request.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, mbe
		}
		return nil, httpError(http.StatusBadRequest, CodeInvalidRequest, "reading request body: %v", err)
	}
	return data, nil
}

// bindJSON decodes a JSON request body strictly into dst: malformed JSON,
// trailing data, unknown fields and wrong types are answered with 422 and
// their location (nested, with array indexes: ["body", "links", 0, "foo"]).
// An empty body decodes as {}.
func bindJSON(c *gin.Context, dst any) error {
	data, err := readBody(c)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		data = []byte("{}")
	}
	// null, a list or a scalar would decode as "nothing given".
	if trimmed := bytes.TrimSpace(data); trimmed[0] != '{' {
		return invalid("model_type", "the body must be a JSON object", "body")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonInvalid(err, data, reflect.TypeOf(dst))
	}
	if rest := bytes.TrimSpace(data[dec.InputOffset():]); len(rest) > 0 {
		return invalid("json_invalid", "unexpected data after the JSON body", "body")
	}
	return nil
}

func jsonInvalid(err error, data []byte, dst reflect.Type) *InvalidInput {
	var (
		te *json.UnmarshalTypeError
		se *json.SyntaxError
	)
	switch {
	case errors.As(err, &se):
		return invalid("json_invalid", "malformed JSON: "+se.Error(), "body")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("json_invalid", "malformed JSON: unexpected end of input", "body")
	}
	// The decoder names an unknown field without its path, and a type error
	// without array indexes: walk the document against the type for both.
	var doc any
	if json.Unmarshal(data, &doc) == nil && dst != nil {
		w := &shapeWalk{}
		w.walk(dst, doc, []any{"body"})
		if len(w.detail) > 0 {
			return &InvalidInput{Detail: w.detail}
		}
	}
	switch {
	case errors.As(err, &te):
		loc := []any{"body"}
		for _, p := range strings.Split(te.Field, ".") {
			if p != "" {
				loc = append(loc, p)
			}
		}
		return &InvalidInput{Detail: []FieldError{{Loc: loc, Msg: fmt.Sprintf("expected %s, got %s", kindName(te.Type), te.Value), Type: "type_error"}}}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return invalid("extra_forbidden", "unknown field", "body", field)
	}
	return invalid("json_invalid", "malformed JSON: "+err.Error(), "body")
}

// shapeWalk compares a decoded JSON document with the Go type it is bound
// to and collects unknown fields and wrong JSON types with their locations.
type shapeWalk struct{ detail []FieldError }

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

func (w *shapeWalk) fail(loc []any, typ, msg string, input any) {
	w.detail = append(w.detail, FieldError{Loc: append([]any(nil), loc...), Msg: msg, Type: typ, Input: input})
}

func (w *shapeWalk) walk(t reflect.Type, v any, loc []any) {
	for t.Kind() == reflect.Pointer {
		if v == nil {
			return
		}
		t = t.Elem()
	}
	if v == nil || t.Kind() == reflect.Interface || t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) {
		return
	}
	wrong := func(want string) { w.fail(loc, want+"_type", "expected "+jsonTypeName(want), v) }
	switch t.Kind() {
	case reflect.String:
		if _, ok := v.(string); !ok {
			wrong("string")
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			wrong("bool")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if f, ok := v.(float64); !ok || f != float64(int64(f)) {
			wrong("int")
		}
	case reflect.Float32, reflect.Float64:
		if _, ok := v.(float64); !ok {
			wrong("float")
		}
	case reflect.Slice, reflect.Array:
		l, ok := v.([]any)
		if !ok {
			wrong("list")
			return
		}
		for i, e := range l {
			w.walk(t.Elem(), e, append(loc, i))
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			wrong("dict")
			return
		}
		for _, k := range sortedKeys(m) {
			w.walk(t.Elem(), m[k], append(loc, k))
		}
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			wrong("dict")
			return
		}
		fields := jsonFields(t)
		for _, k := range sortedKeys(m) {
			ft, ok := fieldType(fields, k)
			if !ok {
				w.fail(append(loc, k), "extra_forbidden", "unknown field", m[k])
				continue
			}
			w.walk(ft, m[k], append(loc, k))
		}
	}
}

func jsonTypeName(t string) string {
	switch t {
	case "int":
		return "an integer"
	case "float":
		return "a number"
	case "dict":
		return "an object"
	case "list":
		return "a list"
	case "bool":
		return "a boolean"
	}
	return "a " + t
}

// jsonFields maps the JSON names of a struct's fields, embedded structs'
// included, to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// fieldType finds a field by its JSON name, exactly or, as encoding/json
// does, ignoring case.
func fieldType(fields map[string]reflect.Type, key string) (reflect.Type, bool) {
	if t, ok := fields[key]; ok {
		return t, true
	}
	for name, t := range fields {
		if strings.EqualFold(name, key) {
			return t, true
		}
	}
	return nil, false
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// missing collects required body fields that are absent.
type fieldCheck struct{ detail []FieldError }

func (f *fieldCheck) require(ok bool, field string) {
	if !ok {
		f.detail = append(f.detail, FieldError{Loc: []any{"body", field}, Msg: "field required", Type: "missing"})
	}
}

func (f *fieldCheck) add(field, typ, msg string, input any) {
	f.detail = append(f.detail, FieldError{Loc: []any{"body", field}, Msg: msg, Type: typ, Input: input})
}

func (f *fieldCheck) err() error {
	if len(f.detail) == 0 {
		return nil
	}
	return &InvalidInput{Detail: f.detail}
}

// kindName names what a JSON value of Go type t looks like to a client
// (never the Go type itself).
func kindName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "another type"
}
