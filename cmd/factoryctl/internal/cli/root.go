// Package cli is factoryctl: the command line of the Linefactory REST API.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/linefactory/linefactory/cmd/factoryctl/internal/client"
)

// Exit codes.
const (
	ExitOK = 0
	// ExitFailed: an error, or a waited-for run that failed.
	ExitFailed = 1
	// ExitCancelled: a waited-for run that was cancelled or timed out.
	ExitCancelled = 2
)

// exitError ends the command with a code; msg "" prints nothing more.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// App is one invocation of factoryctl with its streams and environment.
type App struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Getenv reads the environment; default os.Getenv.
	Getenv func(string) string
	// PollInterval is how often --wait reads the run; default 500ms.
	PollInterval time.Duration

	// flags
	url, token, output, configPath string

	client *client.Client
}

// Main runs factoryctl with args and returns the exit code.
func Main(args []string) int {
	a := &App{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return a.Run(ctx, args)
}

// Run runs one command line.
func (a *App) Run(ctx context.Context, args []string) int {
	if a.Getenv == nil {
		a.Getenv = os.Getenv
	}
	if a.PollInterval <= 0 {
		a.PollInterval = 500 * time.Millisecond
		if v, err := time.ParseDuration(a.Getenv("FACTORYCTL_POLL_INTERVAL")); err == nil && v > 0 {
			a.PollInterval = v
		}
	}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(a.Stdin)
	root.SetOut(a.Stdout)
	root.SetErr(a.Stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(a.Stderr, "factoryctl: "+ee.msg)
		}
		return ee.code
	}
	fmt.Fprintln(a.Stderr, "factoryctl: "+err.Error())
	return ExitFailed
}

func (a *App) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "factoryctl",
		Short: "The command line of a Linefactory server",
		Long: `factoryctl talks to a Linefactory server's REST API: deploy jobs and lines, run them,
wait for them, follow their logs, and manage schedules, tokens and knowledge.

The server and token come from --url/--token, else FACTORY_URL/FACTORY_TOKEN, else the
config file written by "factoryctl login" (~/.config/linefactory/config.toml).
Output is a table on a terminal and JSON when piped (--output table|json).`,
		Example: `  factoryctl login --url http://127.0.0.1:8080 --token "$TOKEN"
  factoryctl deploy manifests/examples
  factoryctl run line build-until-green -p who=you --wait --follow
  factoryctl list --status failed --since 24h`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.url, "url", "", "API base URL (FACTORY_URL; default http://127.0.0.1:8080)")
	pf.StringVar(&a.token, "token", "", "API token (FACTORY_TOKEN)")
	pf.StringVarP(&a.output, "output", "o", "", "output format: table or json (default: table on a terminal, json when piped)")
	pf.StringVar(&a.configPath, "config", "", "config file (default ~/.config/linefactory/config.toml)")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json"}, cobra.ShellCompDirectiveNoFileComp))
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if a.output != "" && a.output != "table" && a.output != "json" {
			return &exitError{code: ExitFailed, msg: fmt.Sprintf("--output must be table or json, not %q", a.output)}
		}
		return nil
	}
	root.AddCommand(a.loginCommand(), a.deployCommand(), a.validateCommand(), a.runCommand(), a.getCommand(),
		a.listCommand(), a.logsCommand(), a.stopCommand(), a.retryCommand(), a.selectCommand(), a.scheduleCommand(),
		a.tokenCommand(), a.knowledgeCommand(), a.lineCommand())
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			c.Example = `  source <(factoryctl completion bash)
  factoryctl completion zsh > "${fpath[1]}/_factoryctl"
  factoryctl completion fish > ~/.config/fish/completions/factoryctl.fish`
			for _, sh := range c.Commands() {
				sh.Example = "  factoryctl completion " + sh.Name() + " --help   # how to load it"
			}
		}
	}
	return root
}

// api returns the API client, configured from flags, environment and the
// config file.
func (a *App) api() (*client.Client, error) {
	if a.client != nil {
		return a.client, nil
	}
	cfg, err := a.loadConfig()
	if err != nil {
		return nil, err
	}
	url := firstNonEmpty(a.url, a.Getenv("FACTORY_URL"), cfg.URL, defaultURL)
	token := firstNonEmpty(a.token, a.Getenv("FACTORY_TOKEN"), cfg.Token)
	a.client = client.New(url, token)
	return a.client, nil
}

const defaultURL = "http://127.0.0.1:8080"

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// jsonOutput tells whether to print JSON: --output, else JSON unless
// stdout is a terminal.
func (a *App) jsonOutput() bool {
	switch a.output {
	case "json":
		return true
	case "table":
		return false
	}
	return !a.isTerminal()
}

func (a *App) isTerminal() bool {
	f, ok := a.Stdout.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progress is where live progress goes: stdout with tables, stderr with
// JSON (so the JSON on stdout stays parseable).
func (a *App) progress() io.Writer {
	if a.jsonOutput() {
		return a.Stderr
	}
	return a.Stdout
}
