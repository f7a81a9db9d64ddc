package workflows

import (
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/manifests"
)

// Sandbox affinity (see activities/placement.go): a task's sandbox lives on
// one worker, so AcquireSandbox for an ensure or reuse sandbox goes to the
// worker that holds it, a provision sandbox to any worker (the shared
// queue), and every step of the task to the queue of the worker that
// acquired it.

// affinityVersion marks job runs that route their sandbox activities (runs
// started before replay the old, unrouted commands).
const affinityVersion = "sandbox-affinity"

// routedStartTimeout bounds how long a routed activity waits for its
// worker to take it. Past it, the workflow asks whether the worker is still
// alive: a busy worker gets the activity again, a gone one fails the task.
const routedStartTimeout = 10 * time.Second

// affinity tells whether this run routes sandbox activities.
func affinity(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, affinityVersion, workflow.DefaultVersion, 1) == 1
}

// locate runs LocateSandbox as a local activity (a store read).
func locate(ctx workflow.Context, in activities.LocateSandboxInput) (activities.LocateSandboxResult, error) {
	var res activities.LocateSandboxResult
	err := workflow.ExecuteLocalActivity(bookkeeping(ctx), a.LocateSandbox, in).Get(ctx, &res)
	return res, err
}

// errWorkerGone is a routed activity whose worker is gone.
type errWorkerGone struct {
	loc activities.LocateSandboxResult
}

func (e *errWorkerGone) Error() string { return "worker " + e.loc.WorkerID + " is gone" }

// routed runs an activity on a worker's own queue (queue "" is the shared
// one). When the worker does not take it in time, or a timeout ends it, the
// worker's liveness decides: alive, the activity is scheduled again; gone,
// the error is *errWorkerGone.
func routed(ctx workflow.Context, queue, workerID string, fn, in, out any) error {
	if queue == "" {
		return workflow.ExecuteActivity(ctx, fn, in).Get(ctx, out)
	}
	opts := workflow.GetActivityOptions(ctx)
	opts.TaskQueue, opts.ScheduleToStartTimeout = queue, routedStartTimeout
	rctx := workflow.WithActivityOptions(ctx, opts)
	for {
		err := workflow.ExecuteActivity(rctx, fn, in).Get(rctx, out)
		var te *temporal.TimeoutError
		if err == nil || ctx.Err() != nil || !errors.As(err, &te) {
			return err
		}
		loc, lerr := locate(ctx, activities.LocateSandboxInput{WorkerID: workerID})
		if lerr != nil {
			return err
		}
		if !loc.Alive {
			return &errWorkerGone{loc: loc}
		}
	}
}

// acquireRouted acquires a task's sandbox on the right worker: the holder
// of a named ensure or reuse sandbox, else any. gone is set when the
// sandbox's worker is gone; name is the sandbox's name, if known, for it.
func acquireRouted(ctx workflow.Context, cfg *manifests.SandboxConfig, acq activities.AcquireSandboxInput, name string,
	out *activities.AcquireSandboxResult) (gone *activities.LocateSandboxResult, err error) {
	queue, workerID := "", ""
	if cfg != nil && cfg.Name != "" && (cfg.Mode == manifests.SandboxEnsure || cfg.Mode == manifests.SandboxReuse) {
		loc, err := locate(ctx, activities.LocateSandboxInput{Name: cfg.Name, Params: acq.Params})
		if err != nil {
			return nil, err
		}
		if loc.Found && !loc.Alive {
			return &loc, nil
		}
		queue, workerID, name = loc.Queue, loc.WorkerID, loc.Name
	}
	for attempt := 0; ; attempt++ {
		err := routed(ctx, queue, workerID, a.AcquireSandbox, acq, out)
		var wg *errWorkerGone
		if errors.As(err, &wg) {
			wg.loc.Name = name
			return &wg.loc, nil
		}
		// Placed on another worker meanwhile (a concurrent ensure): go there.
		var ae *temporal.ApplicationError
		if attempt < 3 && errors.As(err, &ae) && ae.Type() == activities.ErrTypeSandboxElsewhere {
			var loc activities.LocateSandboxResult
			if ae.Details(&loc) == nil && loc.Queue != "" {
				queue, workerID = loc.Queue, loc.WorkerID
				continue
			}
		}
		return nil, err
	}
}

// teardownRouted deletes sandboxes on the workers holding them
// (teardown_on_complete; with provisionedBy, teardown_on_complete unset: only
// those that run provisioned without a lifecycle). A worker that is gone
// took its sandboxes with it.
func teardownRouted(ctx workflow.Context, sandboxes []activities.AcquireSandboxResult, provisionedBy string) {
	futs := make([]workflow.Future, 0, len(sandboxes))
	for _, sb := range sandboxes {
		f, set := workflow.NewFuture(ctx)
		workflow.Go(ctx, func(gctx workflow.Context) {
			set.Set(nil, routed(gctx, sb.Queue, sb.WorkerID, a.TeardownSandbox,
				activities.TeardownSandboxInput{Name: sb.Name, ProvisionedBy: provisionedBy}, nil))
		})
		futs = append(futs, f)
	}
	for _, f := range futs {
		_ = f.Get(ctx, nil) // a failed teardown leaves the sandbox to its lifecycle
	}
}
