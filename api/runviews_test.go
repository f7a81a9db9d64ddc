package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/store/storetest"
)

// The run response types must answer what was served before they existed:
// the store records encoded as they are (job runs; line runs in detail),
// and a line run marshalled to a map with the details and the webhook body
// deleted (line-run list items). oldLineRunItem and oldJobRun are those
// encodings, kept here as the reference.

func oldJobRun(t *testing.T, r store.JobRun) []byte { return mustJSON(t, r) }

func oldLineRun(t *testing.T, r store.LineRun) []byte { return mustJSON(t, r) }

func oldLineRunItem(t *testing.T, r store.LineRun) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(mustJSON(t, r), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"transitions", "stage_outputs", "workflow_id", "retry_of", "stop_reason"} {
		delete(m, k)
	}
	if trig, ok := m["trigger"].(map[string]any); ok {
		if payload, ok := trig["payload"].(map[string]any); ok {
			delete(payload, "body")
		}
	}
	return mustJSON(t, m)
}

func oldSummary(t *testing.T, item []byte) []byte {
	t.Helper()
	out, err := summarizeRun(item)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decodeJSON decodes JSON keeping numbers as written, so two documents
// compare equal when they differ only in the order of their members.
func decodeJSON(t *testing.T, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return v
}

// decodeView is a response value as a client decodes it.
func decodeView(t *testing.T, v any) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(mustJSON(t, v), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func sameJSON(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !reflect.DeepEqual(decodeJSON(t, got), decodeJSON(t, want)) {
		t.Errorf("%s differs\n got %s\nwant %s", what, got, want)
	}
}

// fill sets every exported field of v, at every depth, to a value that is
// not its zero (two items in a slice, two entries in a map), so a field a
// response type forgets or renders differently shows.
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Date(2026, 11, 23, 10, 0, 0, *n*1000, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), n)
			}
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fill(s.Index(i), n)
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for range 2 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(k, n)
			fill(e, n)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Interface:
		// Free values (params, payloads, details) hold an object with a
		// string, a number, a list and a nested object.
		v.Set(reflect.ValueOf(map[string]any{"s": fmt.Sprintf("v%d", *n), "n": float64(*n) + 0.5, "l": []any{1.0, "x", false},
			"o": map[string]any{"deep": true}}))
	default:
		panic("fill: no value for " + v.Type().String())
	}
}

func richJobRun() store.JobRun {
	var r store.JobRun
	n := 0
	fill(reflect.ValueOf(&r).Elem(), &n)
	return r
}

func richLineRun() store.LineRun {
	var r store.LineRun
	n := 0
	fill(reflect.ValueOf(&r).Elem(), &n)
	r.Trigger.Payload["body"] = map[string]any{"raw": "webhook body"}
	return r
}

// emptyLineRun and emptyJobRun have every slice and map empty rather than
// nil, as the store writes a new record.
func emptyJobRun() store.JobRun {
	return store.JobRun{RunParams: map[string]any{}, ResultPayload: map[string]any{}, StepTimeline: []store.StepTimelineEntry{{}},
		ArtifactRefs: []map[string]any{}, KnowledgeVersions: []store.KnowledgeVersionRef{}, ErrorDetails: map[string]any{}}
}

func emptyLineRun() store.LineRun {
	return store.LineRun{RunParams: map[string]any{}, Stages: []store.LineRunStage{{}}, Artifacts: []map[string]any{},
		ManagerTurns: []store.ManagerTurn{}, Transitions: []store.TakenTransition{{}}, StageOutputs: map[string]map[string]any{},
		Trigger: store.TriggerSummary{Payload: map[string]any{}}, Failure: &store.LineRunFailure{},
		Routing: store.Routing{Waiting: &store.Waiting{}, RouterCalls: []store.RouterCall{}, KnowledgeVersions: []store.InstructionsVersion{}}}
}

