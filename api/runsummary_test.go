package api

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/linefactory/linefactory/store"
)

// TestRunListSummary: ?fields=summary leaves the step timeline, the result
// payload and the trigger payload out of every run list; the default items
// keep them; anything else is a 422.
func TestRunListSummary(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		st := h.srv.store.(*store.Store)
		h.deployExampleJob("hello")
		deployLineJSON(h, `{"line":{"name":"sum"},"trigger":{"type":"manual"},"stages":[{"id":"a","job":"hello"}]}`)
		now := time.Now().UTC().Truncate(time.Second)
		jr, err := st.CreateJobRun(ctx, store.JobRun{JobName: "hello", JobVersionID: "jv_x", Status: "succeeded", CreatedAt: now,
			RunParams:     map[string]any{"who": "you"},
			ResultPayload: map[string]any{"outputs": map[string]any{"greeting": "hello you"}},
			StepTimeline:  []store.StepTimelineEntry{{Name: "say", TaskName: "greet", Action: "exec", Status: "succeeded"}, {Name: "two", TaskName: "greet", Action: "exec", Status: "succeeded"}}})
		if err != nil {
			t.Fatal(err)
		}
		lr, err := st.CreateLineRun(ctx, store.LineRun{LineName: "sum", Status: "succeeded", CreatedAt: now,
			Trigger:   store.TriggerSummary{Source: "webhook", Payload: map[string]any{"body": map[string]any{"big": "payload"}, "path": "p"}},
			RunParams: map[string]any{"who": "you"}})
		if err != nil {
			t.Fatal(err)
		}
		get := func(path string) []map[string]any {
			t.Helper()
			r := h.do(req{method: "GET", path: path, scope: ScopeRead})
			expect(t, r, http.StatusOK)
			return r.list(t)
		}
		for _, c := range []struct {
			path, id string
			dropped  func(m map[string]any) []string // which members the summary leaves out an item has
			all      int
		}{
			{"/jobs/hello/runs", jr.ID, jobDropped, 2},
			{"/job-runs", jr.ID, jobDropped, 2},
			{"/factory/lines/sum/runs", lr.ID, lineDropped, 1},
			{"/factory/line-runs", lr.ID, lineDropped, 1},
		} {
			full, summary := get(c.path), get(c.path+"?fields=summary")
			if len(full) != 1 || len(summary) != 1 || full[0]["id"] != c.id || summary[0]["id"] != c.id {
				t.Fatalf("%s: %v / %v", c.path, full, summary)
			}
			if got := c.dropped(full[0]); len(got) != c.all {
				t.Fatalf("%s: the default item has only %v: %v", c.path, got, full[0])
			}
			if got := c.dropped(summary[0]); len(got) != 0 {
				t.Fatalf("%s: the summary item keeps %v: %v", c.path, got, summary[0])
			}
			// Everything else is the same.
			for k, v := range full[0] {
				if k == "step_timeline" || k == "result_payload" || k == "trigger" {
					continue
				}
				if _, ok := summary[0][k]; !ok {
					t.Fatalf("%s: the summary lacks %s (%v)", c.path, k, v)
				}
			}
			if !strings.Contains(c.path, "line") && len(summary[0]) != len(full[0])-2 {
				t.Fatalf("%s: the summary has %d members, the full item %d", c.path, len(summary[0]), len(full[0]))
			}
		}
		expectDetail(t, h.do(req{method: "GET", path: "/job-runs?fields=everything", scope: ScopeRead}), "query", "fields")
		expectDetail(t, h.do(req{method: "GET", path: "/factory/lines/sum/runs?fields=timeline", scope: ScopeRead}), "query", "fields")
		expectDetail(t, h.do(req{method: "GET", path: "/jobs/hello/runs?fields=summary&fields=summary", scope: ScopeRead}), "query", "fields")
	})
}

// jobDropped answers which of the members a summary leaves out a job run
// item has.
func jobDropped(m map[string]any) []string {
	return present(m, "step_timeline", "result_payload")
}

// lineDropped answers whether a line run item has its trigger's payload
// (the trigger itself stays).
func lineDropped(m map[string]any) []string {
	trig, _ := m["trigger"].(map[string]any)
	if trig == nil || trig["source"] != "webhook" {
		panic("a line run item without its trigger")
	}
	return present(trig, "payload")
}

func present(m map[string]any, keys ...string) []string {
	var out []string
	for _, k := range keys {
		if _, ok := m[k]; ok {
			out = append(out, k)
		}
	}
	return out
}
