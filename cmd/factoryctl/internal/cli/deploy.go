package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/linefactory/linefactory/cmd/factoryctl/internal/client"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/tree"
)

func (a *App) validateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "validate PATH...",
		Short: "Check manifests offline (the same checks as factoryd validate)",
		Long: `validate checks job and line manifests without a server: files, or directories holding
jobs/<name>/job.toml|json and lines/*.toml|json. Every problem is printed as
"file: location: message"; the exit code is 1 when any manifest is invalid.`,
		Example: `  factoryctl validate manifests/examples
  factoryctl validate jobs/hello/job.toml lines/nightly.toml`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := tree.Validate(args, a.Stdout, a.Stderr); code != 0 {
				return &exitError{code: ExitFailed}
			}
			return nil
		},
	}
}

// deployItem is one file to deploy.
type deployItem struct {
	kind, file string
}

// deployResult is what deploy reports per file (also its JSON shape).
type deployResult struct {
	File     string   `json:"file"`
	Kind     string   `json:"kind"`
	Name     string   `json:"name"`
	Result   string   `json:"result"` // created, unchanged, invalid, error
	Version  int      `json:"version,omitempty"`
	ID       string   `json:"id,omitempty"`
	Problems []string `json:"problems,omitempty"`
}

func (a *App) deployCommand() *cobra.Command {
	var knowledgeType, knowledgeLevel string
	cmd := &cobra.Command{
		Use:   "deploy PATH...",
		Short: "Deploy knowledge, jobs and lines: created / unchanged / invalid per file",
		Long: `deploy sends manifests to the server in dependency order: knowledge first (jobs' agent
steps name knowledge items), then every job, then the lines (whose stages name the jobs).
A directory is searched for
jobs/<name>/job.toml|json, lines/*.toml|json and knowledge/<slug>.md (the slug is the
knowledge item's identifier). Each file is reported as created (a new version),
unchanged (identical to the latest version) or invalid, with the problems and their
locations; the exit code is 1 when any file is invalid.`,
		Example: `  factoryctl deploy manifests/examples
  factoryctl deploy jobs/hello/job.toml lines/greet.toml
  factoryctl deploy -o json manifests/examples | jq '.[] | select(.result == "invalid")'`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			items, err := collectDeploy(args)
			if err != nil {
				return err
			}
			c, err := a.api()
			if err != nil {
				return err
			}
			var results []deployResult
			t := newTable(a.Stdout)
			bad := 0
			for _, it := range items {
				r := a.deployOne(cmd.Context(), c, it, knowledgeType, knowledgeLevel)
				if r.Result == "invalid" || r.Result == "error" {
					bad++
				}
				results = append(results, r)
				if !a.jsonOutput() {
					detail := ""
					if r.Version > 0 {
						detail = fmt.Sprintf("version %d", r.Version)
					}
					t.row(r.Result, r.Kind, r.Name, r.File, detail)
					for _, p := range r.Problems {
						t.flush()
						fmt.Fprintf(a.Stdout, "    %s: %s\n", r.File, p)
					}
				}
			}
			if a.jsonOutput() {
				if err := printJSON(a.Stdout, results); err != nil {
					return err
				}
			} else {
				t.flush()
			}
			if bad > 0 {
				return &exitError{code: ExitFailed, msg: fmt.Sprintf("%d of %d files were not deployed", bad, len(items))}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&knowledgeType, "knowledge-type", "declarative", "type of knowledge items created from knowledge/<slug>.md")
	cmd.Flags().StringVar(&knowledgeLevel, "knowledge-level", "declarative", "level of knowledge items created from knowledge/<slug>.md")
	return cmd
}

// collectDeploy finds the files to deploy in dependency order.
func collectDeploy(args []string) ([]deployItem, error) {
	var jobs, lines, know []deployItem
	for _, arg := range args {
		info, err := os.Stat(arg)
		if err != nil {
			return nil, err
		}
		if info.IsDir() {
			j, l, k, err := tree.FindAll(arg)
			if err != nil {
				return nil, err
			}
			for _, f := range j {
				jobs = append(jobs, deployItem{kind: "job", file: f})
			}
			for _, f := range l {
				lines = append(lines, deployItem{kind: "line", file: f})
			}
			for _, f := range k {
				know = append(know, deployItem{kind: "knowledge", file: f})
			}
			continue
		}
		switch {
		case strings.HasSuffix(arg, ".md"):
			know = append(know, deployItem{kind: "knowledge", file: arg})
		case tree.IsLineFile(arg):
			lines = append(lines, deployItem{kind: "line", file: arg})
		default:
			jobs = append(jobs, deployItem{kind: "job", file: arg})
		}
	}
	// Jobs may name knowledge items (run_agent knowledge and prompts) and
	// lines name jobs: knowledge first, then jobs, then lines.
	items := append(append(know, jobs...), lines...)
	if len(items) == 0 {
		return nil, errors.New("no manifests found (looked for jobs/<name>/job.toml|json, lines/*.toml|json and knowledge/<slug>.md)")
	}
	return items, nil
}

func (a *App) deployOne(ctx context.Context, c *client.Client, it deployItem, ktype, klevel string) deployResult {
	r := deployResult{File: it.file, Kind: it.kind}
	fail := func(result string, problems ...string) deployResult {
		r.Result, r.Problems = result, problems
		return r
	}
	if it.kind == "knowledge" {
		return a.deployKnowledge(ctx, c, r, ktype, klevel)
	}
	data, format, ps := tree.ReadManifest(it.file)
	if ps != nil {
		return fail("invalid", problemStrings(ps)...)
	}
	r.Name = manifests.PeekName(data, format, it.kind)
	if r.Name == "" {
		if it.kind == "job" && (filepath.Base(it.file) == "job.toml" || filepath.Base(it.file) == "job.json") {
			r.Name = filepath.Base(filepath.Dir(it.file))
		} else {
			return fail("invalid", it.kind+".name: a name is required")
		}
	}
	req := client.Request{Method: http.MethodPost}
	if format == manifests.FormatJSON {
		req.Body = map[string]any{"manifest": rawJSON(data)}
	} else {
		req.Body, req.ContentType = data, "application/toml"
	}
	if it.kind == "job" {
		req.Path = "/jobs/" + r.Name + "/versions"
	} else {
		req.Path = "/factory/lines/" + r.Name + "/deploy"
	}
	var out struct {
		ID            string `json:"id"`
		VersionNumber int    `json:"version_number"`
	}
	status, err := c.JSON(ctx, req, &out)
	var apiErr *client.Error
	switch {
	case errors.As(err, &apiErr) && apiErr.Status == http.StatusUnprocessableEntity:
		return fail("invalid", apiProblems(apiErr)...)
	case err != nil:
		return fail("error", err.Error())
	}
	r.ID, r.Version = out.ID, out.VersionNumber
	r.Result = "created"
	if status == http.StatusOK {
		r.Result = "unchanged"
	}
	return r
}

// apiProblems lists the problems of a 422: the deploy endpoints list them
// one per line in message; others in detail[].
func apiProblems(e *client.Error) []string {
	var out []string
	for _, line := range strings.Split(e.Message, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	for _, d := range e.Detail {
		var loc []string
		for _, l := range d.Loc {
			loc = append(loc, fmt.Sprint(l))
		}
		out = append(out, fmt.Sprintf("%s: %s (%s)", strings.Join(loc, "."), d.Msg, d.Type))
	}
	return out
}

func problemStrings(ps manifests.Problems) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		if p.Path == "" {
			out[i] = p.Message
		} else {
			out[i] = p.Path + ": " + p.Message
		}
	}
	return out
}

