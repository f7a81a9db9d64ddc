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
