// Command factoryctl is the command line of a Linefactory server: it talks
// to the REST API only (it does not link the Temporal server).
package main

import (
	"os"

	"github.com/linefactory/linefactory/cmd/factoryctl/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