// TestRunViewsKeepTheServedJSON: every shape of a job run and a line run
// encodes as it did before the response types, on records with every field
// set (the rich ones have no null and no omitted member), with none set,
// and with empty slices and maps.
func TestRunViewsKeepTheServedJSON(t *testing.T) {
	rich := richJobRun()
	if b := mustJSON(t, jobRunResponse(rich)); bytes.Contains(b, []byte("null")) {
		t.Fatalf("the rich job run has a field left unset: %s", b)
	}
	richLine := richLineRun()
	if b := mustJSON(t, lineRunResponse(richLine)); bytes.Contains(b, []byte("null")) {
		t.Fatalf("the rich line run has a field left unset: %s", b)
	}
	for name, r := range map[string]store.JobRun{"rich": rich, "zero": {}, "empty": emptyJobRun()} {
		sameJSON(t, name+" job run", mustJSON(t, jobRunResponse(r)), oldJobRun(t, r))
		sameJSON(t, name+" job run summary", mustJSON(t, jobRunSummary(r)), oldSummary(t, oldJobRun(t, r)))
	}
	for name, r := range map[string]store.LineRun{"rich": richLine, "zero": {}, "empty": emptyLineRun()} {
		sameJSON(t, name+" line run", mustJSON(t, lineRunResponse(r)), oldLineRun(t, r))
		sameJSON(t, name+" line run list item", mustJSON(t, lineRunListItem(r)), oldLineRunItem(t, r))
		sameJSON(t, name+" line run summary", mustJSON(t, lineRunSummary(r)), oldSummary(t, oldLineRunItem(t, r)))
	}
	if _, ok := richLine.Trigger.Payload["body"]; !ok {
		t.Fatal("lineRunListItem changed the record's trigger payload")
	}
	// Lists are never null.
	if b := mustJSON(t, listOfViews([]store.LineRun(nil), lineRunListItem)); string(b) != "[]" {
		t.Fatalf("an empty list is %s", b)
	}
}

// TestRunViewsAreTheStoredDocuments: GET by id serves the stored document
// and a line-run listing the store's cut of it; both are the response
// types' JSON, and the summary cut of the raw items is the summary type's.
func TestRunViewsAreTheStoredDocuments(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		for i, jr := range []store.JobRun{richJobRun(), emptyJobRun(), {}} {
			jr.ID = fmt.Sprintf("jr_view%d", i)
			created, err := st.CreateJobRun(ctx, jr)
			if err != nil {
				t.Fatal(err)
			}
			doc, err := st.GetJobRunJSON(ctx, created.ID)
			if err != nil {
				t.Fatal(err)
			}
			storedNeverNull(t, jr.ID, doc)
			got, err := st.GetJobRun(ctx, created.ID)
			if err != nil {
				t.Fatal(err)
			}
			sameJSON(t, "stored job run "+jr.ID, doc, mustJSON(t, jobRunResponse(got)))
			sameJSON(t, "stored job run summary "+jr.ID, oldSummary(t, doc), mustJSON(t, jobRunSummary(got)))
			for _, without := range []bool{false, true} {
				items, err := st.ListJobRunsJSON(ctx, store.RunSearch{Name: created.JobName, Status: created.Status, LineRunID: deref(created.LineRunID),
					Since: created.CreatedAt.Truncate(time.Second), WithoutTimeline: without})
				if err != nil {
					t.Fatal(err)
				}
				var item json.RawMessage
				for _, it := range items {
					if m, _ := decodeJSON(t, it).(map[string]any); m["id"] == created.ID {
						item = it
					}
				}
				if item == nil {
					t.Fatalf("job run %s not listed (without timeline: %v)", created.ID, without)
				}
				if without {
					sameJSON(t, "listed job run summary "+jr.ID, oldSummary(t, item), mustJSON(t, jobRunSummary(got)))
				} else {
					sameJSON(t, "listed job run "+jr.ID, item, mustJSON(t, jobRunResponse(got)))
				}
			}
		}
		for i, lr := range []store.LineRun{richLineRun(), emptyLineRun(), {}} {
			lr.ID, lr.LineName = fmt.Sprintf("lr_view%d", i), fmt.Sprintf("view%d", i)
			created, err := st.CreateLineRun(ctx, lr)
			if err != nil {
				t.Fatal(err)
			}
			got, err := st.GetLineRun(ctx, created.ID)
			if err != nil {
				t.Fatal(err)
			}
			doc, err := st.GetLineRunJSON(ctx, created.ID)
			if err != nil {
				t.Fatal(err)
			}
			storedNeverNull(t, lr.ID, doc)
			sameJSON(t, "stored line run "+lr.ID, doc, mustJSON(t, lineRunResponse(got)))
			items, err := st.ListLineRunsJSON(ctx, store.LineRunFilter{LineName: lr.LineName})
			if err != nil {
				t.Fatal(err)
			}
			if len(items) != 1 {
				t.Fatalf("%d items", len(items))
			}
			sameJSON(t, "listed line run "+lr.ID, items[0], mustJSON(t, lineRunListItem(got)))
			sameJSON(t, "listed line run summary "+lr.ID, oldSummary(t, items[0]), mustJSON(t, lineRunSummary(got)))
		}
	})
}

// storedNeverNull: a stored run document, even of a record created with
// nothing set, has its neverNull members as [] or {}, never null (what the
// run schemas say of them).
func storedNeverNull(t *testing.T, id string, doc []byte) {
	t.Helper()
	m, _ := decodeJSON(t, doc).(map[string]any)
	for path := range neverNull {
		var v any = m
		for _, k := range strings.Split(path, ".") {
			v = v.(map[string]any)[k]
			if v == nil {
				break
			}
		}
		top, _, _ := strings.Cut(path, ".")
		if _, has := m[top]; has && v == nil {
			t.Errorf("stored run %s: %s is null (or missing): %s", id, path, doc)
		}
	}
}

