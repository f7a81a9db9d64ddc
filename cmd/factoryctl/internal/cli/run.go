package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/spf13/cobra"

	"github.com/linefactory/linefactory/cmd/factoryctl/internal/client"
	"github.com/linefactory/linefactory/manifests/run"
)

type runOptions struct {
	params     []string
	paramsFile string
	version    string
	wait       bool
	follow     bool
	quiet      bool
}

func (a *App) runCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run job|line NAME",
		Short: "Start a job run or a line run, and optionally wait for it",
		Example: `  factoryctl run job hello -p who=you --wait
  factoryctl run line build-until-green -p who=you --wait --follow
  factoryctl run line nightly --params-file params.toml`,
	}
	cmd.AddCommand(a.runKindCommand("job"), a.runKindCommand("line"))
	return cmd
}

func (a *App) runKindCommand(kind string) *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   kind + " NAME",
		Short: "Start a run of a " + kind,
		Long: fmt.Sprintf(`Start a run of a %[1]s's latest version. Params come from --params-file (JSON or TOML)
and -p key=value (which wins); a -p value is typed by the %[1]s's params (integer,
number, boolean, array as JSON or comma-separated, else string).

--wait shows the run's progress (steps, or stages with the path taken through the
line, with status, duration and cost) and exits with its outcome: 0 succeeded,
1 failed, 2 cancelled or timed out. --follow also streams the logs (implies --wait).`, kind),
		Example: fmt.Sprintf(`  factoryctl run %[1]s NAME -p who=you
  factoryctl run %[1]s NAME -p count=3 -p tags='["a","b"]' --wait
  factoryctl run %[1]s NAME --params-file params.json --wait --follow`, kind),
		Args: cobra.ExactArgs(1),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return a.completeNames(cmd.Context(), kind), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.startRun(cmd.Context(), kind, args[0], o)
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&o.params, "param", "p", nil, "a param: key=value (repeatable)")
	f.StringVar(&o.paramsFile, "params-file", "", "a JSON or TOML file of params")
	f.BoolVarP(&o.wait, "wait", "w", false, "wait for the run to end, showing progress; the exit code is its outcome")
	f.BoolVarP(&o.follow, "follow", "f", false, "stream the run's logs while waiting (implies --wait)")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "print only the run id (with --wait: no progress, the exit code tells the outcome)")
	if kind == "job" {
		f.StringVar(&o.version, "version-id", "", "run this job version (default: the latest)")
	}
	return cmd
}

// paramTypes maps each param to its type and item type.
type paramType struct{ typ, items string }

func (a *App) paramTypes(ctx context.Context, c *client.Client, kind, name string) (map[string]paramType, error) {
	types := map[string]paramType{}
	if kind == "job" {
		var job struct {
			LatestVersion *struct {
				Manifest struct {
					Job struct {
						Params map[string]struct {
							Type  string `json:"type"`
							Items string `json:"items"`
						} `json:"params"`
					} `json:"job"`
				} `json:"manifest"`
			} `json:"latest_version"`
		}
		if err := c.Get(ctx, "/jobs/"+name, nil, &job); err != nil {
			return nil, err
		}
		if job.LatestVersion != nil {
			for k, p := range job.LatestVersion.Manifest.Job.Params {
				types[k] = paramType{p.Type, p.Items}
			}
		}
		return types, nil
	}
	var line struct {
		LatestDeployment *struct {
			InputParams []struct {
				Name  string  `json:"name"`
				Type  string  `json:"type"`
				Items *string `json:"items"`
			} `json:"input_params"`
		} `json:"latest_deployment"`
	}
	if err := c.Get(ctx, "/factory/lines/"+name, nil, &line); err != nil {
		return nil, err
	}
	if line.LatestDeployment != nil {
		for _, p := range line.LatestDeployment.InputParams {
			types[p.Name] = paramType{p.Type, deref(p.Items)}
		}
	}
	return types, nil
}

