package main

// End to end: the longest job the deploy limits allow runs to the end.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/linefactory/linefactory/manifests/run"
)

// longJob is a job of tasks × perTask steps that each run `true`; its
// tasks run side by side, concurrency at a time.
func longJob(name string, tasks, perTask, concurrency int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[job]\nname = %q\n[run]\nfanout = true\nconcurrency = %d\n", name, concurrency)
	for t := range tasks {
		fmt.Fprintf(&b, "[[run.tasks]]\nname = \"t%d\"\n", t)
		for i := range perTask {
			fmt.Fprintf(&b, "[[run.tasks.steps]]\nname = \"s%d\"\nexec = [\"true\"]\n", i)
		}
	}
	return b.String()
}

// getRaw GETs path and returns its status and body.
func (d *daemon) getRaw(path string) (int, []byte) {
	d.t.Helper()
	req, _ := http.NewRequest("GET", d.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+e2eToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// chainOf follows a workflow's chain of runs back from its latest (each
// run's first event names the run it continued) and returns the number of
// history events of each run, first run first.
func chainOf(t *testing.T, c client.Client, workflowID string) []int {
	t.Helper()
	var events []int
	for runID := ""; ; {
		it := c.GetWorkflowHistory(context.Background(), workflowID, runID, false, 0)
		n, prev := 0, ""
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				prev = ev.GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
			}
			n++
		}
		events = append(events, n)
		if prev == "" {
			slices.Reverse(events)
			return events
		}
		runID = prev
	}
}

// TestEndToEndLongJob: a job of 5,000 steps (the per-job limit) succeeds
// in a chain of Temporal runs (it continues as new every 500 steps), its
// timeline holds 5,000 succeeded entries, and the run's GET and the run
// lists stay usable.
func TestEndToEndLongJob(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIPPING: a 5,000-step job takes minutes (-short)")
	}
	// Ten tasks of 500, four at a time, so the run crosses task
	// boundaries. Measured on a loaded 2-core machine: 8m53s (9.4 steps/s)
	// when a step's update rewrote the whole timeline in the run's
	// document (two thirds of factoryd's CPU, quadratic in the steps);
	// 1m17s (65 steps/s) with one row per step and summary lists that do
	// not read the timelines. The run continues as new every 500 steps
	// (10 Temporal runs of ~2,800 events each). The wait allows for a
	// loaded machine.
	const tasks, perTask = 10, 500
	const steps = tasks * perTask
	env := append(robustEnv(t, t.TempDir()), "FACTORY_SANDBOX_ISOLATION=none")
	d := startDaemon(t, t.TempDir(), env)
	manifest := longJob("long", tasks, perTask, 4)
	t.Logf("manifest: %d bytes, %d steps", len(manifest), steps)
	d.deploy("long", manifest)
	began := time.Now()
	id := d.start("long", nil)
	// Polled through the summary list: the full run is a megabyte.
	got := waitFor(t, "the long run", 45*time.Minute, func() map[string]any {
		for _, r := range d.list("/jobs/long/runs?fields=summary") {
			if r["id"] == id {
				return r
			}
		}
		return nil
	}, func(m map[string]any) bool {
		switch m["status"] {
		case "succeeded", "failed", "cancelled", "timed_out":
			return true
		}
		return false
	})
	took := time.Since(began)
	t.Logf("%d steps: %v in %s (%.1f steps/s)", steps, got["status"], took.Round(time.Second), float64(steps)/took.Seconds())
	if got["status"] != "succeeded" {
		t.Fatalf("run %s: %v %v %v", id, got["status"], got["error_code"], got["error_message"])
	}
	// The run continued as new between steps: a chain of Temporal runs
	// under one workflow ID, none of them near the history limit.
	runs := chainOf(t, temporalClient(t, d), run.JobRunWorkflowID(id))
	t.Logf("%d Temporal runs of %s: %v events", len(runs), run.JobRunWorkflowID(id), runs)
	if len(runs) < steps/1000 {
		t.Fatalf("%d Temporal runs for %d steps: the run did not continue as new", len(runs), steps)
	}
	for _, n := range runs {
		if n > 10000 {
			t.Fatalf("a Temporal run of %d events (runs %v)", n, runs)
		}
	}

	code, body := d.getRaw("/job-runs/" + id)
	if code != 200 {
		t.Fatalf("GET run: %d %s", code, body)
	}
	var full struct {
		StepTimeline []struct {
			Name     string `json:"name"`
			TaskName string `json:"task_name"`
			Status   string `json:"status"`
		} `json:"step_timeline"`
	}
	if err := json.Unmarshal(body, &full); err != nil {
		t.Fatal(err)
	}
	succeeded := 0
	seen := map[string]bool{}
	for _, e := range full.StepTimeline {
		if key := e.TaskName + "/" + e.Name; e.Status == "succeeded" && !seen[key] {
			succeeded++
			seen[key] = true
		}
	}
	if succeeded != steps {
		t.Fatalf("timeline: %d distinct succeeded steps of %d entries, want %d", succeeded, len(full.StepTimeline), steps)
	}
	t.Logf("GET /job-runs/{id}: %d bytes", len(body))
	// The full run is big (every step has its entry), but bounded: well
	// under the request body limit a client would expect of one record.
	if len(body) > 4<<20 {
		t.Fatalf("GET /job-runs/{id}: %d bytes", len(body))
	}
	for _, path := range []string{"/jobs/long/runs", "/job-runs", "/jobs/long/runs?fields=summary", "/job-runs?fields=summary"} {
		began := time.Now()
		code, body := d.getRaw(path)
		t.Logf("GET %s: %d, %d bytes in %s", path, code, len(body), time.Since(began).Round(time.Millisecond))
		if code != 200 {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		var list []map[string]any
		if err := json.Unmarshal(body, &list); err != nil || len(list) != 1 || list[0]["id"] != id {
			t.Fatalf("GET %s: %v %v", path, err, list)
		}
		if strings.HasSuffix(path, "summary") && len(body) > 16<<10 {
			t.Fatalf("GET %s: %d bytes for one run", path, len(body))
		}
	}
}
