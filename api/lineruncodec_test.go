package api

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/linefactory/linefactory/store"
)

// TestLineRunItemShape: the one-pass list item is the run's JSON without
// the detail fields and the webhook body, as lineRunJSON renders it.
func TestLineRunItemShape(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := func(v string) *string { return &v }
	r := store.LineRun{ID: "lr_1", LineName: "l", Status: "failed", CreatedAt: now, LineVersionID: s("lv_1"),
		Trigger:   store.TriggerSummary{Source: "webhook", DeliveryID: s("d1"), Payload: map[string]any{"body": map[string]any{"x": 1.0}, "path": "p"}},
		RunParams: map[string]any{"a": "b"},
		Stages:    []store.LineRunStage{{StageName: "a", StageOrder: 1, Iteration: 1, Status: "failed", JobRunID: s("jr_1"), StartedAt: &now}},
		Artifacts: []map[string]any{}, ManagerTurns: []store.ManagerTurn{{WorkflowRunID: "w", State: "visiting a", StartedAt: &now}},
		Transitions:  []store.TakenTransition{{ID: "t", From: "a", To: "b", Iteration: 1, TakenAt: now}},
		StageOutputs: map[string]map[string]any{"a": {"o": 1.0}}, WorkflowID: "linerun/lr_1", RetryOf: s("lr_0"), StopReason: s("why"),
		Failure: &store.LineRunFailure{Code: s("stage_failed"), Domain: "job"}, StartedAt: &now}
	want, err := lineRunJSON(r, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(newLineRunItem(r))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("list item\n got %s\nwant %v", b, want)
	}
	if _, ok := r.Trigger.Payload["body"]; !ok {
		t.Fatal("the run's own trigger payload lost its body")
	}
}