// typedValue converts a -p value by its param's type.
func typedValue(raw string, t paramType) (any, error) {
	scalar := func(s, typ string) (any, error) {
		switch typ {
		case "integer":
			return strconv.ParseInt(s, 10, 64)
		case "number":
			return strconv.ParseFloat(s, 64)
		case "boolean":
			return strconv.ParseBool(s)
		}
		return s, nil
	}
	if t.typ == "array" {
		if strings.HasPrefix(strings.TrimSpace(raw), "[") {
			var v []any
			if err := json.Unmarshal([]byte(raw), &v); err != nil {
				return nil, fmt.Errorf("not a JSON array: %w", err)
			}
			return v, nil
		}
		out := []any{}
		if raw == "" {
			return out, nil
		}
		for _, part := range strings.Split(raw, ",") {
			v, err := scalar(strings.TrimSpace(part), t.items)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return scalar(raw, t.typ)
}

func (a *App) buildParams(ctx context.Context, c *client.Client, kind, name string, o runOptions) (map[string]any, error) {
	params := map[string]any{}
	if o.paramsFile != "" {
		data, err := os.ReadFile(o.paramsFile)
		if err != nil {
			return nil, err
		}
		if strings.EqualFold(filepath.Ext(o.paramsFile), ".toml") {
			if _, err := toml.Decode(string(data), &params); err != nil {
				return nil, fmt.Errorf("%s: %w", o.paramsFile, err)
			}
		} else if err := json.Unmarshal(data, &params); err != nil {
			return nil, fmt.Errorf("%s: want a JSON object: %w", o.paramsFile, err)
		}
	}
	if len(o.params) == 0 {
		return params, nil
	}
	types, err := a.paramTypes(ctx, c, kind, name)
	if err != nil {
		return nil, err
	}
	for _, kv := range o.params {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, &exitError{code: ExitFailed, msg: fmt.Sprintf("-p %q: want key=value", kv)}
		}
		t, known := types[k]
		if !known {
			t = paramType{typ: "string"}
		}
		val, err := typedValue(v, t)
		if err != nil {
			return nil, &exitError{code: ExitFailed, msg: fmt.Sprintf("-p %s: %s expects %s: %v", kv, k, t.typ, err)}
		}
		params[k] = val
	}
	return params, nil
}

func (a *App) startRun(ctx context.Context, kind, name string, o runOptions) error {
	c, err := a.api()
	if err != nil {
		return err
	}
	params, err := a.buildParams(ctx, c, kind, name, o)
	if err != nil {
		return err
	}
	body := map[string]any{"params": params}
	path := "/factory/lines/" + name + "/runs"
	if kind == "job" {
		path = "/jobs/" + name + "/runs"
		if o.version != "" {
			body["version_id"] = o.version
		}
	}
	_, raw, err := c.Do(ctx, client.Request{Method: http.MethodPost, Path: path, Body: body})
	if err != nil {
		return err
	}
	var started struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(raw, &started); err != nil {
		return err
	}
	if o.quiet {
		fmt.Fprintln(a.Stdout, started.ID)
		if !o.wait && !o.follow {
			return nil
		}
		status, err := a.waitQuiet(ctx, c, started.ID)
		if err != nil {
			return err
		}
		if code := statusExit(status); code != ExitOK {
			return &exitError{code: code}
		}
		return nil
	}
	if !o.wait && !o.follow {
		if a.jsonOutput() {
			return printJSON(a.Stdout, raw)
		}
		fmt.Fprintf(a.Stdout, "started %s run %s (%s)\n", kind, started.ID, started.Status)
		fmt.Fprintf(a.Stdout, "  factoryctl get %s     factoryctl logs -f %s\n", started.ID, started.ID)
		return nil
	}
	fmt.Fprintf(a.progress(), "started %s run %s\n", kind, started.ID)
	return a.waitRun(ctx, c, started.ID, o.follow)
}

// waitRun follows a run until it ends, printing progress (and logs with
// follow), then its summary; the exit code is its outcome.
func (a *App) waitRun(ctx context.Context, c *client.Client, id string, follow bool) error {
	out := a.progress()
	var mu sync.Mutex // progress lines and log lines do not interleave mid-line
	write := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = io.WriteString(out, s)
	}
	var logsDone chan struct{}
	logCtx, stopLogs := context.WithCancel(ctx)
	defer stopLogs()
	if follow {
		logsDone = make(chan struct{})
		go func() {
			defer close(logsDone)
			_ = a.streamLogs(logCtx, c, id, write)
		}()
	}
	var (
		status string
		raw    []byte
		err    error
	)
	if runKind(id) == "job" {
		status, raw, err = a.pollJob(ctx, c, id, write)
	} else {
		status, raw, err = a.pollLine(ctx, c, id, write)
	}
	if err != nil {
		return err
	}
	if follow {
		// The stream ends by itself once the run is final; give it a moment
		// to deliver the last chunks.
		select {
		case <-logsDone:
		case <-time.After(10 * time.Second):
			stopLogs()
			<-logsDone
		}
	}
	if a.jsonOutput() {
		if err := printJSON(a.Stdout, raw); err != nil {
			return err
		}
	} else {
		a.printSummary(raw, id)
	}
	if code := statusExit(status); code != ExitOK {
		return &exitError{code: code}
	}
	return nil
}

