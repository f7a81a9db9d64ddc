// Package manifests is the pure core of Linefactory: the job and line manifest
// types, strict parsing of TOML and JSON (one schema, snake_case keys), validation
// that reports every problem with its location, normalization (defaults applied),
// the canonical content hash, {{param}} templating and the condition language.
//
// Invariants:
//   - No I/O beyond the readers it is handed.
//   - Parse then Validate then Normalize; a manifest that passed Validate never
//     panics anywhere else in this package.
//   - ContentHash of a normalized manifest is the same whichever format it was
//     authored in and whatever the key order.
package manifests
