package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/linefactory/linefactory/activities/sandbox"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// Sandbox affinity. A sandbox lives on the disk of the worker that made it;
// the store records which (a placement). Each worker polls, besides the
// shared task queue, a queue of its own (WorkerQueue), and the job run
// workflow sends every activity that uses a sandbox there. A worker is alive
// while it heartbeats its row in the store (WorkerHeartbeat); one silent for
// WorkerTTL is gone, and a sandbox on it fails its users clearly.

// WorkerHeartbeat is how often a worker records that it is alive.
const WorkerHeartbeat = 3 * time.Second

// WorkerTTL is how long a worker may stay silent before it counts as gone.
const WorkerTTL = 15 * time.Second

// ErrTypeSandboxElsewhere is the activity error type of an AcquireSandbox
// that reached a worker other than the one holding the sandbox (its
// placement was made meanwhile): the workflow routes it again.
const ErrTypeSandboxElsewhere = "SANDBOX_ELSEWHERE"

// CodeWorkerGone is the error code of a task whose sandbox's worker is gone.
const CodeWorkerGone = "RESOURCE_UNAVAILABLE"

// WorkerQueue is the task queue only the worker id polls.
func WorkerQueue(sharedQueue, workerID string) string { return sharedQueue + "/" + workerID }

// Placements is what sandbox affinity needs of the store.
type Placements interface {
	GetWorker(ctx context.Context, id string) (store.Worker, error)
	PlaceSandbox(ctx context.Context, name, workerID string) (string, error)
	MoveSandbox(ctx context.Context, name, from, to string) (bool, error)
	SandboxWorker(ctx context.Context, name string) (string, error)
	UnplaceSandbox(ctx context.Context, name, workerID string) error
}

// Worker is the worker process the activities run in; zero on a process
// with one worker and no placements (tests, the API role).
type Worker struct {
	ID    string
	Queue string // WorkerQueue(shared, ID)
	// Alone: this is the only worker (factoryd with its embedded Temporal
	// server): nothing is routed to it, so the provision sandboxes of its
	// runs, which no other run looks for, are not recorded in the store
	// (placedHere).
	Alone bool
}

// placedHere tells whether a sandbox of mode made on this worker is
// recorded in the store (PlaceSandbox): always, but for a provision sandbox
// of the only worker (Worker.Alone). mode "" is a sandbox of unknown mode.
func (a *Activities) placedHere(mode string) bool {
	return !(a.Worker.Alone && mode == manifests.SandboxProvision)
}

// LocateSandboxInput asks where a sandbox lives: Name (a template, rendered
// with Params) for an ensure or reuse sandbox, or WorkerID alone to ask
// whether that worker is alive.
type LocateSandboxInput struct {
	Name     string
	Params   map[string]any
	WorkerID string
}

// LocateSandboxResult tells where a sandbox lives. Found is false when no
// worker holds it; Alive says whether its worker heartbeats.
type LocateSandboxResult struct {
	Name     string
	Found    bool
	WorkerID string
	Queue    string
	Alive    bool
	SeenAt   time.Time
}

// LocateSandbox finds the worker holding a sandbox and whether it is alive.
// It is a local activity: a store read.
func (a *Activities) LocateSandbox(ctx context.Context, in LocateSandboxInput) (LocateSandboxResult, error) {
	if a.Placements == nil {
		return LocateSandboxResult{}, nil
	}
	res := LocateSandboxResult{WorkerID: in.WorkerID}
	if res.WorkerID == "" {
		name, err := manifests.Render(in.Name, in.Params)
		if err != nil || name == "" {
			return res, nil // AcquireSandbox reports the template's problem
		}
		res.Name = name
		id, err := a.Placements.SandboxWorker(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			return res, nil
		}
		if err != nil {
			return res, err
		}
		res.WorkerID = id
	}
	res.Found = true
	w, err := a.Placements.GetWorker(ctx, res.WorkerID)
	if errors.Is(err, store.ErrNotFound) {
		return res, nil
	}
	if err != nil {
		return res, err
	}
	res.Queue, res.SeenAt = w.Queue, w.SeenAt
	res.Alive = a.now().Sub(w.SeenAt) < WorkerTTL
	return res, nil
}

// WorkerGone describes a task whose sandbox is on a worker that is gone.
func WorkerGone(task, step, sandboxName, workerID string, seen time.Time) RunStepResult {
	msg := fmt.Sprintf("sandbox %q is on worker %s, which is gone", sandboxName, workerID)
	if !seen.IsZero() {
		msg += fmt.Sprintf(" (last seen %s)", seen.UTC().Format(time.RFC3339))
	}
	return RunStepResult{Task: task, Step: step, Outcome: run.Fail(CodeWorkerGone, run.ClassInfra, msg+"; its sandboxes went with it")}
}

