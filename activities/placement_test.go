package activities

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/linefactory/linefactory/activities/sandbox"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/store/storetest"
)

// TestAcquireSandboxPlacement: the first worker to acquire a named sandbox
// holds it; another live worker is sent there (SANDBOX_ELSEWHERE); once the
// holder is gone an ensure fails as RESOURCE_UNAVAILABLE naming it, while a
// provision attempt of the same run's task takes the name over.
func TestAcquireSandboxPlacement(t *testing.T) {
	st := storetest.SQLite(t)
	ctx := context.Background()
	a, b := placedWorker(t, st, "w-a"), placedWorker(t, st, "w-b")
	errType := func(err error) string {
		var ae *temporal.ApplicationError
		if errors.As(err, &ae) {
			return ae.Type()
		}
		return ""
	}

	online := true
	ensure := AcquireSandboxInput{RunID: "jr_1", Task: "t", Params: map[string]any{},
		Config: &manifests.SandboxConfig{Mode: manifests.SandboxEnsure, Name: "box", Image: "debian:bookworm", InternetEnabled: &online}}
	res, err := a.AcquireSandbox(ctx, ensure)
	if err != nil || res.WorkerID != "w-a" || res.Queue != "linefactory/w-a" {
		t.Fatalf("first ensure: %+v %v", res, err)
	}
	_, err = b.AcquireSandbox(ctx, ensure)
	if errType(err) != ErrTypeSandboxElsewhere {
		t.Fatalf("ensure on another worker: %v, want %s", err, ErrTypeSandboxElsewhere)
	}
	var ae *temporal.ApplicationError
	var loc LocateSandboxResult
	if !errors.As(err, &ae) || ae.Details(&loc) != nil || loc.Queue != "linefactory/w-a" {
		t.Fatalf("the error does not carry the holder's queue: %+v", loc)
	}
	if _, err := b.Sandboxes.Get(ctx, "box"); sandbox.CodeOf(err) != sandbox.CodeNotFound {
		t.Fatalf("the other worker made the sandbox anyway: %v", err)
	}

	// w-a falls silent.
	now := st.Now
	st.Now = func() time.Time { return now().Add(-time.Hour) }
	if err := st.HeartbeatWorker(ctx, store.Worker{ID: "w-a", Queue: "linefactory/w-a", MaxSteps: 4}); err != nil {
		t.Fatal(err)
	}
	st.Now = now
	_, err = b.AcquireSandbox(ctx, ensure)
	if errType(err) != CodeWorkerGone || !strings.Contains(err.Error(), "w-a") {
		t.Fatalf("ensure of a sandbox on a gone worker: %v, want %s naming w-a", err, CodeWorkerGone)
	}

	provision := AcquireSandboxInput{RunID: "jr_2", Task: "t", Params: map[string]any{},
		Config: &manifests.SandboxConfig{Mode: manifests.SandboxProvision, Image: "debian:bookworm", InternetEnabled: &online}}
	name := ProvisionName("jr_2", 0)
	if _, err := st.PlaceSandbox(ctx, name, "w-a"); err != nil { // an attempt on w-a before it died
		t.Fatal(err)
	}
	res, err = b.AcquireSandbox(ctx, provision)
	if err != nil || res.Name != name || res.WorkerID != "w-b" {
		t.Fatalf("provision retried on another worker: %+v %v", res, err)
	}
	if holder, _ := st.SandboxWorker(ctx, name); holder != "w-b" {
		t.Fatalf("placement after the takeover: %q, want w-b", holder)
	}
	if err := b.TeardownSandbox(ctx, TeardownSandboxInput{Name: name}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SandboxWorker(ctx, name); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("placement after teardown: %v, want none", err)
	}
}

