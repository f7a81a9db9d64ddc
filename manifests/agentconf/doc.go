// Package agentconf is the server configuration file of factoryd (`--config` /
// FACTORY_CONFIG, TOML): the agent harnesses a `run_agent` step may name, their
// command templates, models, efforts and prices, the OpenAI-compatible
// `[inference]` endpoint and the `[router]` of agentic transitions.
//
// Invariants:
//   - Pure: no I/O beyond parsing the bytes it is handed.
//   - Parse is strict: an unknown key, a wrong type or a bad value is an error
//     naming the file, the key and the reason; every problem is reported.
//   - A nil *Config and an empty one mean the same: no harness, no inference
//     endpoint, no router.
//   - Prices are cents per million tokens; usage is priced in micro-cents
//     (exact for whole-cent prices) and rounded up to whole cents once per run.
package agentconf
