package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/linefactory/linefactory/manifests/run"
)

// TestRecordChainHistories records the histories of a job run that
// continued as new (workflows/testdata/histories/jobrun-chain-<n>.json, one
// per Temporal run of the chain), which workflows' replay test checks the
// code against. The factoryd under test runs 2 steps per Temporal run
// (FACTORYD_E2E_STEPS_PER_RUN) so the chain is short: 2 tasks of 3 steps,
// in order, make 3 runs. It runs only with FACTORY_RECORD_HISTORIES=1 and
// leaves the other recorded histories alone.
func TestRecordChainHistories(t *testing.T) {
	if os.Getenv("FACTORY_RECORD_HISTORIES") != "1" {
		t.Skip("set FACTORY_RECORD_HISTORIES=1 to record workflow histories for the replay test")
	}
	env := append(robustEnv(t, t.TempDir()), "FACTORY_SANDBOX_ISOLATION=none", "FACTORYD_E2E_STEPS_PER_RUN=2")
	d := startDaemon(t, t.TempDir(), env)
	c := temporalClient(t, d)
	manifest := "[job]\nname = \"chain\"\n[outputs.n]\ntype = \"array\"\nitems = \"string\"\nreduce = \"gather\"\n"
	for task := range 2 {
		manifest += fmt.Sprintf("[[run.tasks]]\nname = \"t%d\"\n", task)
		for step := range 3 {
			manifest += fmt.Sprintf("[[run.tasks.steps]]\nname = \"s%d\"\nexec = [\"sh\", \"-c\", \"echo 'n=[\\\"%d.%d\\\"]' >> $SVC_OUTPUT\"]\noutputs = [\"n\"]\n", step, task, step)
		}
	}
	d.deploy("chain", manifest)
	id := d.start("chain", nil)
	if got := d.wait(id, 3*time.Minute); got["status"] != string(run.Succeeded) {
		t.Fatalf("job run %s: %v %v", id, got["status"], got["error_message"])
	}
	runIDs := chainRunIDs(t, c, run.JobRunWorkflowID(id))
	if len(runIDs) != 3 {
		t.Fatalf("%d Temporal runs, want 3", len(runIDs))
	}
	dir := filepath.Join("..", "..", "workflows", "testdata", "histories")
	for i, runID := range runIDs {
		saveRunHistory(t, c, run.JobRunWorkflowID(id), runID, filepath.Join(dir, fmt.Sprintf("jobrun-chain-%d.json", i+1)))
	}
}

// chainRunIDs is the run ids of a workflow's chain of runs, first first.
func chainRunIDs(t *testing.T, c client.Client, workflowID string) []string {
	t.Helper()
	desc, err := c.DescribeWorkflowExecution(context.Background(), workflowID, "")
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()}
	for {
		it := c.GetWorkflowHistory(context.Background(), workflowID, ids[0], false, 0)
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		prev := ev.GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
		if prev == "" {
			return ids
		}
		ids = append([]string{prev}, ids...)
	}
}

// TestEndToEndChainStopAndTimeout: a stop and run.timeout reach a job run
// after it continued as new (2 steps per Temporal run here): the stopped
// run ends cancelled, the other timed_out at its deadline counted from the
// chain's first run, and the record of each has the chain's steps.
func TestEndToEndChainStopAndTimeout(t *testing.T) {
	env := append(robustEnv(t, t.TempDir()), "FACTORY_SANDBOX_ISOLATION=none", "FACTORYD_E2E_STEPS_PER_RUN=2")
	d := startDaemon(t, t.TempDir(), env)
	c := temporalClient(t, d)
	job := func(name, timeout string) string {
		m := fmt.Sprintf("[job]\nname = %q\n[run]\ntimeout = %q\n[[run.tasks]]\nname = \"t\"\n", name, timeout)
		for i := range 30 {
			m += fmt.Sprintf("[[run.tasks.steps]]\nname = \"s%d\"\nexec = [\"sleep\", \"1\"]\n", i)
		}
		return m
	}
	d.deploy("stopme", job("stopme", "10m"))
	d.deploy("timeme", job("timeme", "6s"))
	stopID, timeID := d.start("stopme", nil), d.start("timeme", nil)

	// Stop once the run is in its third Temporal run.
	waitFor(t, "the third Temporal run", 2*time.Minute, func() map[string]any {
		return map[string]any{"runs": len(chainRunIDs(t, c, run.JobRunWorkflowID(stopID)))}
	}, func(m map[string]any) bool { return m["runs"].(int) >= 3 })
	if code, m := d.call("POST", "/jobs/stopme/runs/"+stopID+"/stop", "application/json", []byte(`{}`)); code != 202 {
		t.Fatalf("stop: %d %v", code, m)
	}
	stopped := d.wait(stopID, time.Minute)
	timed := d.wait(timeID, 2*time.Minute)
	t.Logf("stopped: %v after %d Temporal runs; timed out: %v %v after %d runs", stopped["status"],
		len(chainRunIDs(t, c, run.JobRunWorkflowID(stopID))), timed["status"], timed["error_message"], len(chainRunIDs(t, c, run.JobRunWorkflowID(timeID))))
	if stopped["status"] != string(run.Cancelled) {
		t.Fatalf("stopped run: %v %v", stopped["status"], stopped["error_message"])
	}
	if timed["status"] != string(run.TimedOut) || len(chainRunIDs(t, c, run.JobRunWorkflowID(timeID))) < 2 {
		t.Fatalf("timed run: %v %v", timed["status"], timed["error_message"])
	}
	// 30 steps of a second do not fit 20 s: the deadline held across runs.
	started, _ := time.Parse(time.RFC3339Nano, timed["started_at"].(string))
	completed, _ := time.Parse(time.RFC3339Nano, timed["completed_at"].(string))
	if took := completed.Sub(started); took > 20*time.Second {
		t.Fatalf("the timed run ended %s after it started, its timeout is 6s", took)
	}
}
