package main

import (
	"io"

	"github.com/linefactory/linefactory/manifests/tree"
)

// runValidate implements `factoryd validate PATH...` (see tree.Validate).
func runValidate(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		_, _ = io.WriteString(stderr, "usage: factoryd validate PATH...\n")
		return 2
	}
	return tree.Validate(args, stdout, stderr)
}
