// Package activities holds every side effect of Linefactory's workflows:
// writing run records, acquiring sandboxes, running steps, rating costs.
// Activities are methods on *Activities, whose fields are their
// dependencies, wired once in cmd.
//
// Invariants:
//   - idempotency: Temporal may run an activity more than once (a retry,
//     a local activity re-run with its workflow task), so every record write
//     checks what is already there (a visit by its job run id, a turn by its
//     number, a final status is never overwritten) and provisioned sandboxes
//     have names that are pure functions of run and task (ProvisionName).
//   - heartbeats: long activities (AcquireSandbox, RunStep) heartbeat while
//     they work; cancellation reaches them only through heartbeats, and a
//     worker shutting down leaves the step running for the next worker.
//   - a failed step is a result (RunStepResult with its run.Outcome); an
//     activity error means the step could not be attempted, and permanent
//     problems are non-retryable errors typed with the error code.
//   - schedule firings admit the runs they make (package admit, with the
//     engine behind RunStarts): idempotent on the run id the firing
//     workflow fixed; a refused start is recorded and not retried.
//   - results are small: line-run activities return what the workflow needs
//     (status, costs, failure, the touched visit), not whole records.
package activities
