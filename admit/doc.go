// Package admit is the one way a new run is accepted: its record is made
// queued, then its workflow is started, and when the workflow engine does
// not take the workflow the record ends failed with the dispatch failure.
// Every start goes through it: manual job-run and line-run starts, line-run
// retries and trigger deliveries (package api), and the runs that line and
// job schedule firings make (package activities, in the firing's activity).
//
// Why a package of its own: both api and activities admit runs, and api must
// not import activities nor workflows import store. admit depends only on
// store and manifests/run; the start itself is a Start function the caller
// hands in (api: its Runs interface; activities: its RunStarts), because the
// workflows' input types live in package workflows, which neither store nor
// activities may import. cmd/factoryd wires the store and the engine.
//
// Invariants:
//   - order: the record first, then the engine. A record the store refuses
//     (store.ErrConflict: a delivery that already started a run of the line)
//     never reaches the engine; a start the engine refuses leaves no run
//     queued forever (the record ends failed, and the reconciler finds a
//     queued record whose start was lost).
//   - idempotency: the workflow id derives from the record id
//     (run.JobRunWorkflowID, run.LineRunWorkflowID), so admitting the same
//     record again (a retried firing activity) starts the same workflow: the
//     record is not made twice, the workflow is started again only while the
//     record is still queued, and an engine that answers "already started"
//     has taken it.
//   - a dispatch failure changes a record only while it is still queued
//     (never a run its workflow has begun), with what users have always
//     seen: job runs error_code DISPATCH_FAILED, failure_class platform,
//     "the run could not be dispatched: …"; line runs failure.code
//     dispatch_failed (domain platform), "the line run could not be
//     dispatched: …".
package admit
