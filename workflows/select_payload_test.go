package workflows

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/manifests/run"
)

// TestSelectPayloadsOfRecordedHistory checks that a run in flight answers
// as before now that the workflows hold the routing activities' records as
// LineRecord (JSON) instead of the store's LineRun: in the recorded
// history of a select, the record decoded from ResumeLineRun's marker,
// encoded again, is byte for byte the select Update's recorded answer, and
// the router's and MarkWaiting's recorded results decode.
func TestSelectPayloadsOfRecordedHistory(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "histories", "linerun-select.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dc := converter.GetDefaultDataConverter()
	results := map[string]LineRecord{} // local activity type -> its result
	var answer, route []byte
	for _, e := range h.GetEvents() {
		switch {
		case e.GetMarkerRecordedEventAttributes() != nil:
			d := e.GetMarkerRecordedEventAttributes().GetDetails()
			var info struct{ ActivityType string }
			if d["data"] == nil || d["result"] == nil || dc.FromPayloads(d["data"], &info) != nil {
				continue
			}
			var rec LineRecord
			if err := dc.FromPayloads(d["result"], &rec); err != nil {
				t.Fatalf("%s's recorded result does not decode: %v", info.ActivityType, err)
			}
			results[info.ActivityType] = rec
		case e.GetWorkflowExecutionUpdateCompletedEventAttributes() != nil:
			answer = onePayload(t, e.GetWorkflowExecutionUpdateCompletedEventAttributes().GetOutcome().GetSuccess().GetPayloads()[0])
		case e.GetActivityTaskCompletedEventAttributes() != nil:
			var res activities.RouteResult
			if err := dc.FromPayloads(e.GetActivityTaskCompletedEventAttributes().GetResult(), &res); err != nil {
				t.Fatalf("the router's recorded result does not decode into RouteResult: %v", err)
			}
			route = LineRecord(res.LineRun)
		}
	}
	if answer == nil || results["ResumeLineRun"] == nil || results["MarkWaiting"] == nil || route == nil {
		t.Fatalf("the history lacks the select's answer (%t), ResumeLineRun (%t), MarkWaiting (%t) or the router's record (%t)",
			answer != nil, results["ResumeLineRun"] != nil, results["MarkWaiting"] != nil, route != nil)
	}
	p, err := dc.ToPayload(results["ResumeLineRun"])
	if err != nil {
		t.Fatal(err)
	}
	if got := onePayload(t, p); !bytes.Equal(got, answer) {
		t.Errorf("the select would answer\n%s\nbut answered\n%s", got, answer)
	}
	if h := results["MarkWaiting"].head(); h.ID == "" {
		t.Errorf("MarkWaiting's record reads without an id: %s", results["MarkWaiting"])
	}
	var waiting struct {
		Status  run.Status      `json:"status"`
		Waiting json.RawMessage `json:"waiting"`
	}
	if err := json.Unmarshal(results["MarkWaiting"], &waiting); err != nil || waiting.Status != run.Waiting || string(waiting.Waiting) == "null" {
		t.Errorf("MarkWaiting's record is not a waiting run (%v): %s", err, results["MarkWaiting"])
	}
}

// onePayload is a payload's encoding and data, to compare.
func onePayload(t *testing.T, p interface {
	GetMetadata() map[string][]byte
	GetData() []byte
}) []byte {
	t.Helper()
	return append(append(append([]byte{}, p.GetMetadata()["encoding"]...), ' '), p.GetData()...)
}
