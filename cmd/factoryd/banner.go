package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/term"
)

// newLogger logs to w as text (on a terminal) or JSON (otherwise, or as
// FACTORY_LOG_FORMAT says).
func newLogger(cfg config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	format := cfg.LogFormat
	if format == "" {
		format = "json"
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			format = "text"
		}
	}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// uiURL is the embedded Temporal Web UI's address, "" without one.
func (rt *runtime) uiURL() string {
	if rt == nil || rt.server == nil {
		return ""
	}
	return rt.server.UIURL()
}

// selfPath is how this binary was invoked (./bin/factoryd under make run),
// so printed commands work when pasted.
func selfPath() string {
	p := os.Args[0]
	if !strings.Contains(p, string(filepath.Separator)) {
		return "factoryd" // found on PATH
	}
	return p
}

// tokenHint is a token command that works on every start: --force replaces
// the token of that name, and the store flags match this server's.
func tokenHint(cfg config) string {
	cmd := selfPath() + " token create --name me --scope admin --force"
	if cfg.DatabaseURL != filepath.Join(cfg.DataDir, "factory.db") {
		cmd += " --database-url '" + cfg.DatabaseURL + "'"
	} else if cfg.DataDir != ".factory" {
		cmd += " --data-dir " + cfg.DataDir
	}
	return cmd
}

// printBanner prints what a newcomer needs once the API listens.
func printBanner(w io.Writer, cfg config, apiAddr, uiURL string) {
	base := "http://" + apiAddr
	var b strings.Builder
	fmt.Fprintf(&b, "\nLinefactory is running.\n")
	fmt.Fprintf(&b, "  API       %s   (OpenAPI document: %s/openapi.json)\n", base, base)
	if uiURL != "" {
		fmt.Fprintf(&b, "  Web UI    %s   (Temporal: job runs are workflows jobrun/<id>, line runs linerun/<id>)\n", uiURL)
	}
	fmt.Fprintf(&b, "  data dir  %s\n", cfg.DataDir)
	if cfg.BootstrapToken != "" {
		fmt.Fprintf(&b, "  token     FACTORY_BOOTSTRAP_TOKEN is the admin token \"bootstrap\"\n")
	} else {
		fmt.Fprintf(&b, "  token     export FACTORY_TOKEN=$(%s)\n", tokenHint(cfg))
	}
	// factoryctl sits beside factoryd (make build puts both into ./bin).
	ctl := "factoryctl"
	if dir, ok := strings.CutSuffix(selfPath(), "factoryd"); ok {
		ctl = dir + "factoryctl"
	}
	fmt.Fprintf(&b, "  then      export FACTORY_URL=%s; %s deploy manifests/examples\n", base, ctl)
	fmt.Fprintf(&b, "            %s run job hello -p who=you --wait --follow\n", ctl)
	fmt.Fprintf(&b, "Stop with Ctrl-C.\n\n")
	_, _ = io.WriteString(w, b.String())
}