// waitQuiet waits for a run to end without printing anything.
func (a *App) waitQuiet(ctx context.Context, c *client.Client, id string) (string, error) {
	path := "/job-runs/" + id
	final := finalJob
	if runKind(id) == "line" {
		path, final = "/factory/line-runs/"+id, finalLine
	}
	for {
		var r struct {
			Status string `json:"status"`
		}
		if err := c.Get(ctx, path, nil, &r); err != nil {
			return "", err
		}
		if final(r.Status) {
			return r.Status, nil
		}
		if err := a.sleep(ctx); err != nil {
			return "", err
		}
	}
}

// pollJob prints each step as its status changes.
func (a *App) pollJob(ctx context.Context, c *client.Client, id string, write func(string)) (string, []byte, error) {
	seen := map[string]string{}
	lastStatus := ""
	for {
		_, raw, err := c.Do(ctx, client.Request{Method: http.MethodGet, Path: "/job-runs/" + id})
		if err != nil {
			return "", nil, err
		}
		var r jobRun
		if err := json.Unmarshal(raw, &r); err != nil {
			return "", nil, err
		}
		for _, s := range r.StepTimeline {
			key := s.TaskName + "/" + s.Name
			if s.Status == string(run.Pending) || seen[key] == s.Status {
				continue
			}
			seen[key] = s.Status
			line := fmt.Sprintf("  step %-24s %-10s %s", key, s.Status, span(s.StartedAt, s.CompletedAt))
			if s.ErrorCode != nil {
				line += "  " + *s.ErrorCode
			}
			write(line + "\n")
		}
		if r.Status != lastStatus {
			write(fmt.Sprintf("%s  %s\n", r.JobName, r.Status))
			lastStatus = r.Status
		}
		if finalJob(r.Status) {
			return r.Status, raw, nil
		}
		if err := a.sleep(ctx); err != nil {
			return "", nil, err
		}
	}
}

// pollLine prints each stage visit as its status changes, and the
// transitions taken.
func (a *App) pollLine(ctx context.Context, c *client.Client, id string, write func(string)) (string, []byte, error) {
	seen := map[int]string{}
	lastStatus := ""
	for {
		_, raw, err := c.Do(ctx, client.Request{Method: http.MethodGet, Path: "/factory/line-runs/" + id})
		if err != nil {
			return "", nil, err
		}
		var r lineRun
		if err := json.Unmarshal(raw, &r); err != nil {
			return "", nil, err
		}
		for i, s := range r.Stages {
			if seen[i] == s.Status {
				continue
			}
			seen[i] = s.Status
			line := fmt.Sprintf("  stage %-16s #%d  %-10s %-8s %s", s.StageName, s.Iteration, s.Status, span(s.StartedAt, s.CompletedAt), cents(s.TotalCostCents))
			if s.Carried {
				line += "  (carried)"
			}
			write(line + "\n")
		}
		if r.Status != lastStatus {
			line := fmt.Sprintf("%s  %s", r.LineName, r.Status)
			if r.Status == string(run.Waiting) {
				line += fmt.Sprintf("  (a transition needs a selection: factoryctl select %s)", r.ID)
			}
			write(line + "\n")
			lastStatus = r.Status
		}
		if finalLine(r.Status) {
			return r.Status, raw, nil
		}
		if err := a.sleep(ctx); err != nil {
			return "", nil, err
		}
	}
}