// TestRunSummaryDropsWhatTheTypesLeaveOut: the members summarizeRun cuts
// out of raw items are the ones JobRunResponse has beyond JobRunSummary.
func TestRunSummaryDropsWhatTheTypesLeaveOut(t *testing.T) {
	full, summary := decodeView(t, jobRunResponse(richJobRun())), decodeView(t, jobRunSummary(richJobRun()))
	var extra []string
	for k := range full {
		if _, ok := summary[k]; !ok {
			extra = append(extra, k)
		}
	}
	want := append([]string(nil), summaryDropped...)
	sortStrings(extra)
	sortStrings(want)
	if strings.Join(extra, ",") != strings.Join(want, ",") {
		t.Fatalf("JobRunResponse has %v beyond JobRunSummary; summarizeRun drops %v", extra, want)
	}
}

// runSchemaTypes are the run schemas of the OpenAPI document and the
// response types they describe.
var runSchemaTypes = map[string]reflect.Type{
	"JobRun":          reflect.TypeFor[JobRunResponse](),
	"JobRunSummary":   reflect.TypeFor[JobRunSummary](),
	"LineRun":         reflect.TypeFor[LineRunResponse](),
	"LineRunListItem": reflect.TypeFor[LineRunListItem](),
	"LineRunSummary":  reflect.TypeFor[LineRunSummary](),
}

// neverNull are the list and object members the store never leaves null
// (normalizeJobRun and normalizeLineRun write [] and {} for them), so their
// schemas are not nullable; every other slice or map member without
// omitempty may be null. Paths are from a run's top.
var neverNull = map[string]bool{"run_params": true, "step_timeline": true, "artifact_refs": true, "knowledge_versions": true,
	"stages": true, "artifacts": true, "manager_turns": true, "transitions": true, "stage_outputs": true, "trigger.payload": true}

// schemaCheck compares a schema with a Go response type, recording every
// difference.
type schemaCheck struct{ problems []string }

func (c *schemaCheck) errorf(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// jsonMember is one member of a struct's JSON object.
type jsonMember struct {
	typ       reflect.Type
	omitempty bool
}

// jsonMembers are the members encoding/json gives a struct type (embedded
// structs without a name are merged).
func jsonMembers(typ reflect.Type, out map[string]jsonMember) map[string]jsonMember {
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case !f.IsExported() || name == "-":
		case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
			jsonMembers(f.Type, out)
		default:
			if name == "" {
				name = f.Name
			}
			out[name] = jsonMember{typ: f.Type, omitempty: strings.Contains(","+opts+",", ",omitempty,")}
		}
	}
	return out
}

// resolved is s with a nullable reference ({nullable, allOf: [ref]})
// followed, and whether the value may be null.
func resolved(s *openapi3.Schema) (*openapi3.Schema, bool) {
	nullable := s.Nullable
	for len(s.AllOf) == 1 && s.Type.IsEmpty() && len(s.Properties) == 0 {
		s = s.AllOf[0].Value
		nullable = nullable || s.Nullable
	}
	return s, nullable
}

// object checks an object schema against a struct type: the same members
// both ways, each with its type and nullability, required only when
// always present.
func (c *schemaCheck) object(path string, typ reflect.Type, s *openapi3.Schema) {
	members := jsonMembers(typ, map[string]jsonMember{})
	for name, m := range members {
		p := s.Properties[name]
		if p == nil || p.Value == nil {
			c.errorf("%s: the schema lacks %q, which %s has", path, name, typ)
			continue
		}
		if m.omitempty && slices.Contains(s.Required, name) {
			c.errorf("%s.%s is required but %s omits it when empty", path, name, typ)
		}
		c.member(strings.TrimPrefix(path+"."+name, "."), m, p.Value)
	}
	for name := range s.Properties {
		if _, ok := members[name]; !ok {
			c.errorf("%s: the schema has %q, which %s has not", path, name, typ)
		}
	}
}

// member checks a member's nullability and then its value.
func (c *schemaCheck) member(path string, m jsonMember, s *openapi3.Schema) {
	s, nullable := resolved(s)
	k := m.typ.Kind()
	canBeNull := !m.omitempty && (k == reflect.Pointer || (k == reflect.Slice || k == reflect.Map) && !neverNull[path])
	if nullable != canBeNull {
		c.errorf("%s: nullable is %v, want %v (%s, omitempty %v)", path, nullable, canBeNull, m.typ, m.omitempty)
	}
	c.value(path, m.typ, s)
}

