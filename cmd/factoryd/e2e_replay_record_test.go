package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/client"

	"github.com/linefactory/linefactory/manifests/manifesttest"
	"github.com/linefactory/linefactory/manifests/run"
)

// triageLine waits for a person's select: its agentic transition has no
// router on a server without a configuration file.
var triageLine = manifesttest.Line("triage-select")

// TestRecordReplayHistories records the histories workflows' replay test
// checks the code against: a job run, a line run with a loop, a line run
// that waits for a select, and a firing of a line schedule and of a job
// schedule. It runs only with FACTORY_RECORD_HISTORIES=1 and rewrites
// workflows/testdata/histories; record again only when a workflow change is
// versioned (workflow.GetVersion) or no run of the old code can be in
// flight. Histories of code replaced by a versioned change are kept under
// their own names (schedulefire-*-v0.json: the firings before
// admit-in-activity, recorded from that code; jobrun-greet-v0.json: a job
// run before jobrun-local-sandbox).
func TestRecordReplayHistories(t *testing.T) {
	if os.Getenv("FACTORY_RECORD_HISTORIES") != "1" {
		t.Skip("set FACTORY_RECORD_HISTORIES=1 to record workflow histories for the replay test")
	}
	d := startDaemon(t, t.TempDir(), nil)
	c := temporalClient(t, d)
	dir := filepath.Join("..", "..", "workflows", "testdata", "histories")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	d.deploy("greet", greetJob)
	d.deploy("inc", loopJob)

	jr := d.start("greet", map[string]any{"who": "replay"})
	if got := d.wait(jr, 2*time.Minute)["status"]; got != string(run.Succeeded) {
		t.Fatalf("job run %s: %v", jr, got)
	}
	saveHistory(t, c, run.JobRunWorkflowID(jr), filepath.Join(dir, "jobrun-greet.json"))

	loop := d.startLine("loop", loopLine)
	if got := d.waitLine(loop, 3*time.Minute)["status"]; got != string(run.Succeeded) {
		t.Fatalf("loop line run %s: %v", loop, got)
	}
	saveHistory(t, c, run.LineRunWorkflowID(loop), filepath.Join(dir, "linerun-loop.json"))

	sel := d.startLine("triage", triageLine)
	d.routingWaitStatus(sel, string(run.Waiting), 2*time.Minute)
	body, _ := json.Marshal(map[string]any{"action": "select", "transition_id": "decide", "option": "close"})
	if code, m := d.call("POST", "/factory/line-runs/"+sel+"/control", "application/json", body); code != 202 {
		t.Fatalf("select: %d %v", code, m)
	}
	if got := d.waitLine(sel, 2*time.Minute)["status"]; got != string(run.Succeeded) {
		t.Fatalf("triage line run %s: %v", sel, got)
	}
	saveHistory(t, c, run.LineRunWorkflowID(sel), filepath.Join(dir, "linerun-select.json"))
	recordFirings(t, d, c, dir)
}

// recordFirings fires a line's and a job's schedule now and records the
// firing workflows once their runs succeeded.
func recordFirings(t *testing.T, d *daemon, c client.Client, dir string) {
	line := "[line]\nname = \"daily\"\n[trigger]\ntype = \"schedule\"\ncron = \"0 3 * * *\"\ninputs = { who = \"cron\" }\n[[stages]]\nid = \"s\"\njob = \"greet\"\n"
	if code, m := d.call("POST", "/factory/lines/daily/deploy", "application/toml", []byte(line)); code != 201 {
		t.Fatalf("deploy: %d %v", code, m)
	}
	d.deploy("tick", strings.Replace(greetJob, `name = "greet"`, `name = "tick"`, 1)+"[schedule]\ncron = \"0 3 * * *\"\n")
	for _, f := range []struct{ schedule, runs, file string }{
		{run.LineScheduleID("daily"), "/factory/lines/daily/runs", "schedulefire-line.json"},
		{run.JobScheduleID("tick"), "/jobs/tick/runs", "schedulefire-job.json"},
	} {
		h := c.ScheduleClient().GetHandle(context.Background(), f.schedule)
		if err := h.Trigger(context.Background(), client.ScheduleTriggerOptions{}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			if runs := d.list(f.runs); len(runs) == 1 && runs[0]["status"] == string(run.Succeeded) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no scheduled run of %s: %v", f.schedule, d.list(f.runs))
			}
			time.Sleep(100 * time.Millisecond)
		}
		desc, err := h.Describe(context.Background())
		if err != nil || len(desc.Info.RecentActions) != 1 {
			t.Fatalf("schedule %s: %v %+v", f.schedule, err, desc)
		}
		id := desc.Info.RecentActions[0].StartWorkflowResult.WorkflowID
		for {
			ex, err := c.DescribeWorkflowExecution(context.Background(), id, "")
			if err == nil && ex.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("firing %s did not close: %v", id, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		saveHistory(t, c, id, filepath.Join(dir, f.file))
	}
}

// startLine deploys a line and starts a run of it.
func (d *daemon) startLine(name, manifest string) string {
	d.t.Helper()
	if code, m := d.call("POST", "/factory/lines/"+name+"/deploy", "application/toml", []byte(manifest)); code != 201 && code != 200 {
		d.t.Fatalf("deploy line %s: %d %v", name, code, m)
	}
	code, m := d.call("POST", "/factory/lines/"+name+"/runs", "application/json", []byte(`{}`))
	if code != 201 {
		d.t.Fatalf("start line %s: %d %v", name, code, m)
	}
	return m["id"].(string)
}

// saveHistory writes a workflow's whole history (every run of it) as the
// JSON the replayer reads.
func saveHistory(t *testing.T, c client.Client, workflowID, file string) {
	t.Helper()
	saveRunHistory(t, c, workflowID, "", file)
}

// saveRunHistory writes one run's history (runID "": the latest).
func saveRunHistory(t *testing.T, c client.Client, workflowID, runID, file string) {
	t.Helper()
	it := c.GetWorkflowHistory(context.Background(), workflowID, runID, false, 0)
	hist := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		hist.Events = append(hist.Events, ev)
	}
	data, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(hist)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %s: %d events", file, len(hist.Events))
}
