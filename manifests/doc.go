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
//   - Free-form values (defaults, literals, inputs, output values) hold numbers
//     as float64, except whole numbers beyond 2^53 that fit an int64, which are
//     json.Number with their exact digits (see Normalize); Equal compares both.
package manifests
