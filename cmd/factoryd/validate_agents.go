package main

import (
	"fmt"
	"strings"

	"github.com/linefactory/linefactory/manifests/agentconf"
)

// validateConfigFlag takes `--config FILE` (or --config=FILE) out of the
// arguments of `factoryd validate` and reads the file; nil without one.
func validateConfigFlag(args []string) ([]string, *agentconf.Config, error) {
	var rest []string
	file := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--config" || a == "-config":
			if i+1 >= len(args) {
				return nil, nil, fmt.Errorf("--config needs a file")
			}
			file = args[i+1]
			i++
		case strings.HasPrefix(a, "--config=") || strings.HasPrefix(a, "-config="):
			file = a[strings.Index(a, "=")+1:]
		default:
			rest = append(rest, a)
		}
	}
	if file == "" {
		return rest, nil, nil
	}
	cfg, err := readAgentConfig(file)
	return rest, cfg, err
}