// claimSandbox records that this worker holds name before it is made here.
// Another live worker holding it already: ErrTypeSandboxElsewhere, so the
// workflow routes the task there. A provision attempt whose earlier attempt
// ran on a worker that is gone takes the name over; an ensure or reuse
// sandbox on a gone worker fails (RESOURCE_UNAVAILABLE).
func (a *Activities) claimSandbox(ctx context.Context, name, mode string) error {
	if a.Placements == nil || a.Worker.ID == "" || name == "" || !a.placedHere(mode) {
		return nil
	}
	holder, err := a.Placements.PlaceSandbox(ctx, name, a.Worker.ID)
	if err != nil || holder == a.Worker.ID {
		return err
	}
	loc, err := a.LocateSandbox(ctx, LocateSandboxInput{WorkerID: holder})
	if err != nil {
		return err
	}
	if loc.Alive {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("sandbox %q is on worker %s", name, holder),
			ErrTypeSandboxElsewhere, nil, loc)
	}
	if mode == manifests.SandboxProvision {
		if _, err := a.Placements.MoveSandbox(ctx, name, holder, a.Worker.ID); err != nil {
			return err
		}
		return a.claimSandbox(ctx, name, mode)
	}
	f := WorkerGone("", "", name, holder, loc.SeenAt)
	return temporal.NewNonRetryableApplicationError(f.ErrorMessage, CodeWorkerGone, nil)
}

// unplaceIfGone forgets this worker's placement of a sandbox of mode ("":
// not known) it does not hold (a provision that failed, a delete).
func (a *Activities) unplaceIfGone(ctx context.Context, name, mode string) {
	if a.Placements == nil || a.Worker.ID == "" || name == "" || !a.placedHere(mode) {
		return
	}
	if _, err := a.Sandboxes.Get(ctx, name); sandbox.CodeOf(err) != sandbox.CodeNotFound {
		return
	}
	if err := a.Placements.UnplaceSandbox(context.WithoutCancel(ctx), name, a.Worker.ID); err != nil && a.Logger != nil {
		a.Logger.Warn("forget sandbox placement", slog.String("sandbox", name), slog.String("error", err.Error()))
	}
}

// TeardownSandboxInput names a sandbox to delete on the worker holding it.
type TeardownSandboxInput struct {
	Name string
	// ProvisionedBy, when set (teardown_on_complete unset), deletes the
	// sandbox only if that run provisioned it and it has no lifecycle, as
	// FinishRun does with the sandboxes of its own worker.
	ProvisionedBy string
}

// TeardownSandbox deletes a sandbox at the end of its run
// (teardown_on_complete, or unset for what the run provisioned); it runs on
// the sandbox's worker. A sandbox that is gone already is no error.
func (a *Activities) TeardownSandbox(ctx context.Context, in TeardownSandboxInput) error {
	sb, err := a.Sandboxes.Get(ctx, in.Name)
	if in.ProvisionedBy != "" && (err != nil || sb.Mode != manifests.SandboxProvision || sb.Lifecycle != nil ||
		!strings.HasPrefix(sb.ProvisionKey, in.ProvisionedBy+"/")) {
		return nil
	}
	err = a.Sandboxes.Delete(ctx, in.Name)
	if err != nil && sandbox.CodeOf(err) != sandbox.CodeNotFound {
		return err
	}
	a.unplaceIfGone(ctx, in.Name, sb.Mode)
	return nil
}

// TeardownHeldInput names sandboxes a finished run leaves on workers, to
// delete those this worker holds (see TeardownSandboxInput for
// ProvisionedBy).
type TeardownHeldInput struct {
	Sandboxes     []AcquireSandboxResult
	ProvisionedBy string
}

// TeardownHeldResult lists the sandboxes TeardownHeld left to their own
// workers: held elsewhere, or not deleted here.
type TeardownHeldResult struct {
	Left []AcquireSandboxResult
}

// TeardownHeld is TeardownSandbox as a local activity, run by the worker
// that runs the workflow's task: it deletes the sandboxes this worker holds
// and returns the others, which the workflow sends to their workers. Most
// runs hold their sandbox on the worker that runs their workflow (a
// provision sandbox is made by a local activity there), so their teardown
// costs no activity round trip through Temporal.
func (a *Activities) TeardownHeld(ctx context.Context, in TeardownHeldInput) (TeardownHeldResult, error) {
	var res TeardownHeldResult
	for _, sb := range in.Sandboxes {
		if a.Worker.ID == "" || sb.WorkerID != a.Worker.ID {
			res.Left = append(res.Left, sb)
			continue
		}
		if err := a.TeardownSandbox(ctx, TeardownSandboxInput{Name: sb.Name, ProvisionedBy: in.ProvisionedBy}); err != nil {
			if a.Logger != nil {
				a.Logger.Warn("teardown sandbox", slog.String("sandbox", sb.Name), slog.String("error", err.Error()))
			}
			res.Left = append(res.Left, sb) // its worker's queue tries again
		}
	}
	return res, nil
}
