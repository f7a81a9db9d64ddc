package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/linefactory/linefactory/cmd/internal/embedded"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/workflows"
)

const loopJob = `[job]
name = "inc"
[job.params.label]
type = "string"
default = "x"
[run.sandbox]
mode = "ensure"
name = "counter"
image = "local"
[[run.tasks]]
name = "t"
[[run.tasks.steps]]
exec = ["sh", "-c", "sleep 0.3; n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n; echo n=$n >> $SVC_OUTPUT"]
outputs = ["n"]
[outputs.n]
type = "integer"
`

const greetJob = `[job]
name = "greet"
[job.params.who]
type = "string"
default = "world"
[[run.tasks]]
name = "t"
[[run.tasks.steps]]
exec = ["sh", "-c", "echo greeting=hello-{{who}} >> $SVC_OUTPUT"]
outputs = ["greeting"]
[outputs.greeting]
type = "string"
`

const loopLine = `[line]
name = "loop"
[trigger]
type = "manual"
[[stages]]
id = "start"
job = "greet"
[[stages]]
id = "inc"
job = "inc"
[[stages]]
id = "end"
job = "greet"
[[transitions]]
type = "conditional"
id = "go"
from = "start"
to = "inc"
when = { op = "eq", left = { type = "stage", path = "status" }, right = { type = "literal", value = "succeeded" } }
[[transitions]]
type = "conditional"
id = "again"
from = "inc"
to = "inc"
max_iterations = 5
when = { op = "ne", left = { type = "stage", path = "outputs.n" }, right = { type = "literal", value = 3 } }
[[transitions]]
type = "conditional"
id = "done"
from = "inc"
to = "end"
when = { op = "eq", left = { type = "stage", path = "outputs.n" }, right = { type = "literal", value = 3 } }
params = { who = { type = "output", stage = "start", name = "greeting" } }
`

func (d *daemon) waitLine(id string, limit time.Duration) map[string]any {
	d.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		_, m := d.call("GET", "/factory/line-runs/"+id, "", nil)
		switch m["status"] {
		case "succeeded", "failed", "cancelled":
			return m
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("line run %s still %v after %s", id, m["status"], limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestEndToEndLineRun(t *testing.T) {
	d := startDaemon(t, t.TempDir(), nil)
	d.deploy("inc", loopJob)
	d.deploy("greet", greetJob)
	d.deploy("sleepy", "[job]\nname = \"sleepy\"\n[[run.tasks]]\nname = \"t\"\n[[run.tasks.steps]]\nexec = [\"sh\", \"-c\", \"sleep 7654\"]\n")
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
	for {
		v, err := c.QueryWorkflow(ctx, run.LineRunWorkflowID(id), "", workflows.StateQuery)
		if err == nil && v.Get(&state) == nil && state["id"] == id && state["status"] == "running" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("state query never answered: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
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

	// A stopped line leaves no running job run or process.
	sleepLine := "[line]\nname = \"nap\"\n[trigger]\ntype = \"manual\"\n[[stages]]\nid = \"nap\"\njob = \"sleepy\"\n"
	if code, m := d.call("POST", "/factory/lines/nap/deploy", "application/toml", []byte(sleepLine)); code != 201 {
		t.Fatalf("deploy nap: %d %v", code, m)
	}
	_, m = d.call("POST", "/factory/lines/nap/runs", "application/json", nil)
	id = m["id"].(string)
	deadline := time.Now().Add(30 * time.Second)
	for len(processesWith("sleep 7654")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stage never started")
		}
		time.Sleep(50 * time.Millisecond)
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

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return strings.Trim(string(b), `"`)
}

func TestEndToEndScheduleFires(t *testing.T) {
	d := startDaemon(t, t.TempDir(), nil)
	d.deploy("greet", greetJob)
	line := "[line]\nname = \"daily\"\n[trigger]\ntype = \"schedule\"\ncron = \"0 3 * * *\"\ninputs = { who = \"cron\" }\n[[stages]]\nid = \"s\"\njob = \"greet\"\n"
	if code, m := d.call("POST", "/factory/lines/daily/deploy", "application/toml", []byte(line)); code != 201 {
		t.Fatalf("deploy: %d %v", code, m)
	}
	c := temporalClient(t, d)
	// Fire now instead of waiting for 03:00.
	if err := c.ScheduleClient().GetHandle(context.Background(), run.LineScheduleID("daily")).Trigger(context.Background(), client.ScheduleTriggerOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		runs := d.list("/factory/lines/daily/runs")
		if len(runs) == 1 && runs[0]["status"] == "succeeded" {
			if runs[0]["trigger"].(map[string]any)["source"] != "schedule" || runs[0]["run_params"].(map[string]any)["who"] != "cron" {
				t.Fatalf("scheduled run: %v", runs[0])
			}
			_, full := d.call("GET", "/factory/line-runs/"+runs[0]["id"].(string), "", nil)
			if full["stage_outputs"].(map[string]any)["s"].(map[string]any)["greeting"] != "hello-cron" {
				t.Fatalf("scheduled run outputs: %v", full["stage_outputs"])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scheduled run: %v", runs)
		}
		time.Sleep(200 * time.Millisecond)
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
	deadline := time.Now().Add(60 * time.Second)
	for {
		runs := d.list("/jobs/tick/runs")
		if len(runs) == 1 && runs[0]["status"] == "succeeded" {
			r := runs[0]
			if r["job_version_id"] != dep["id"] || r["run_params"].(map[string]any)["who"] != "cron" ||
				r["result_payload"].(map[string]any)["outputs"].(map[string]any)["greeting"] != "hello-cron" {
				t.Fatalf("scheduled run: %v", r)
			}
			break
		}
		if len(runs) > 1 || time.Now().After(deadline) {
			t.Fatalf("scheduled runs: %v", runs)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A version without [schedule] drops the Temporal Schedule.
	d.deploy("tick", strings.Replace(greetJob, `name = "greet"`, `name = "tick"`, 1))
	if _, err := h.Describe(context.Background()); err == nil {
		t.Fatal("the job schedule is still there after a version without [schedule]")
	}
}