func (a *App) sleep(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(a.PollInterval):
		return nil
	}
}

// printSummary prints a finished run's outcome.
func (a *App) printSummary(raw []byte, id string) {
	w := a.Stdout
	if runKind(id) == "job" {
		var r jobRun
		_ = json.Unmarshal(raw, &r)
		fmt.Fprintf(w, "job run %s %s in %s, cost %s\n", r.ID, r.Status, span(r.StartedAt, r.CompletedAt), cents(r.TotalCostCents))
		if r.Status != string(run.Succeeded) {
			fmt.Fprintf(w, "  error: %s  class: %s  %s\n", dash(deref(r.ErrorCode)), dash(deref(r.FailureClass)), deref(r.ErrorMessage))
		}
		return
	}
	var r lineRun
	_ = json.Unmarshal(raw, &r)
	fmt.Fprintf(w, "line run %s %s in %s, cost %s\n", r.ID, r.Status, span(r.StartedAt, r.CompletedAt), cents(r.TotalCostCents))
	if p := r.path(); p != "" {
		fmt.Fprintf(w, "  path: %s\n", p)
	}
	if f := r.Failure; f != nil {
		fmt.Fprintf(w, "  failure: %s  domain: %s", dash(deref(f.Code)), dash(f.Domain))
		if f.StageName != nil {
			fmt.Fprintf(w, "  stage: %s", *f.StageName)
		}
		if f.StageStep != nil {
			fmt.Fprintf(w, "  step: %s", *f.StageStep)
		}
		if f.ErrorCode != nil {
			fmt.Fprintf(w, "  error_code: %s", *f.ErrorCode)
		}
		fmt.Fprintln(w)
		if f.ErrorMessage != nil {
			fmt.Fprintf(w, "  %s\n", *f.ErrorMessage)
		}
	}
}

// streamLogs follows a run's logs, each line prefixed with its source.
func (a *App) streamLogs(ctx context.Context, c *client.Client, id string, write func(string)) error {
	path := "/job-runs/" + id + "/logs"
	if runKind(id) == "line" {
		path = "/factory/line-runs/" + id + "/logs"
	}
	// Partial lines are kept per source until their newline arrives.
	partial := map[string]string{}
	_, err := c.Stream(ctx, path, client.Query("follow", "true"), func(ev client.Event) {
		if ev.Event != "log" {
			return
		}
		var l struct {
			Stage  string `json:"stage"`
			Step   string `json:"step"`
			Stream string `json:"stream"`
			Data   string `json:"data"`
		}
		if json.Unmarshal([]byte(ev.Data), &l) != nil {
			return
		}
		prefix := "[" + l.Step + "]"
		if l.Stage != "" {
			prefix = "[" + l.Stage + " " + l.Step + "]"
		}
		if l.Stream == "stderr" {
			prefix += "!"
		}
		text := partial[prefix] + l.Data
		lines := strings.SplitAfter(text, "\n")
		partial[prefix] = lines[len(lines)-1]
		var b strings.Builder
		for _, ln := range lines[:len(lines)-1] {
			b.WriteString(prefix + " " + ln)
		}
		if b.Len() > 0 {
			write(b.String())
		}
	})
	keys := make([]string, 0, len(partial))
	for k := range partial {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if partial[k] != "" {
			write(k + " " + partial[k] + "\n")
		}
	}
	return err
}
