// Package composecheck holds the test that loads docker-compose.yml with the
// compose-spec library and checks its wiring: health-gated start order,
// restart policies, the Temporal version line of the embedded server, and
// environment variables factoryd actually reads. It is its own package so
// that the test does not link the Temporal server.
package composecheck
