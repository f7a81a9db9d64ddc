// Command factoryd is the Linefactory daemon and its offline tools:
//
//	factoryd serve      API, worker and (by default) embedded Temporal
//	factoryd validate   lint manifests offline
//	factoryd token      manage API tokens
package main

import (
	"fmt"
	"os"
)

const usage = `usage: factoryd <command> [flags]

commands:
  serve      start the API, the worker and (without TEMPORAL_ADDRESS) an embedded Temporal server
  validate   validate manifest files or directories offline: factoryd validate [--config FILE] PATH...
  token      manage API tokens: factoryd token create --name NAME [--scope read|write|admin]
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var code int
	switch os.Args[1] {
	case "serve":
		code = runServe(os.Args[2:])
	case "validate":
		code = runValidate(os.Args[2:], os.Stdout, os.Stderr)
	case "token":
		code = runToken(os.Args[2:])
	case "-h", "--help", "help":
		fmt.Fprint(os.Stdout, usage)
	default:
		fmt.Fprintf(os.Stderr, "factoryd: unknown command %q\n\n%s", os.Args[1], usage)
		code = 2
	}
	os.Exit(code)
}
