package api

import (
	"maps"

	"github.com/linefactory/linefactory/store"
)

// lineRunItem is a line run as listings show it, encoded in one pass: the
// run without its details (lineRunDetailFields) and without the raw webhook
// body of its trigger payload. The fields below shadow the run's own fields
// of the same JSON name; left empty, they leave those keys out.
type lineRunItem struct {
	store.LineRun
	Trigger      store.TriggerSummary      `json:"trigger"`
	Transitions  []store.TakenTransition   `json:"transitions,omitempty"`
	StageOutputs map[string]map[string]any `json:"stage_outputs,omitempty"`
	WorkflowID   string                    `json:"workflow_id,omitempty"`
	RetryOf      *string                   `json:"retry_of,omitempty"`
	StopReason   *string                   `json:"stop_reason,omitempty"`
}

func newLineRunItem(r store.LineRun) lineRunItem {
	it := lineRunItem{LineRun: r, Trigger: r.Trigger}
	if _, ok := r.Trigger.Payload["body"]; ok {
		it.Trigger.Payload = maps.Clone(r.Trigger.Payload)
		delete(it.Trigger.Payload, "body")
	}
	return it
}
