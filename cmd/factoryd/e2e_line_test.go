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
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/linefactory/linefactory/cmd/internal/embedded"
	"github.com/linefactory/linefactory/internal/testwait"
	"github.com/linefactory/linefactory/manifests/manifesttest"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/workflows"
)

var loopJob = manifesttest.Job("inc-labelled")

var greetJob = manifesttest.Job("greet")

var loopLine = manifesttest.Line("loop")

func (d *daemon) waitLine(id string, limit time.Duration) map[string]any {
	d.t.Helper()
	var m map[string]any
	if !testwait.UntilEvery(limit, 100*time.Millisecond, func() bool {
		_, m = d.call("GET", "/factory/line-runs/"+id, "", nil)
		switch m["status"] {
		case "succeeded", "failed", "cancelled":
			return true
		}
		return false
	}) {
		d.t.Fatalf("line run %s still %v after %s", id, m["status"], limit)
	}
	return m
}

func TestEndToEndLineRun(t *testing.T) {
	d := startDaemon(t, t.TempDir(), nil)
	d.deploy("inc", loopJob)
	d.deploy("greet", greetJob)
	d.deploy("sleepy", manifesttest.OneStepJob("sleepy", "", `["sh", "-c", "sleep 7654"]`))
	if code, m := d.call("POST", "/factory/lines/loop/deploy", "application/toml", []byte(loopLine)); code != 201 {
		t.Fatalf("deploy line: %d %v", code, m)
	}
	code, m := d.call("POST", "/factory/lines/loop/runs", "application/json", []byte(`{"params":{"who":"line"}}`))
	if code != 201 {
		t.Fatalf("start: %d %v", code, m)
	}
	id := m["id"].(string)

	// The manager's state query answers mid-run.
	c := temporalClient(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var state map[string]any
	var err error
	if !testwait.UntilEvery(30*time.Second, 50*time.Millisecond, func() bool {
		var v converter.EncodedValue
		v, err = c.QueryWorkflow(ctx, run.LineRunWorkflowID(id), "", workflows.StateQuery)
		return err == nil && v.Get(&state) == nil && state["id"] == id && state["status"] == "running"
	}) {
		t.Fatalf("state query never answered: %v", err)
	}

	// The query and GET agree, allowing for progress between the calls.
	_, mid := d.call("GET", "/factory/line-runs/"+id, "", nil)
	for _, k := range []string{"id", "line_name", "line_version_id", "trigger", "triggered_by_actor", "run_params", "created_at", "workflow_id"} {
		if jsonString(state[k]) != jsonString(mid[k]) {
			t.Fatalf("state query %s = %v, GET has %v", k, state[k], mid[k])
		}
	}
	// Mid-run the query holds this manager turn's visits and turn.
	qStages, gStages := state["stages"].([]any), mid["stages"].([]any)
	if len(qStages) > len(gStages) || len(state["manager_turns"].([]any)) > len(mid["manager_turns"].([]any)) {
		t.Fatalf("the query is ahead of the record: %v / %v", qStages, gStages)
	}
	byJobRun := map[any]map[string]any{}
	for _, s := range gStages {
		byJobRun[s.(map[string]any)["job_run_id"]] = s.(map[string]any)
	}
	for i, s := range qStages {
		q := s.(map[string]any)
		g := byJobRun[q["job_run_id"]]
		if g == nil || q["stage_name"] != g["stage_name"] || q["iteration"] != g["iteration"] {
			t.Fatalf("stage %d: query %v, GET %v", i, q, g)
		}
	}

	final := d.waitLine(id, 2*time.Minute)
	if final["status"] != "succeeded" {
		b, _ := json.MarshalIndent(final, "", " ")
		t.Fatalf("line run: %s", b)
	}
	// At the end the query answers with the final record, field by field.
	v, err := c.QueryWorkflow(ctx, run.LineRunWorkflowID(id), "", workflows.StateQuery)
	if err != nil || v.Get(&state) != nil {
		t.Fatalf("final state query: %v", err)
	}
	for k, want := range final {
		if jsonString(state[k]) != jsonString(want) {
			t.Errorf("final state query %s = %v, GET has %v", k, jsonString(state[k]), jsonString(want))
		}
	}
	if final["trigger"].(map[string]any)["source"] != "manual" || final["triggered_by_actor"].(map[string]any)["name"] == nil ||
		!strings.HasPrefix(jsonString(final["line_version_id"]), "lv_") {
		t.Fatalf("trigger %v actor %v version %v", final["trigger"], final["triggered_by_actor"], final["line_version_id"])
	}
	for i, tr := range final["manager_turns"].([]any) {
		tr := tr.(map[string]any)
		want := "continued" // the turns share one Temporal run
		if i == 4 {
			want = "completed"
		}
		if tr["workflow_run_id"] == "" || tr["workflow_run_id"] == nil || tr["state"] != want || tr["started_at"] == nil {
			t.Fatalf("manager turn %d: %v", i, tr)
		}
	}
	var stageCost float64
	for _, s := range final["stages"].([]any) {
		s := s.(map[string]any)
		if s["status"] != "succeeded" || s["total_cost_cents"].(float64) < 1 || s["cost_rated_at"] == nil || s["started_at"] == nil || s["completed_at"] == nil {
			t.Fatalf("stage costs/times: %v", s)
		}
		stageCost += s["total_cost_cents"].(float64)
	}
	if stageCost != final["total_cost_cents"].(float64) || final["compute_cost_cents"].(float64)+final["inference_cost_cents"].(float64) != stageCost {
		t.Fatalf("line costs %v/%v/%v, stages sum to %v", final["compute_cost_cents"], final["inference_cost_cents"], final["total_cost_cents"], stageCost)
	}
	var got []string
	for _, s := range final["stages"].([]any) {
		s := s.(map[string]any)
		got = append(got, s["stage_name"].(string)+"#"+jsonString(s["iteration"])+":"+jsonString(s["outcome"]))
	}
	if want := "start#1:go inc#1:again inc#2:again inc#3:done end#1:null"; strings.Join(got, " ") != want {
		t.Fatalf("stages %v, want %s", got, want)
	}
	if turns := final["manager_turns"].([]any); len(turns) != 5 {
		t.Fatalf("manager turns: %v", turns)
	}
	if out := final["stage_outputs"].(map[string]any)["end"].(map[string]any); out["greeting"] != "hello-hello-line" {
		t.Fatalf("end stage outputs %v", out)
	}
	if final["total_cost_cents"].(float64) < 5 || final["cost_rated_at"] == nil {
		t.Fatalf("costs: %v %v", final["total_cost_cents"], final["cost_rated_at"])
	}
	// Runs started by this code take the versioned changes from their input:
	// no version marker, no TemporalChangeVersion update (a visibility write).
	firstJobRun := final["stages"].([]any)[0].(map[string]any)["job_run_id"].(string)
	for _, wfID := range []string{run.LineRunWorkflowID(id), run.JobRunWorkflowID(firstJobRun)} {
		if n := versionRecords(t, c, wfID); n != 0 {
			t.Fatalf("%s recorded %d version markers or change-version updates, want none", wfID, n)
		}
	}

	// A stopped line leaves no running job run or process.
	sleepLine := manifesttest.OneStageLine("nap", manifesttest.Manual, "nap", "sleepy")
	if code, m := d.call("POST", "/factory/lines/nap/deploy", "application/toml", []byte(sleepLine)); code != 201 {
		t.Fatalf("deploy nap: %d %v", code, m)
	}
	_, m = d.call("POST", "/factory/lines/nap/runs", "application/json", nil)
	id = m["id"].(string)
	if !testwait.UntilEvery(30*time.Second, 50*time.Millisecond, func() bool { return len(processesWith("sleep 7654")) > 0 }) {
		t.Fatal("the stage never started")
	}
	if code, m := d.call("POST", "/factory/line-runs/"+id+"/stop", "application/json", []byte(`{"reason":"e2e stop"}`)); code != 202 {
		t.Fatalf("stop: %d %v", code, m)
	}
	final = d.waitLine(id, 30*time.Second)
	failure := final["failure"].(map[string]any)
	if final["status"] != "cancelled" || failure["code"] != "user_cancelled" || failure["domain"] != "user" || !strings.Contains(final["error_message"].(string), "e2e stop") {
		t.Fatalf("stopped line: %v", final)
	}
	jobRunID := final["stages"].([]any)[0].(map[string]any)["job_run_id"].(string)
	_, jr := d.call("GET", "/job-runs/"+jobRunID, "", nil)
	if jr["status"] != "cancelled" {
		t.Fatalf("the stage's job run is %v", jr["status"])
	}
	if left := processesWith("sleep 7654"); len(left) > 0 {
		t.Fatalf("processes left: %v", left)
	}
}

// versionRecords counts the workflow.GetVersion markers and
// TemporalChangeVersion search attribute updates in a workflow's history
// (every run of its chain).
func versionRecords(t *testing.T, c client.Client, wfID string) int {
	t.Helper()
	n, events := 0, 0
	it := c.GetWorkflowHistory(context.Background(), wfID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		events++
		if m := e.GetMarkerRecordedEventAttributes(); m != nil && m.MarkerName == "Version" {
			n++
		}
		if u := e.GetUpsertWorkflowSearchAttributesEventAttributes(); u != nil && u.SearchAttributes.GetIndexedFields()["TemporalChangeVersion"] != nil {
			n++
		}
	}
	if events == 0 {
		t.Fatalf("%s has no history", wfID)
	}
	return n
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return strings.Trim(string(b), `"`)
}

func TestEndToEndScheduleFires(t *testing.T) {
	d := startDaemon(t, t.TempDir(), nil)
	d.deploy("greet", greetJob)
	line := manifesttest.OneStageLine("daily", "type = \"schedule\"\ncron = \"0 3 * * *\"\ninputs = { who = \"cron\" }", "s", "greet")
	if code, m := d.call("POST", "/factory/lines/daily/deploy", "application/toml", []byte(line)); code != 201 {
		t.Fatalf("deploy: %d %v", code, m)
	}
	c := temporalClient(t, d)
	// Fire now instead of waiting for 03:00.
	if err := c.ScheduleClient().GetHandle(context.Background(), run.LineScheduleID("daily")).Trigger(context.Background(), client.ScheduleTriggerOptions{}); err != nil {
		t.Fatal(err)
	}
	var runs []map[string]any
	if !testwait.UntilEvery(60*time.Second, 200*time.Millisecond, func() bool {
		runs = d.list("/factory/lines/daily/runs")
		return len(runs) == 1 && runs[0]["status"] == "succeeded"
	}) {
		t.Fatalf("no scheduled run: %v", runs)
	}
	if runs[0]["trigger"].(map[string]any)["source"] != "schedule" || runs[0]["run_params"].(map[string]any)["who"] != "cron" {
		t.Fatalf("scheduled run: %v", runs[0])
	}
	_, full := d.call("GET", "/factory/line-runs/"+runs[0]["id"].(string), "", nil)
	if full["stage_outputs"].(map[string]any)["s"].(map[string]any)["greeting"] != "hello-cron" {
		t.Fatalf("scheduled run outputs: %v", full["stage_outputs"])
	}
}

// temporalClient dials the daemon's embedded Temporal with the key of its
// start (from the key file in its data directory).
func temporalClient(t testing.TB, d *daemon) client.Client {
	t.Helper()
	var port, dataDir string
	for _, kv := range d.env {
		if v, ok := strings.CutPrefix(kv, "FACTORY_TEMPORAL_PORT="); ok {
			port = v
		}
		if v, ok := strings.CutPrefix(kv, "FACTORY_DATA_DIR="); ok {
			dataDir = v
		}
	}
	key, err := os.ReadFile(filepath.Join(dataDir, "temporal", embedded.APIKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(client.Options{HostPort: "127.0.0.1:" + port, Namespace: "default",
		Credentials: client.NewAPIKeyStaticCredentials(strings.TrimSpace(string(key))), ConnectionOptions: client.ConnectionOptions{TLSDisabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestEndToEndJobScheduleFires: a job version with [schedule] gets a Temporal
// Schedule, re-made for each new version; a firing runs the latest version
// with its params' defaults.
func TestEndToEndJobScheduleFires(t *testing.T) {
	d := startDaemon(t, t.TempDir(), nil)
	job := strings.Replace(greetJob, `name = "greet"`, `name = "tick"`, 1) + "[schedule]\ncron = \"0 3 * * *\"\n"
	d.deploy("tick", job)
	v2 := strings.Replace(job, "default = \"world\"", "default = \"cron\"", 1)
	code, dep := d.call("POST", "/jobs/tick/versions", "application/toml", []byte(v2))
	if code != 201 {
		t.Fatalf("deploy v2: %d %v", code, dep)
	}
	c := temporalClient(t, d)
	h := c.ScheduleClient().GetHandle(context.Background(), run.JobScheduleID("tick"))
	desc, err := h.Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if desc.Schedule.State.Paused {
		t.Fatal("the job schedule is paused")
	}
	// Fire now instead of waiting for 03:00.
	if err := h.Trigger(context.Background(), client.ScheduleTriggerOptions{}); err != nil {
		t.Fatal(err)
	}
	var runs []map[string]any
	if !testwait.UntilEvery(60*time.Second, 200*time.Millisecond, func() bool {
		runs = d.list("/jobs/tick/runs")
		return len(runs) > 1 || (len(runs) == 1 && runs[0]["status"] == "succeeded")
	}) || len(runs) > 1 {
		t.Fatalf("scheduled runs: %v", runs)
	}
	if r := runs[0]; r["job_version_id"] != dep["id"] || r["run_params"].(map[string]any)["who"] != "cron" ||
		r["result_payload"].(map[string]any)["outputs"].(map[string]any)["greeting"] != "hello-cron" {
		t.Fatalf("scheduled run: %v", r)
	}
	// A version without [schedule] drops the Temporal Schedule.
	d.deploy("tick", strings.Replace(greetJob, `name = "greet"`, `name = "tick"`, 1))
	if _, err := h.Describe(context.Background()); err == nil {
		t.Fatal("the job schedule is still there after a version without [schedule]")
	}
}
