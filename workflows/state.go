package workflows

import "encoding/json"

// LineRunState is what the state query of a line run answers: the line-run
// record as JSON, with the keys of GET /factory/line-runs/{id}. While the
// run goes on it is the record as this manager turn began without what
// grows with the run (stages holds this turn's visits; transitions, stage
// outputs and artifacts are empty; manager_turns holds this turn), so no
// turn's history grows with the visits before it. Once the run has ended it
// is the final record.
type LineRunState map[string]any

// replace is the state read from record, or s when record is not a JSON
// object.
func (s LineRunState) replace(record json.RawMessage) LineRunState {
	var m map[string]any
	if err := json.Unmarshal(record, &m); err != nil || m == nil {
		return s
	}
	return m
}

// putVisit records a stage visit (SPEC's LineRunStageSummary as JSON) in
// the state's stages, replacing the entry of the same job run.
func (s LineRunState) putVisit(visit json.RawMessage) {
	var v map[string]any
	if err := json.Unmarshal(visit, &v); err != nil || v == nil {
		return
	}
	stages, _ := s["stages"].([]any)
	for i, old := range stages {
		if o, ok := old.(map[string]any); ok && o["job_run_id"] != nil && o["job_run_id"] == v["job_run_id"] {
			stages[i] = v
			return
		}
	}
	s["stages"] = append(stages, v)
}

// LineRecord is a line run record as the routing activities return it and
// the select Update answers with: its JSON, with the keys of
// GET /factory/line-runs/{id} (the workflows know no storage types). The
// payload is the record's JSON as before the type existed, so runs in
// flight replay and answer as they did.
type LineRecord json.RawMessage

// MarshalJSON is the record's JSON as it is; null when there is none.
func (r LineRecord) MarshalJSON() ([]byte, error) { return json.RawMessage(r).MarshalJSON() }

// UnmarshalJSON keeps a copy of the record's JSON (never reusing r's
// bytes: a record handed on stays as it was).
func (r *LineRecord) UnmarshalJSON(b []byte) error {
	*r = append(LineRecord(nil), b...)
	return nil
}

// recordHead is what the manager reads of a line run record.
type recordHead struct {
	ID             string `json:"id"`
	TotalCostCents int64  `json:"total_cost_cents"`
}

// head reads the record's id and total cost; zero when r is not a record.
func (r LineRecord) head() recordHead {
	var h recordHead
	_ = json.Unmarshal(r, &h) //workflowcheck:ignore (JSON decoding is deterministic)
	return h
}
