// Package api is Linefactory's REST API (Gin): definitions (jobs, lines,
// knowledge), runs, triggers and schedules, and the OpenAPI document built
// from the same route table the router uses.
//
// Invariants:
//   - auth: every route but the operational ones (healthz, readyz,
//     metrics, openapi.json) needs a bearer token whose scope (read < write
//     < admin) covers the route's (the Route table); a missing or unknown
//     token is 401 AUTH_REQUIRED, a scope too low is 403 ACCESS_DENIED.
//   - errors: handlers return errors, answered in one place (errors.go):
//     *InvalidInput and manifest problems are 422 (validation body or
//     VALIDATION_ERROR), *HTTPError carries its status and code,
//     store.ErrNotFound is 404 NOT_FOUND, store.ErrConflict is 409
//     INVALID_REQUEST, anything else is logged and answered 500
//     INTERNAL_ERROR with a generic message.
//   - runs are answered as the response types of runviews.go (job runs,
//     steps, line runs, stage visits, transitions, decisions, manager
//     turns), built from store records there only; GET by id serves the
//     stored document, which is their encoding (runviews_test.go).
//   - runs are admitted through package admit (record queued, start, record
//     the engine's refusal) and start through the Runs interface (the
//     workflow engine); api never imports activities (the inference
//     gateway's settings, prices and token hashing are manifests/inference),
//     and uses the run vocabulary (manifests/run)
//     for statuses, failure codes and domains, and Config.Now as its clock.
package api
