package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/linefactory/linefactory/cmd/factoryctl/internal/client"
	"github.com/linefactory/linefactory/manifests"
)

// printRaw prints an API answer as JSON, or runs table for a table.
func (a *App) printRaw(raw []byte, table func() error) error {
	if a.jsonOutput() {
		return printJSON(a.Stdout, raw)
	}
	return table()
}

func (a *App) lineNameArg(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return a.completeNames(cmd.Context(), "line"), cobra.ShellCompDirectiveNoFileComp
}

// ---------------------------------------------------------------- schedule

func (a *App) scheduleCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule get|set|delete LINE",
		Short: "Show, set or delete a line's cron schedule",
		Example: `  factoryctl schedule set nightly --cron "0 3 * * *" --timezone Europe/Berlin -i who=night
  factoryctl schedule get nightly
  factoryctl schedule delete nightly`,
	}
	cmd.AddCommand(a.scheduleGetCommand(), a.scheduleSetCommand(), a.scheduleDeleteCommand())
	return cmd
}

// printSchedule prints a line's schedule.
func (a *App) printSchedule(raw []byte) error {
	return a.printRaw(raw, func() error {
		var s struct {
			Cron       string         `json:"cron"`
			Timezone   string         `json:"timezone"`
			Enabled    bool           `json:"enabled"`
			Generation int            `json:"schedule_generation"`
			Inputs     map[string]any `json:"inputs"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		in, _ := json.Marshal(s.Inputs)
		t := newTable(a.Stdout, "CRON", "TIMEZONE", "ENABLED", "GENERATION", "INPUTS")
		t.row(s.Cron, s.Timezone, fmt.Sprint(s.Enabled), fmt.Sprint(s.Generation), string(in))
		t.flush()
		return nil
	})
}

func (a *App) scheduleGetCommand() *cobra.Command {
	return &cobra.Command{
		Use: "get LINE", Short: "Show a line's schedule", Args: cobra.ExactArgs(1), ValidArgsFunction: a.lineNameArg,
		Example: "  factoryctl schedule get nightly",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.api()
			if err != nil {
				return err
			}
			_, raw, err := c.Do(cmd.Context(), client.Request{Method: http.MethodGet, Path: "/factory/lines/" + args[0] + "/schedule"})
			if err != nil {
				return err
			}
			return a.printSchedule(raw)
		},
	}
}

func (a *App) scheduleSetCommand() *cobra.Command {
	var cronExpr, tz string
	var disabled bool
	var inputs []string
	set := &cobra.Command{
		Use: "set LINE", Short: "Create or replace a line's schedule", Args: cobra.ExactArgs(1), ValidArgsFunction: a.lineNameArg,
		Example: `  factoryctl schedule set nightly --cron "0 3 * * *"
  factoryctl schedule set nightly --cron "*/15 * * * *" --timezone UTC --disabled`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cronExpr == "" {
				return &exitError{code: ExitFailed, msg: "schedule set: --cron is required"}
			}
			c, err := a.api()
			if err != nil {
				return err
			}
			body := map[string]any{"cron": cronExpr, "enabled": !disabled}
			if tz != "" {
				body["timezone"] = tz
			}
			if len(inputs) > 0 {
				params, err := a.buildParams(cmd.Context(), c, "line", args[0], runOptions{params: inputs})
				if err != nil {
					return err
				}
				body["inputs"] = params
			}
			_, raw, err := c.Do(cmd.Context(), client.Request{Method: http.MethodPut, Path: "/factory/lines/" + args[0] + "/schedule", Body: body})
			if err != nil {
				return err
			}
			return a.printSchedule(raw)
		},
	}
	set.Flags().StringVar(&cronExpr, "cron", "", "5-field cron expression (required)")
	set.Flags().StringVar(&tz, "timezone", "", "IANA time zone (default UTC)")
	set.Flags().BoolVar(&disabled, "disabled", false, "store the schedule paused")
	set.Flags().StringArrayVarP(&inputs, "input", "i", nil, "a run param of each firing: key=value (repeatable)")
	return set
}

func (a *App) scheduleDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use: "delete LINE", Short: "Delete a line's schedule", Args: cobra.ExactArgs(1), ValidArgsFunction: a.lineNameArg,
		Example: "  factoryctl schedule delete nightly",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.api()
			if err != nil {
				return err
			}
			if _, _, err := c.Do(cmd.Context(), client.Request{Method: http.MethodDelete, Path: "/factory/lines/" + args[0] + "/schedule"}); err != nil {
				return err
			}
			fmt.Fprintf(a.Stderr, "deleted the schedule of %s\n", args[0])
			return nil
		},
	}
}

// ---------------------------------------------------------------- tokens

func (a *App) tokenCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token create|list|revoke",
		Short: "Manage API tokens (needs an admin token)",
		Example: `  factoryctl token create --name ci --scope write
  factoryctl token list
  factoryctl token revoke ci`,
	}
	cmd.AddCommand(a.tokenCreateCommand(), a.tokenListCommand(), a.tokenRevokeCommand())
	return cmd
}

func (a *App) tokenCreateCommand() *cobra.Command {
	var name, scope string
	create := &cobra.Command{
		Use: "create --name NAME [--scope read|write|admin]", Short: "Create a token; its secret is printed once", Args: cobra.NoArgs,
		Example: "  factoryctl token create --name ci --scope write",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" {
				return &exitError{code: ExitFailed, msg: "token create: --name is required"}
			}
			c, err := a.api()
			if err != nil {
				return err
			}
			_, raw, err := c.Do(cmd.Context(), client.Request{Method: http.MethodPost, Path: "/tokens", Body: map[string]any{"name": name, "scope": scope}})
			if err != nil {
				return err
			}
			return a.printRaw(raw, func() error {
				var t struct {
					Token string `json:"token"`
					Scope string `json:"scope"`
				}
				if err := json.Unmarshal(raw, &t); err != nil {
					return err
				}
				fmt.Fprintln(a.Stdout, t.Token)
				fmt.Fprintf(a.Stderr, "created token %q with scope %s; it is shown only once\n", name, t.Scope)
				return nil
			})
		},
	}
	create.Flags().StringVar(&name, "name", "", "token name (required, unique)")
	create.Flags().StringVar(&scope, "scope", "write", "read, write or admin")
	_ = create.RegisterFlagCompletionFunc("scope", cobra.FixedCompletions([]string{"read", "write", "admin"}, cobra.ShellCompDirectiveNoFileComp))
	return create
}

func (a *App) tokenListCommand() *cobra.Command {
	list := &cobra.Command{
		Use: "list", Short: "List tokens (never their secrets)", Args: cobra.NoArgs, Example: "  factoryctl token list",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.api()
			if err != nil {
				return err
			}
			_, raw, err := c.Do(cmd.Context(), client.Request{Method: http.MethodGet, Path: "/tokens"})
			if err != nil {
				return err
			}
			return a.printRaw(raw, func() error {
				var ts []struct {
					Name       string     `json:"name"`
					Scope      string     `json:"scope"`
					CreatedAt  time.Time  `json:"created_at"`
					LastUsedAt *time.Time `json:"last_used_at"`
				}
				if err := json.Unmarshal(raw, &ts); err != nil {
					return err
				}
				t := newTable(a.Stdout, "NAME", "SCOPE", "CREATED", "LAST USED")
				for _, tk := range ts {
					used := "never"
					if tk.LastUsedAt != nil {
						used = ago(*tk.LastUsedAt)
					}
					t.row(tk.Name, tk.Scope, ago(tk.CreatedAt), used)
				}
				t.flush()
				return nil
			})
		},
	}
	return list
}

func (a *App) tokenRevokeCommand() *cobra.Command {
	revoke := &cobra.Command{
		Use: "revoke NAME", Short: "Delete a token: its secret stops working at once", Args: cobra.ExactArgs(1),
		Example: "  factoryctl token revoke ci",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.api()
			if err != nil {
				return err
			}
			if _, _, err := c.Do(cmd.Context(), client.Request{Method: http.MethodDelete, Path: "/tokens/" + args[0]}); err != nil {
				return err
			}
			fmt.Fprintf(a.Stderr, "revoked token %q\n", args[0])
			return nil
		},
	}
	return revoke
}

// ---------------------------------------------------------------- knowledge

func (a *App) knowledgeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "knowledge push|get",
		Short: "Push or read knowledge items",
		Example: `  factoryctl knowledge push knowledge/style-guide.md
  factoryctl knowledge get style-guide`,
	}
	cmd.AddCommand(a.knowledgePushCommand(), a.knowledgeGetCommand())
	return cmd
}

func (a *App) knowledgePushCommand() *cobra.Command {
	var ktype, klevel, format, slug string
	push := &cobra.Command{
		Use:   "push FILE...",
		Short: "Create knowledge items or add versions (unchanged when identical)",
		Long: `push sends each file as a knowledge item whose identifier is the file name without
its extension (or --slug for a single file): a new item, or a new version of an existing
one (unchanged when identical to the latest).`,
		Example: `  factoryctl knowledge push knowledge/style-guide.md
  factoryctl knowledge push notes.txt --slug team-notes --format text --type episodic --level episodic`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if slug != "" && len(args) > 1 {
				return &exitError{code: ExitFailed, msg: "knowledge push: --slug needs a single file"}
			}
			c, err := a.api()
			if err != nil {
				return err
			}
			var results []deployResult
			t := newTable(a.Stdout)
			for _, f := range args {
				body, err := os.ReadFile(f)
				if err != nil {
					return err
				}
				id := slug
				if id == "" {
					id = strings.TrimSuffix(filepath.Base(f), filepath.Ext(f))
				}
				out, status, err := pushKnowledge(cmd.Context(), c, id, ktype, klevel, format, string(body))
				if err != nil {
					return fmt.Errorf("%s: %w", f, err)
				}
				r := deployResult{File: f, Kind: "knowledge", Name: id, Result: "created", Version: out.VersionNumber, ID: out.ID}
				if status == http.StatusOK {
					r.Result = "unchanged"
				}
				results = append(results, r)
				t.row(r.Result, id, f, fmt.Sprintf("version %d", r.Version))
			}
			if a.jsonOutput() {
				return printJSON(a.Stdout, results)
			}
			t.flush()
			return nil
		},
	}
	push.Flags().StringVar(&ktype, "type", "declarative", "episodic, procedural, declarative, prompt, image, video or audio")
	push.Flags().StringVar(&klevel, "level", "declarative", "the level, one of the types")
	push.Flags().StringVar(&format, "format", "markdown", "the body's format")
	push.Flags().StringVar(&slug, "slug", "", "the identifier (default: the file name without extension)")
	return push
}

func (a *App) knowledgeGetCommand() *cobra.Command {
	var version int
	get := &cobra.Command{
		Use: "get SLUG", Short: "Print a knowledge item's latest (or --version) body", Args: cobra.ExactArgs(1),
		Example: "  factoryctl knowledge get style-guide\n  factoryctl knowledge get style-guide --version 2 -o json",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.api()
			if err != nil {
				return err
			}
			path := "/knowledge/" + args[0]
			if version > 0 {
				path += fmt.Sprintf("/versions/%d", version)
			}
			_, raw, err := c.Do(cmd.Context(), client.Request{Method: http.MethodGet, Path: path})
			if err != nil {
				return err
			}
			return a.printRaw(raw, func() error {
				var v knowledgeVersion
				if version == 0 {
					var item struct {
						Latest knowledgeVersion `json:"latest_version"`
					}
					if err := json.Unmarshal(raw, &item); err != nil {
						return err
					}
					v = item.Latest
				} else if err := json.Unmarshal(raw, &v); err != nil {
					return err
				}
				fmt.Fprintf(a.Stderr, "%s version %d (%s, %s, %s)\n", args[0], v.VersionNumber, v.Type, v.Level, v.Format)
				fmt.Fprint(a.Stdout, v.Body)
				if !strings.HasSuffix(v.Body, "\n") {
					fmt.Fprintln(a.Stdout)
				}
				return nil
			})
		},
	}
	get.Flags().IntVar(&version, "version", 0, "a version number (default: the latest)")
	return get
}

// ---------------------------------------------------------------- line graph

func (a *App) lineCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "line graph NAME",
		Short:   "Look at lines",
		Example: "  factoryctl line graph build-until-green\n  factoryctl line graph build-until-green --format mermaid",
	}
	var format string
	graph := &cobra.Command{
		Use:   "graph NAME",
		Short: "Draw a line's stages and transitions (text, dot or mermaid)",
		Long: `graph draws the latest version of a line: its stages (with their jobs) and the
transitions between them (conditional ones with their label or id, agentic ones with
their options). --format dot prints Graphviz (pipe it to "dot -Tsvg"), --format mermaid a
Mermaid flowchart.`,
		Example: `  factoryctl line graph build-until-green
  factoryctl line graph build-until-green --format dot | dot -Tsvg > line.svg
  factoryctl line graph build-until-green --format mermaid`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.lineNameArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.api()
			if err != nil {
				return err
			}
			var line struct {
				LatestDeployment *struct {
					VersionNumber int                    `json:"version_number"`
					Manifest      manifests.LineManifest `json:"manifest"`
				} `json:"latest_deployment"`
			}
			if err := c.Get(cmd.Context(), "/factory/lines/"+args[0], nil, &line); err != nil {
				return err
			}
			if line.LatestDeployment == nil {
				return &exitError{code: ExitFailed, msg: fmt.Sprintf("line %s has no deployment", args[0])}
			}
			m := line.LatestDeployment.Manifest
			switch format {
			case "text", "":
				fmt.Fprint(a.Stdout, graphText(m, line.LatestDeployment.VersionNumber))
			case "dot":
				fmt.Fprint(a.Stdout, graphDot(m))
			case "mermaid":
				fmt.Fprint(a.Stdout, graphMermaid(m))
			default:
				return &exitError{code: ExitFailed, msg: fmt.Sprintf("--format must be text, dot or mermaid, not %q", format)}
			}
			return nil
		},
	}
	graph.Flags().StringVar(&format, "format", "text", "text, dot or mermaid")
	_ = graph.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]string{"text", "dot", "mermaid"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.AddCommand(graph)
	return cmd
}

// edge is one drawn arrow of a line graph.
type edge struct{ from, to, label string }

func lineEdges(m manifests.LineManifest) []edge {
	var out []edge
	for _, t := range m.Transitions {
		if t.Type == "agentic" {
			for _, o := range t.Options {
				out = append(out, edge{t.From, o.To, t.ID + ": " + o.Name + " (agent)"})
			}
			continue
		}
		label := t.ID
		if t.Label != "" {
			label = t.Label
		}
		if t.MaxIterations != nil {
			label += fmt.Sprintf(" (max %d)", *t.MaxIterations)
		}
		out = append(out, edge{t.From, t.To, label})
	}
	return out
}

func graphText(m manifests.LineManifest, version int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "line %s (version %d), trigger %s\n\n", m.Line.Name, version, m.Trigger.Type)
	edges := lineEdges(m)
	for i, s := range m.Stages {
		marker := "  "
		if i == 0 {
			marker = "▶ "
		}
		fmt.Fprintf(&b, "%s[%s]  job %s\n", marker, s.ID, s.Job)
		n := 0
		for _, e := range edges {
			if e.from == s.ID {
				n++
			}
		}
		if n == 0 {
			fmt.Fprintf(&b, "      └─▶ (end)\n")
		}
		k := 0
		for _, e := range edges {
			if e.from != s.ID {
				continue
			}
			k++
			branch := "├─▶"
			if k == n {
				branch = "└─▶"
			}
			fmt.Fprintf(&b, "      %s %s  %s\n", branch, e.to, e.label)
		}
	}
	return b.String()
}

func graphDot(m manifests.LineManifest) string {
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %q {\n  rankdir=LR;\n  node [shape=box];\n", m.Line.Name)
	for _, s := range m.Stages {
		fmt.Fprintf(&b, "  %q [label=%q];\n", s.ID, s.ID+"\\n"+s.Job)
	}
	for _, e := range lineEdges(m) {
		fmt.Fprintf(&b, "  %q -> %q [label=%q];\n", e.from, e.to, e.label)
	}
	b.WriteString("}\n")
	return b.String()
}

func graphMermaid(m manifests.LineManifest) string {
	id := func(s string) string {
		return "s_" + strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
				return r
			}
			return '_'
		}, s)
	}
	quote := func(s string) string { return strings.ReplaceAll(s, `"`, "#quot;") }
	var b strings.Builder
	b.WriteString("flowchart LR\n")
	for _, s := range m.Stages {
		fmt.Fprintf(&b, "  %s[\"%s<br/>%s\"]\n", id(s.ID), quote(s.ID), quote(s.Job))
	}
	for _, e := range lineEdges(m) {
		fmt.Fprintf(&b, "  %s -->|\"%s\"| %s\n", id(e.from), quote(e.label), id(e.to))
	}
	return b.String()
}
