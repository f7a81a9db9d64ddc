// Package agent prepares what a run_agent step gets (AGENTS.md "What a
// run_agent step gets") and reads back what the harness leaves: the argument
// list built from a harness's command template, the step's SVC_* environment,
// the prompt file, the knowledge directory and its index.json, the MCP
// configuration, the JSON Schema of the output object; then the output
// object, the session id and the usage lines.
//
// Invariants:
//   - No Temporal and no store: it works on plain values and one directory.
//   - An argument holding a placeholder whose value is empty is dropped whole.
//   - Output files are never pre-created: what exists after the step was
//     written by the step.
package agent
