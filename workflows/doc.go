// Package workflows holds Linefactory's Temporal workflows: JobRunWorkflow
// (a job run), LineRunWorkflow (the manager of a line run, one turn per
// Temporal run) and the schedule firings.
//
// Invariants:
//   - determinism: orchestration only, through workflow.* APIs; no I/O,
//     time.Now, rand, native goroutines or map-order reliance (make lint
//     runs workflowcheck). Every side effect is an activity of package
//     activities; ids come from run.NewJobRunID/NewLineRunID in SideEffects.
//     Workflow, activity, signal and query names are wire contracts.
//   - the history holds small values: inputs, the manifests a run executes,
//     and activity results that do not grow with the run (a line turn's
//     local activities return the turn's record header, the visit they
//     touch and the cost so far, never the whole line-run record; the final
//     record enters the history once, when the run ends). A manager turn's
//     history is O(1) in the visits before it.
//   - a schedule firing fixes its run's id in a SideEffect and admits the
//     run in its activity (package admit: record, start, record a refusal);
//     firings begun before that (admitInActivity) start the run as a child.
//   - LineState is everything a line run carries from one turn to the next;
//     the state query answers LineRunState, which has the record's JSON keys.
//   - no storage types: workflows never imports store. The wait and the
//     decision of an agentic transition are the run vocabulary's (run.Wait,
//     run.Decision); the routing activities hand the line-run record back as
//     its JSON (LineRecord), which the select Update answers with — the same
//     payload as when it was the store's LineRun, so runs in flight replay.
package workflows
