// Package codecheck holds repository-wide checks run by `make test`: no
// function over 80 lines outside tests and generated code, and no run
// status, failure class or workflow-ID literal outside the run vocabulary
// package. It has no code of its own; see codecheck_test.go.
package codecheck
