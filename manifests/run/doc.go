// Package run is the vocabulary of a run: the statuses of job runs, steps,
// line runs and stage visits with their terminal sets and transitions, the
// outcome of a step or run, failure classes, the classified line-run
// failure with its codes and their domains, the workflow IDs of runs and
// schedules, and run ids.
//
// Invariants:
//   - it is pure: no I/O, no clock, nothing of Linefactory's but itself, so
//     store, activities, workflows and api can all depend on it;
//   - every status, failure class, failure code and domain is a typed string
//     equal to its wire value (API.md "Statuses", SPEC "Line run failure
//     classification"); renaming one is an API change;
//   - workflow and schedule IDs are wire contracts with the Temporal
//     engine: runs already started are found by them.
package run
