package workflows

import (
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/manifests"
)

// localSandboxChange is the workflow.GetVersion change id of job runs that
// acquire a sandbox with nothing to fill it (a provision without sources,
// setup scripts or snapshot) and tear down what they provisioned as local
// activities, on the worker that runs the workflow's task, instead of one
// activity round trip through Temporal each. Its version 1 also stands for
// the changes versioned before it (continueAsNewChange, affinityVersion,
// remoteDefaultTeardownVersion): a run that records it takes them all
// without their markers, so a job run records one version marker (and one
// TemporalChangeVersion search attribute update) instead of three; a run
// whose input carries JobRunInput.Version records none. Runs without it
// replay as they ran.
const localSandboxChange = "jobrun-local-sandbox"

// quickProvision tells whether a task's sandbox is a provision with
// nothing to fill it: made in milliseconds (a directory and its state), so
// a local activity makes it.
func quickProvision(cfg *manifests.SandboxConfig) bool {
	if cfg == nil {
		return true
	}
	return (cfg.Mode == "" || cfg.Mode == manifests.SandboxProvision) &&
		len(cfg.Sources) == 0 && len(cfg.SetupScripts) == 0 && cfg.SnapshotName == ""
}

// acquireHere acquires a quick provision as a local activity: the sandbox
// is made on this worker, and the task's steps go to its queue. done is
// false when the name is held by another live worker (a retried workflow
// task that moved): the caller routes the acquisition there.
func acquireHere(ctx workflow.Context, acq activities.AcquireSandboxInput, out *activities.AcquireSandboxResult) (done bool, err error) {
	return acquiredHere(ctx, startAcquireHere(ctx, acq), out)
}

// startAcquireHere starts acquireHere's local activity.
func startAcquireHere(ctx workflow.Context, acq activities.AcquireSandboxInput) workflow.Future {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 3,
			NonRetryableErrorTypes: activities.PermanentErrorTypes},
	})
	return workflow.ExecuteLocalActivity(lctx, a.AcquireSandbox, acq)
}

// acquiredHere waits for startAcquireHere's local activity: acquireHere's
// done and err.
func acquiredHere(ctx workflow.Context, fut workflow.Future, out *activities.AcquireSandboxResult) (done bool, err error) {
	err = fut.Get(ctx, out)
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.Type() == activities.ErrTypeSandboxElsewhere {
		*out = activities.AcquireSandboxResult{}
		return false, nil
	}
	return true, err
}

// teardownHere deletes, as a local activity, the sandboxes among sandboxes
// that this worker holds, and returns those left to their own workers (all
// of them when the local activity fails).
func teardownHere(ctx workflow.Context, sandboxes []activities.AcquireSandboxResult, provisionedBy string) []activities.AcquireSandboxResult {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 2 * time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 2},
	})
	var res activities.TeardownHeldResult
	in := activities.TeardownHeldInput{Sandboxes: sandboxes, ProvisionedBy: provisionedBy}
	if err := workflow.ExecuteLocalActivity(lctx, a.TeardownHeld, in).Get(lctx, &res); err != nil {
		return sandboxes
	}
	return res.Left
}
