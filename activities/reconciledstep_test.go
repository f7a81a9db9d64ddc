package activities

import (
	"context"
	"testing"
	"time"

	"github.com/linefactory/linefactory/activities/sandbox"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// A step whose run the reconciler ended (its workflow was terminated) keeps
// the reconciler's outcome when its activity is cancelled afterwards:
// README "No run left behind", running steps are failed `unknown`; the
// step's late write made it `cancelled` before.
func TestCancelledStepKeepsReconciledOutcome(t *testing.T) {
	drv, err := sandbox.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drv.Close) // its idle sandboxes' cgroups go with it
	st := &runStore{runs: map[string]store.JobRun{"jr_1": {ID: "jr_1", Status: run.Queued}}}
	a := &Activities{Store: st, Sandboxes: drv, OutputDir: t.TempDir()}
	bg := context.Background()
	m := manifests.JobManifest{Run: manifests.RunSection{Tasks: []manifests.Task{{Name: "t", Steps: []manifests.Step{{Exec: []string{"sleep 30"}}}}}}}
	if err := a.StartRun(bg, StartRunInput{RunID: "jr_1", Manifest: m}); err != nil {
		t.Fatal(err)
	}
	sb, err := a.AcquireSandbox(bg, AcquireSandboxInput{RunID: "jr_1", Task: "t", Params: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() {
		_, err := a.RunStep(ctx, RunStepInput{RunID: "jr_1", Task: "t", Step: "step-1", Action: m.Run.Tasks[0].Steps[0], Sandbox: sb.Name})
		done <- err
	}()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if r, _ := st.GetJobRun(bg, "jr_1"); len(r.StepTimeline) == 1 && r.StepTimeline[0].Status == run.Running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the step never ran")
		}
	}
	lost := run.Fail(run.CodeUnknown, run.FailureClass(run.CodeUnknown), "the run's workflow was terminated in the workflow engine")
	if _, err := st.UpdateJobRun(bg, "jr_1", func(r *store.JobRun) error { r.EndUnfinished(lost, time.Now()); return nil }); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled step did not return")
	}
	r, _ := st.GetJobRun(bg, "jr_1")
	if e := r.StepTimeline[0]; e.Status != run.Failed || e.ErrorCode == nil || *e.ErrorCode != run.CodeUnknown {
		t.Fatalf("step after the reconciler and its cancellation: %s %v, want failed unknown", e.Status, e.ErrorCode)
	}
}
