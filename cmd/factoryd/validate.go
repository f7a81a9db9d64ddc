package main

import (
	"fmt"
	"io"

	"github.com/linefactory/linefactory/manifests/tree"
)

// runValidate implements `factoryd validate [--config FILE] PATH...` (see
// tree.Validate). With --config FILE, run_agent steps are checked against the
// server configuration file as a deploy checks them.
func runValidate(args []string, stdout, stderr io.Writer) int {
	args, agents, err := validateConfigFlag(args)
	if err != nil {
		fmt.Fprintf(stderr, "factoryd validate: %v\n", err)
		return 2
	}
	if len(args) == 0 {
		_, _ = io.WriteString(stderr, "usage: factoryd validate [--config FILE] PATH...\n")
		return 2
	}
	return tree.ValidateWith(args, agents, stdout, stderr)
}