type rawJSON []byte

func (r rawJSON) MarshalJSON() ([]byte, error) { return r, nil }

// deployKnowledge creates knowledge/<slug>.md as an item, or adds a
// version to an existing one (unchanged when identical).
func (a *App) deployKnowledge(ctx context.Context, c *client.Client, r deployResult, ktype, klevel string) deployResult {
	body, err := os.ReadFile(r.File)
	if err != nil {
		r.Result, r.Problems = "error", []string{err.Error()}
		return r
	}
	r.Name = strings.TrimSuffix(filepath.Base(r.File), ".md")
	out, status, err := pushKnowledge(ctx, c, r.Name, ktype, klevel, "markdown", string(body))
	var apiErr *client.Error
	switch {
	case errors.As(err, &apiErr) && apiErr.Status == http.StatusUnprocessableEntity:
		r.Result, r.Problems = "invalid", apiProblems(apiErr)
		return r
	case err != nil:
		r.Result, r.Problems = "error", []string{err.Error()}
		return r
	}
	r.ID, r.Version = out.ID, out.VersionNumber
	r.Result = "created"
	if status == http.StatusOK {
		r.Result = "unchanged"
	}
	return r
}

type knowledgeVersion struct {
	ID            string `json:"id"`
	Identifier    string `json:"identifier"`
	VersionNumber int    `json:"version_number"`
	Type          string `json:"type"`
	Level         string `json:"level"`
	Format        string `json:"format"`
	Body          string `json:"body"`
	ContentHash   string `json:"content_hash"`
}

func pushKnowledge(ctx context.Context, c *client.Client, slug, ktype, klevel, format, body string) (knowledgeVersion, int, error) {
	var out knowledgeVersion
	doc := map[string]any{"type": ktype, "level": klevel, "format": format, "body": body}
	// An existing item gets a version; a new one is created.
	status, err := c.JSON(ctx, client.Request{Method: http.MethodPost, Path: "/knowledge/" + slug + "/versions", Body: doc}, &out)
	if client.IsStatus(err, http.StatusNotFound) {
		doc["identifier"] = slug
		status, err = c.JSON(ctx, client.Request{Method: http.MethodPost, Path: "/knowledge", Body: doc}, &out)
	}
	return out, status, err
}
