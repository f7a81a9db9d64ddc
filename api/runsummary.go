package api

import (
	"encoding/json"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gin-gonic/gin"
)

// The summary shape of the run lists (?fields=summary): every item without
// its step timeline, its result payload and its trigger's payload, which
// can make a page of long runs megabytes. The default stays the full shape.

const fieldsSummary = "summary"

// summaryDropped are the top-level members left out of a summary item.
var summaryDropped = []string{"step_timeline", "result_payload"}

func init() {
	queryDescriptions["fields"] = "summary: leave out each run's step_timeline, result_payload and trigger.payload (smaller pages of long runs); " +
		"omitted: the full items"
	for _, key := range []string{"GET /jobs/{name}/runs", "GET /job-runs", "GET /factory/lines/{name}/runs", "GET /factory/line-runs"} {
		if op, ok := operations[key]; ok {
			op.query = append(op.query, "fields")
			operations[key] = op
		}
	}
	// Job run lists answer JobRun items, or JobRunSummary items with
	// fields=summary. (This init runs after runsearch.go's, which adds
	// GET /job-runs: files are initialised in name order.)
	for _, key := range []string{"GET /jobs/{name}/runs", "GET /job-runs"} {
		if op, ok := operations[key]; ok {
			op.response = arr(&openapi3.Schema{AnyOf: openapi3.SchemaRefs{ref("JobRun"), ref("JobRunSummary")}}).NewRef()
			operations[key] = op
		}
	}
	// Line run lists likewise: LineRunListItem or LineRunSummary items.
	for _, key := range []string{"GET /factory/lines/{name}/runs", "GET /factory/line-runs"} {
		if op, ok := operations[key]; ok {
			op.response = arr(&openapi3.Schema{AnyOf: openapi3.SchemaRefs{ref("LineRunListItem"), ref("LineRunSummary")}}).NewRef()
			operations[key] = op
		}
	}
}

// summaryRequested reads ?fields: true for "summary", false when absent.
func summaryRequested(c *gin.Context) (bool, error) {
	switch v, ok := c.GetQuery("fields"); {
	case !ok || v == "":
		return false, nil
	case v == fieldsSummary:
		return true, nil
	default:
		return false, invalid("enum", "fields must be summary (or omitted for the full items)", "query", "fields")
	}
}

// summarizeRun removes the summary's dropped members from one run's JSON
// object: a JobRunResponse becomes a JobRunSummary, a LineRunListItem a
// LineRunSummary.
func summarizeRun(item json.RawMessage) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(item, &m); err != nil {
		return nil, err
	}
	for _, k := range summaryDropped {
		delete(m, k)
	}
	if raw, ok := m["trigger"]; ok && string(raw) != "null" {
		var trig map[string]json.RawMessage
		if err := json.Unmarshal(raw, &trig); err != nil {
			return nil, err
		}
		delete(trig, "payload")
		data, err := json.Marshal(trig)
		if err != nil {
			return nil, err
		}
		m["trigger"] = data
	}
	return json.Marshal(m)
}

// listOfViews is a list's items in a response shape; never null.
func listOfViews[S, D any](in []S, f func(S) D) []D {
	if in == nil {
		return []D{}
	}
	return convert(in, f)
}

// writeRawRunList answers a run list of items that are JSON already:
// JobRunResponse items (the stored documents with their
// timelines, or without for the summary) or LineRunListItem items (the
// store's cut of the stored documents); the summary cuts them further by
// summarizeRun (runviews_test.go checks both cuts against the types).
func writeRawRunList(c *gin.Context, items []json.RawMessage) error {
	summary, err := summaryRequested(c)
	if err != nil {
		return err
	}
	if summary {
		for i, it := range items {
			if items[i], err = summarizeRun(it); err != nil {
				return err
			}
		}
	}
	writeJSONDoc(c, jsonArray(items))
	return nil
}

// summarySchema is a run schema without the members the summary leaves out.
func summarySchema(full *openapi3.Schema) *openapi3.Schema {
	s := *full
	s.Properties = openapi3.Schemas{}
	for name, p := range full.Properties {
		s.Properties[name] = p
	}
	s.Required = append([]string(nil), full.Required...)
	for _, k := range summaryDropped {
		delete(s.Properties, k)
		for i, name := range s.Required {
			if name == k {
				s.Required = append(s.Required[:i:i], s.Required[i+1:]...)
				break
			}
		}
	}
	return &s
}
