// Package codecheck holds repository-wide checks run by `make test`: no
// function over 80 lines outside tests and generated code, and no run
// status, failure class or workflow-ID literal outside the run vocabulary
// package, and the one-way imports of README "Layout" most likely to
// break: no workflows -> store, no api -> activities, manifests importing
// nothing of ours but manifests, store nothing but manifests/... (their
// non-test files; layers_test.go). It has no code of its own; see
// codecheck_test.go.
package codecheck
