package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

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
			got, err := st.GetJobRun(ctx, created.ID)
			if err != nil {
				t.Fatal(err)
			}
			sameJSON(t, "stored job run "+jr.ID, doc, mustJSON(t, jobRunResponse(got)))
			sameJSON(t, "stored job run summary "+jr.ID, oldSummary(t, doc), mustJSON(t, jobRunSummary(got)))
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

// TestRunSchemasDescribeTheResponseTypes: every member the OpenAPI
// document gives a run schema is a member of its response type (the type
// is the definition; the document may leave members out, not invent them).
func TestRunSchemasDescribeTheResponseTypes(t *testing.T) {
	s := New(Config{}, nil)
	doc, err := s.OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	for name, view := range map[string]any{"JobRun": jobRunResponse(richJobRun()), "JobRunSummary": jobRunSummary(richJobRun()),
		"LineRun": lineRunResponse(richLineRun())} {
		members := decodeView(t, view)
		for prop := range doc.Components.Schemas[name].Value.Properties {
			if _, ok := members[prop]; !ok {
				t.Errorf("the OpenAPI schema %s has %q, which its response type has not", name, prop)
			}
		}
	}
}