// value checks a schema's type against a Go type, walking into lists,
// maps and objects.
func (c *schemaCheck) value(path string, typ reflect.Type, s *openapi3.Schema) {
	if typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	s, _ = resolved(s)
	want := map[reflect.Kind]string{reflect.String: "string", reflect.Int: "integer", reflect.Int64: "integer", reflect.Bool: "boolean",
		reflect.Slice: "array", reflect.Map: "object", reflect.Struct: "object", reflect.Interface: ""}[typ.Kind()]
	if typ == reflect.TypeFor[time.Time]() {
		want = "string"
		if s.Format != "date-time" {
			c.errorf("%s: format %q, want date-time", path, s.Format)
		}
	}
	if want != "" && !s.Type.Is(want) {
		c.errorf("%s: type %v, want %s (%s)", path, s.Type, want, typ)
	}
	switch {
	case typ.Kind() == reflect.Slice && s.Items != nil:
		c.value(path+"[]", typ.Elem(), s.Items.Value)
	case typ.Kind() == reflect.Slice:
		c.errorf("%s: an array without items", path)
	case typ.Kind() == reflect.Map && typ.Elem().Kind() == reflect.Interface:
		if s.AdditionalProperties.Has != nil && !*s.AdditionalProperties.Has {
			c.errorf("%s: a free object that allows no members", path)
		}
	case typ.Kind() == reflect.Map && s.AdditionalProperties.Schema != nil:
		c.value(path+"{}", typ.Elem(), s.AdditionalProperties.Schema.Value)
	case typ.Kind() == reflect.Map:
		c.errorf("%s: an object without the schema of its values (%s)", path, typ.Elem())
	case typ.Kind() == reflect.Struct && typ != reflect.TypeFor[time.Time]():
		c.object(path, typ, s)
	}
}

// checkRunSchemas compares every run schema of doc with its response type.
func checkRunSchemas(t *testing.T, doc *openapi3.T) []string {
	t.Helper()
	var c schemaCheck
	for name, typ := range runSchemaTypes {
		ref := doc.Components.Schemas[name]
		if ref == nil || ref.Value == nil {
			c.errorf("no schema %s", name)
			continue
		}
		n := len(c.problems)
		c.object("", typ, ref.Value)
		for i := n; i < len(c.problems); i++ {
			if strings.HasPrefix(c.problems[i], ": ") {
				c.problems[i] = name + c.problems[i]
			} else {
				c.problems[i] = name + "." + c.problems[i]
			}
		}
	}
	slices.Sort(c.problems)
	return c.problems
}

func runViewsDoc(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := New(Config{}, nil).OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestRunSchemasAreTheResponseTypes: every run schema of the OpenAPI
// document has exactly the members of its response type, at every depth,
// with their types and nullability; and the check sees a member missing on
// either side, deep or not, and a wrong nullability.
func TestRunSchemasAreTheResponseTypes(t *testing.T) {
	if problems := checkRunSchemas(t, runViewsDoc(t)); len(problems) > 0 {
		t.Fatalf("the run schemas differ from the response types:\n%s", strings.Join(problems, "\n"))
	}
	prop := func(s *openapi3.Schema, path ...string) *openapi3.Schema {
		for _, p := range path {
			if p == "[]" {
				s = s.Items.Value
			} else {
				s = s.Properties[p].Value
			}
		}
		return s
	}
	for what, c := range map[string]struct {
		change func(doc *openapi3.T)
		want   string
	}{
		"member missing": {func(doc *openapi3.T) { delete(doc.Components.Schemas["JobRun"].Value.Properties, "gateway_usage") },
			`JobRun: the schema lacks "gateway_usage"`},
		"deep member missing": {func(doc *openapi3.T) {
			delete(prop(doc.Components.Schemas["LineRun"].Value, "waiting", "options", "[]").Properties, "label")
		}, `waiting.options[]: the schema lacks "label"`},
		"member invented": {func(doc *openapi3.T) {
			doc.Components.Schemas["LineRunSummary"].Value.Properties["bogus"] = str().NewRef()
		},
			`the schema has "bogus"`},
		"deep member invented": {func(doc *openapi3.T) {
			prop(doc.Components.Schemas["JobRun"].Value, "step_timeline", "[]", "usage", "[]").Properties["bogus"] = str().NewRef()
		}, `step_timeline[].usage[]: the schema has "bogus"`},
		"wrong nullability": {func(doc *openapi3.T) { prop(doc.Components.Schemas["LineRun"].Value, "waiting").Nullable = false },
			`waiting: nullable is false`},
		"wrong type": {func(doc *openapi3.T) {
			doc.Components.Schemas["LineRunListItem"].Value.Properties["router_cost_cents"] = str().NewRef()
		}, `router_cost_cents: type`},
	} {
		doc := runViewsDoc(t)
		c.change(doc)
		problems := checkRunSchemas(t, doc)
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, c.want) }) {
			t.Errorf("%s: the check did not see it (want %q): %q", what, c.want, problems)
		}
	}
}