// TestTeardownHeld: a worker deletes the sandboxes it holds that the run
// provisioned and leaves those of other workers to them.
func TestTeardownHeld(t *testing.T) {
	st := storetest.SQLite(t)
	ctx := context.Background()
	a, b := placedWorker(t, st, "w-a"), placedWorker(t, st, "w-b")
	acquire := func(w *Activities, task int) AcquireSandboxResult {
		res, err := w.AcquireSandbox(ctx, AcquireSandboxInput{RunID: "jr_1", Task: "t", TaskIndex: task, Params: map[string]any{}})
		if err != nil || !res.Created {
			t.Fatalf("acquire: %+v %v", res, err)
		}
		return res
	}
	onA, onB := acquire(a, 0), acquire(b, 1)
	res, err := a.TeardownHeld(ctx, TeardownHeldInput{Sandboxes: []AcquireSandboxResult{onA, onB}, ProvisionedBy: "jr_1"})
	if err != nil || len(res.Left) != 1 || res.Left[0].Name != onB.Name {
		t.Fatalf("teardown on w-a: %+v %v, want %s left", res, err, onB.Name)
	}
	if _, err := a.Sandboxes.Get(ctx, onA.Name); sandbox.CodeOf(err) != sandbox.CodeNotFound {
		t.Fatalf("%s is still there: %v", onA.Name, err)
	}
	if _, err := st.SandboxWorker(ctx, onA.Name); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("placement of %s kept: %v", onA.Name, err)
	}
	if _, err := b.Sandboxes.Get(ctx, onB.Name); err != nil {
		t.Fatalf("%s on w-b was touched: %v", onB.Name, err)
	}
	// Another run's teardown leaves what it did not provision.
	res, err = b.TeardownHeld(ctx, TeardownHeldInput{Sandboxes: []AcquireSandboxResult{onB}, ProvisionedBy: "jr_2"})
	if err != nil || len(res.Left) != 0 {
		t.Fatalf("teardown by another run: %+v %v", res, err)
	}
	if _, err := b.Sandboxes.Get(ctx, onB.Name); err != nil {
		t.Fatalf("%s was deleted by a run that did not provision it: %v", onB.Name, err)
	}
}

// placedWorker is a live worker id with its own sandbox driver, placing
// sandboxes in st.
func placedWorker(t *testing.T, st *store.Store, id string) *Activities {
	drv, err := sandbox.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drv.Close) // its idle sandboxes' cgroups go with it
	if err := st.HeartbeatWorker(context.Background(), store.Worker{ID: id, Queue: WorkerQueue("linefactory", id), MaxSteps: 4}); err != nil {
		t.Fatal(err)
	}
	return &Activities{Store: &runStore{runs: map[string]store.JobRun{}}, Sandboxes: drv, Placements: st,
		Worker: Worker{ID: id, Queue: WorkerQueue("linefactory", id)}}
}

// TestAloneWorkerPlacement: the only worker (embedded Temporal) records no
// placement for its runs' provision sandboxes, which nothing routes to or
// looks for, making and tearing them down without those two store writes;
// a named ensure sandbox is recorded as on any worker.
func TestAloneWorkerPlacement(t *testing.T) {
	st := storetest.SQLite(t)
	ctx := context.Background()
	a := placedWorker(t, st, "w-a")
	a.Worker = Worker{ID: "w-a", Alone: true}
	online := true
	provision := AcquireSandboxInput{RunID: "jr_1", Task: "t", Params: map[string]any{},
		Config: &manifests.SandboxConfig{Mode: manifests.SandboxProvision, Image: "debian:bookworm", InternetEnabled: &online}}
	res, err := a.AcquireSandbox(ctx, provision)
	if err != nil || res.Name != ProvisionName("jr_1", 0) {
		t.Fatalf("provision: %+v %v", res, err)
	}
	if holder, err := st.SandboxWorker(ctx, res.Name); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the alone worker placed its provision sandbox on %q (%v)", holder, err)
	}
	m := manifests.JobManifest{Run: manifests.RunSection{Tasks: []manifests.Task{{Name: "t"}}}}
	a.teardown(ctx, FinishRunInput{RunID: "jr_1", Manifest: m, Sandboxes: []string{res.Name}})
	if _, err := a.Sandboxes.Get(ctx, res.Name); sandbox.CodeOf(err) != sandbox.CodeNotFound {
		t.Fatalf("the provision sandbox after teardown: %v", err)
	}

	ensure := AcquireSandboxInput{RunID: "jr_2", Task: "t", Params: map[string]any{},
		Config: &manifests.SandboxConfig{Mode: manifests.SandboxEnsure, Name: "box", Image: "debian:bookworm", InternetEnabled: &online}}
	if _, err := a.AcquireSandbox(ctx, ensure); err != nil {
		t.Fatal(err)
	}
	if holder, err := st.SandboxWorker(ctx, "box"); err != nil || holder != "w-a" {
		t.Fatalf("the ensure sandbox's placement: %q %v", holder, err)
	}
	if err := a.TeardownSandbox(ctx, TeardownSandboxInput{Name: "box"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SandboxWorker(ctx, "box"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("placement after teardown: %v, want none", err)
	}
}
