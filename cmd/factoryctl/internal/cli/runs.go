package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/linefactory/linefactory/cmd/factoryctl/internal/client"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/run"
)

func badRunID(id string) error {
	return &exitError{code: ExitFailed, msg: fmt.Sprintf("%q is no run id: job runs start with jr_, line runs with lr_", id)}
}

func (a *App) completeRuns(ctx context.Context) []string {
	c, err := a.api()
	if err != nil {
		return nil
	}
	var out []string
	var jrs []jobRun
	if c.Get(ctx, "/job-runs", client.Query("limit", "20"), &jrs) == nil {
		for _, r := range jrs {
			out = append(out, r.ID+"\t"+r.JobName+" "+r.Status)
		}
	}
	var lrs []lineRun
	if c.Get(ctx, "/factory/line-runs", client.Query("limit", "20"), &lrs) == nil {
		for _, r := range lrs {
			out = append(out, r.ID+"\t"+r.LineName+" "+r.Status)
		}
	}
	return out
}

func (a *App) completeNames(ctx context.Context, kind string) []string {
	c, err := a.api()
	if err != nil {
		return nil
	}
	path := "/jobs"
	if kind == "line" {
		path = "/factory/lines"
	}
	var items []struct {
		Name string `json:"name"`
	}
	if c.Get(ctx, path, client.Query("limit", "200"), &items) != nil {
		return nil
	}
	var out []string
	for _, it := range items {
		out = append(out, it.Name)
	}
	return out
}

func (a *App) runIDArg(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return a.completeRuns(cmd.Context()), cobra.ShellCompDirectiveNoFileComp
}

func (a *App) getCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get RUN_ID | get job NAME | get line NAME",
		Short: "Show a job run, a line run, a job or a line",
		Long: `get shows one run by id (jr_… job runs, lr_… line runs): its status, steps or stages,
cost and failure. "get job NAME" and "get line NAME" show a job or a line and its latest
version. With -o json the API's answer is printed as is.`,
		Example: `  factoryctl get lr_0193...
  factoryctl get jr_0193... -o json | jq .step_timeline
  factoryctl get line build-until-green`,
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: a.runIDArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.api()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var path string
			switch {
			case len(args) == 2 && args[0] == "job":
				path = "/jobs/" + args[1]
			case len(args) == 2 && args[0] == "line":
				path = "/factory/lines/" + args[1]
			case len(args) == 1 && runKind(args[0]) == "job":
				path = "/job-runs/" + args[0]
			case len(args) == 1 && runKind(args[0]) == "line":
				path = "/factory/line-runs/" + args[0]
			case len(args) == 1:
				return badRunID(args[0])
			default:
				return &exitError{code: ExitFailed, msg: "usage: get RUN_ID | get job NAME | get line NAME"}
			}
			_, raw, err := c.Do(ctx, client.Request{Method: http.MethodGet, Path: path})
			if err != nil {
				return err
			}
			if a.jsonOutput() {
				return printJSON(a.Stdout, raw)
			}
			if len(args) == 2 {
				return a.printDefinition(args[0], raw)
			}
			a.printRun(args[0], raw)
			return nil
		},
	}
}

func (a *App) printDefinition(kind string, raw []byte) error {
	var d struct {
		Name                string    `json:"name"`
		LatestVersionNumber *int      `json:"latest_version_number"`
		CreatedAt           time.Time `json:"created_at"`
		LatestVersion       *struct {
			ID          string    `json:"id"`
			ContentHash string    `json:"content_hash"`
			DeployedAt  time.Time `json:"deployed_at"`
		} `json:"latest_version"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return err
	}
	fmt.Fprintf(a.Stdout, "%s %s\n", kind, d.Name)
	if d.LatestVersion != nil && d.LatestVersionNumber != nil {
		fmt.Fprintf(a.Stdout, "  version %d  %s  deployed %s\n  %s\n", *d.LatestVersionNumber, d.LatestVersion.ID, ago(d.LatestVersion.DeployedAt), d.LatestVersion.ContentHash)
	}
	return nil
}

func (a *App) printRun(id string, raw []byte) {
	w := a.Stdout
	if runKind(id) == "job" {
		var r jobRun
		_ = json.Unmarshal(raw, &r)
		fmt.Fprintf(w, "job run %s  %s  %s\n", r.ID, r.JobName, r.Status)
		if r.LineRunID != nil {
			fmt.Fprintf(w, "  line run %s  stage %s\n", *r.LineRunID, deref(r.StageName))
		}
		fmt.Fprintf(w, "  created %s  duration %s  cost %s\n", ago(r.CreatedAt), span(r.StartedAt, r.CompletedAt), cents(r.TotalCostCents))
		t := newTable(w, "  STEP", "STATUS", "DURATION", "EXIT", "ERROR")
		for _, s := range r.StepTimeline {
			exit := "-"
			if s.ExitCode != nil {
				exit = fmt.Sprint(*s.ExitCode)
			}
			t.row("  "+s.TaskName+"/"+s.Name, s.Status, span(s.StartedAt, s.CompletedAt), exit, dash(deref(s.ErrorCode)))
		}
		t.flush()
		if r.ErrorMessage != nil {
			fmt.Fprintf(w, "  error: %s (%s, class %s)\n", *r.ErrorMessage, dash(deref(r.ErrorCode)), dash(deref(r.FailureClass)))
		}
		if len(r.ResultPayload) > 0 {
			b, _ := json.Marshal(r.ResultPayload)
			fmt.Fprintf(w, "  outputs: %s\n", b)
		}
		return
	}
	var r lineRun
	_ = json.Unmarshal(raw, &r)
	fmt.Fprintf(w, "line run %s  %s  %s\n", r.ID, r.LineName, r.Status)
	fmt.Fprintf(w, "  created %s  duration %s  cost %s\n", ago(r.CreatedAt), span(r.StartedAt, r.CompletedAt), cents(r.TotalCostCents))
	t := newTable(w, "  STAGE", "ITER", "STATUS", "DURATION", "COST", "JOB RUN")
	for _, s := range r.Stages {
		t.row("  "+s.StageName, fmt.Sprint(s.Iteration), s.Status, span(s.StartedAt, s.CompletedAt), cents(s.TotalCostCents), dash(deref(s.JobRunID)))
	}
	t.flush()
	if p := r.path(); p != "" {
		fmt.Fprintf(w, "  path: %s\n", p)
	}
	if f := r.Failure; f != nil {
		fmt.Fprintf(w, "  failure: %s  domain: %s  %s\n", dash(deref(f.Code)), dash(f.Domain), deref(f.ErrorMessage))
	}
}

func (a *App) listCommand() *cobra.Command {
	var status, line, job, since string
	var limit, offset int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List runs across all jobs and lines, newest first",
		Long: `list shows job runs and line runs together, newest first. --job shows only the runs of
a job, --line only those of a line; --status and --since (RFC 3339, or a duration such as
90m, 24h, 7d) filter both. "list jobs" and "list lines" list the definitions.`,
		Example: `  factoryctl list
  factoryctl list --status failed --since 24h
  factoryctl list --line build-until-green --limit 5
  factoryctl list -o json | jq '.[].id'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.api()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if limit < 1 || limit > 200 || offset < 0 || limit+offset > 200 {
				return &exitError{code: ExitFailed, msg: "--limit must be 1..200 and --limit plus --offset at most 200"}
			}
			rows, err := a.fetchRuns(ctx, c, status, line, job, since, limit+offset)
			if err != nil {
				return err
			}
			return a.printRuns(rows, limit, offset)
		},
	}
	f := cmd.Flags()
	f.StringVar(&status, "status", "", "only runs with this status")
	f.StringVar(&line, "line", "", "only runs of this line")
	f.StringVar(&job, "job", "", "only runs of this job")
	f.StringVar(&since, "since", "", "only runs created since: RFC 3339, or a duration (90m, 24h, 7d)")
	f.IntVar(&limit, "limit", 20, "how many runs, 1..200")
	f.IntVar(&offset, "offset", 0, "runs to skip")
	_ = cmd.RegisterFlagCompletionFunc("status", cobra.FixedCompletions(statusNames(), cobra.ShellCompDirectiveNoFileComp))
	cmd.AddCommand(a.listDefinitions("jobs"), a.listDefinitions("lines"))
	return cmd
}

// runRow is one run in a listing.
type runRow struct {
	kind, id, name, status, duration, cost string
	created                                time.Time
	raw                                    json.RawMessage
}

// fetchRuns fetches the newest n job runs and line runs that pass the
// filters (a job's, or a line's, or both kinds).
func (a *App) fetchRuns(ctx context.Context, c *client.Client, status, line, job, since string, n int) ([]runRow, error) {
	q := client.Query("status", status, "since", since, "limit", client.Itoa(n))
	var rows []runRow
	if line == "" {
		q2 := client.Query("status", status, "since", since, "limit", client.Itoa(n), "job", job)
		var raws []json.RawMessage
		// No job run waits: --status waiting lists line runs only.
		if status != string(run.Waiting) {
			if err := c.Get(ctx, "/job-runs", q2, &raws); err != nil {
				return nil, err
			}
		}
		for _, raw := range raws {
			var r jobRun
			_ = json.Unmarshal(raw, &r)
			rows = append(rows, runRow{"job", r.ID, r.JobName, r.Status, span(r.StartedAt, r.CompletedAt), cents(r.TotalCostCents), r.CreatedAt, raw})
		}
	}
	if job == "" {
		q.Set("line", line)
		if line == "" {
			q.Del("line")
		}
		var raws []json.RawMessage
		// No line run times out (it fails with line_timeout).
		if status != string(run.TimedOut) {
			if err := c.Get(ctx, "/factory/line-runs", q, &raws); err != nil {
				return nil, err
			}
		}
		for _, raw := range raws {
			var r lineRun
			_ = json.Unmarshal(raw, &r)
			rows = append(rows, runRow{"line", r.ID, r.LineName, r.Status, span(r.StartedAt, r.CompletedAt), cents(r.TotalCostCents), r.CreatedAt, raw})
		}
	}
	return rows, nil
}

// printRuns prints a page of runs, newest first.
func (a *App) printRuns(rows []runRow, limit, offset int) error {
	sort.SliceStable(rows, func(i, j int) bool {
		if !rows[i].created.Equal(rows[j].created) {
			return rows[i].created.After(rows[j].created)
		}
		return rows[i].id > rows[j].id
	})
	if offset < len(rows) {
		rows = rows[offset:]
	} else {
		rows = nil
	}
	if len(rows) > limit {
		rows = rows[:limit]
	}
	if a.jsonOutput() {
		out := make([]json.RawMessage, len(rows))
		for i, r := range rows {
			out[i] = r.raw
		}
		return printJSON(a.Stdout, out)
	}
	t := newTable(a.Stdout, "KIND", "ID", "NAME", "STATUS", "CREATED", "DURATION", "COST")
	for _, r := range rows {
		t.row(r.kind, r.id, r.name, r.status, ago(r.created), r.duration, r.cost)
	}
	t.flush()
	return nil
}

func (a *App) listDefinitions(what string) *cobra.Command {
	return &cobra.Command{
		Use:     what,
		Short:   "List the deployed " + what + " by name",
		Example: "  factoryctl list " + what,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.api()
			if err != nil {
				return err
			}
			path := "/jobs"
			if what == "lines" {
				path = "/factory/lines"
			}
			var raws []json.RawMessage
			if err := c.Get(cmd.Context(), path, client.Query("limit", "200"), &raws); err != nil {
				return err
			}
			if a.jsonOutput() {
				return printJSON(a.Stdout, raws)
			}
			t := newTable(a.Stdout, "NAME", "VERSION", "CREATED")
			for _, raw := range raws {
				var d struct {
					Name    string    `json:"name"`
					Version *int      `json:"latest_version_number"`
					Created time.Time `json:"created_at"`
				}
				_ = json.Unmarshal(raw, &d)
				v := "-"
				if d.Version != nil {
					v = fmt.Sprint(*d.Version)
				}
				t.row(d.Name, v, ago(d.Created))
			}
			t.flush()
			return nil
		},
	}
}

func (a *App) logsCommand() *cobra.Command {
	var follow bool
	var step string
	cmd := &cobra.Command{
		Use:   "logs RUN_ID",
		Short: "Print a job run's or a whole line run's logs",
		Long: `logs prints the output of a job run's steps, or of every stage of a line run (stage by
stage). -f follows the logs until the run ends, each line prefixed with its stage and
step ("[build greet/say]"), stderr lines marked with "!".`,
		Example: `  factoryctl logs jr_0193...
  factoryctl logs -f lr_0193...
  factoryctl logs jr_0193... --step greet/say`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.runIDArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			kind := runKind(id)
			if kind == "" {
				return badRunID(id)
			}
			c, err := a.api()
			if err != nil {
				return err
			}
			if follow {
				if step != "" && kind == "job" {
					return a.followStep(cmd.Context(), c, id, step)
				}
				return a.streamLogs(cmd.Context(), c, id, func(s string) { fmt.Fprint(a.Stdout, s) })
			}
			path := "/job-runs/" + id + "/logs"
			if kind == "line" {
				path = "/factory/line-runs/" + id + "/logs"
			}
			_, body, err := c.Do(cmd.Context(), client.Request{Method: http.MethodGet, Path: path, Query: client.Query("step", step)})
			if err != nil {
				return err
			}
			_, err = a.Stdout.Write(body)
			return err
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow the logs until the run ends")
	cmd.Flags().StringVar(&step, "step", "", "only this step of a job run: task/step (or a bare step name)")
	return cmd
}

func (a *App) followStep(ctx context.Context, c *client.Client, id, step string) error {
	_, err := c.Stream(ctx, "/job-runs/"+id+"/logs", client.Query("follow", "true", "step", step), func(ev client.Event) {
		var l struct {
			Data string `json:"data"`
		}
		if ev.Event == "log" && json.Unmarshal([]byte(ev.Data), &l) == nil {
			fmt.Fprint(a.Stdout, l.Data)
		}
	})
	return err
}

func (a *App) stopCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "stop RUN_ID",
		Short: "Stop a job run or a line run",
		Long:  `stop asks the server to stop a run; a run that has finished is left as it is.`,
		Example: `  factoryctl stop lr_0193... --reason "wrong params"
  factoryctl stop jr_0193...`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.runIDArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			c, err := a.api()
			if err != nil {
				return err
			}
			body := map[string]any{}
			if reason != "" {
				body["reason"] = reason
			}
			var path string
			switch runKind(id) {
			case "job":
				var r jobRun
				if err := c.Get(cmd.Context(), "/job-runs/"+id, nil, &r); err != nil {
					return err
				}
				path = "/jobs/" + r.JobName + "/runs/" + id + "/stop"
			case "line":
				path = "/factory/line-runs/" + id + "/stop"
			default:
				return badRunID(id)
			}
			_, raw, err := c.Do(cmd.Context(), client.Request{Method: http.MethodPost, Path: path, Body: body})
			if err != nil {
				return err
			}
			if a.jsonOutput() {
				return printJSON(a.Stdout, raw)
			}
			var r struct {
				Status string `json:"status"`
			}
			_ = json.Unmarshal(raw, &r)
			if finalJob(r.Status) {
				fmt.Fprintf(a.Stdout, "%s has ended: %s\n", id, r.Status)
			} else {
				fmt.Fprintf(a.Stdout, "stopping %s (%s)\n", id, r.Status)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the run is stopped (recorded on the run)")
	return cmd
}

func (a *App) retryCommand() *cobra.Command {
	var fromStage string
	var wait, follow bool
	cmd := &cobra.Command{
		Use:   "retry LINE_RUN_ID",
		Short: "Retry a failed line run as a new run, from its failed stage",
		Long: `retry starts a new line run that carries the visits before the failed stage (or
--from-stage) over from the failed run. --wait and --follow work as with run.`,
		Example: `  factoryctl retry lr_0193...
  factoryctl retry lr_0193... --from-stage build --wait`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.runIDArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if runKind(id) != "line" {
				return &exitError{code: ExitFailed, msg: fmt.Sprintf("%q is no line run id (lr_…): only line runs are retried", id)}
			}
			c, err := a.api()
			if err != nil {
				return err
			}
			body := map[string]any{"action": "retry"}
			if fromStage != "" {
				body["from_stage"] = fromStage
			}
			_, raw, err := c.Do(cmd.Context(), client.Request{Method: http.MethodPost, Path: "/factory/line-runs/" + id + "/control", Body: body})
			if err != nil {
				return err
			}
			var r lineRun
			_ = json.Unmarshal(raw, &r)
			if wait || follow {
				fmt.Fprintf(a.progress(), "retrying %s as %s\n", id, r.ID)
				return a.waitRun(cmd.Context(), c, r.ID, follow)
			}
			if a.jsonOutput() {
				return printJSON(a.Stdout, raw)
			}
			fmt.Fprintf(a.Stdout, "retrying %s as %s (%s)\n", id, r.ID, r.Status)
			return nil
		},
	}
	cmd.Flags().StringVar(&fromStage, "from-stage", "", "re-run from this stage instead of the failed one")
	cmd.Flags().BoolVarP(&wait, "wait", "w", false, "wait for the new run to end (exit code as with run)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "stream the new run's logs while waiting")
	return cmd
}

func (a *App) selectCommand() *cobra.Command {
	var transition string
	cmd := &cobra.Command{
		Use:   "select LINE_RUN_ID [OPTION]",
		Short: "Answer a line run waiting for a selection (agentic transition)",
		Long: `select answers a line run that waits at an agentic transition: it chooses one of the
transition's options. Without OPTION it lists the options of the transitions that leave
the stage the run is at.`,
		Example: `  factoryctl select lr_0193...                       # list the options
  factoryctl select lr_0193... ship --transition review-outcome`,
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: a.runIDArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if runKind(id) != "line" {
				return &exitError{code: ExitFailed, msg: fmt.Sprintf("%q is no line run id (lr_…)", id)}
			}
			c, err := a.api()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var r lineRun
			if err := c.Get(ctx, "/factory/line-runs/"+id, nil, &r); err != nil {
				return err
			}
			agentic, err := a.waitingTransitions(ctx, c, r)
			if err != nil {
				return err
			}
			if len(args) == 1 {
				return a.printTransitions(id, r, agentic)
			}
			option := args[1]
			if transition == "" {
				if transition, err = optionTransition(agentic, option, id); err != nil {
					return err
				}
			}
			_, raw, err := c.Do(ctx, client.Request{Method: http.MethodPost, Path: "/factory/line-runs/" + id + "/control",
				Body: map[string]any{"action": "select", "transition_id": transition, "option": option}})
			if err != nil {
				return err
			}
			if a.jsonOutput() {
				return printJSON(a.Stdout, raw)
			}
			fmt.Fprintf(a.Stdout, "selected %s of %s for %s\n", option, transition, id)
			return nil
		},
	}
	cmd.Flags().StringVar(&transition, "transition", "", "the transition id (default: the waiting transition that has OPTION)")
	return cmd
}

// printTransitions prints the options of a line run's agentic
// transitions, and how to answer.
func (a *App) printTransitions(id string, r lineRun, agentic []manifests.Transition) error {
	if a.jsonOutput() {
		return printJSON(a.Stdout, agentic)
	}
	if len(agentic) == 0 {
		fmt.Fprintf(a.Stdout, "line run %s (%s) has no agentic transition from its current stage\n", id, r.Status)
		return nil
	}
	if r.Status != string(run.Waiting) {
		fmt.Fprintf(a.Stdout, "line run %s is %s, not waiting for a selection; its agentic transitions:\n", id, r.Status)
	}
	t := newTable(a.Stdout, "TRANSITION", "OPTION", "TO", "LABEL")
	for _, tr := range agentic {
		for _, o := range tr.Options {
			t.row(tr.ID, o.Name, o.To, o.Label)
		}
	}
	t.flush()
	fmt.Fprintf(a.Stdout, "answer with: factoryctl select %s OPTION [--transition ID]\n", id)
	return nil
}

// optionTransition finds the one transition of a line run's that has
// option.
func optionTransition(agentic []manifests.Transition, option, id string) (string, error) {
	transition := ""
	for _, tr := range agentic {
		for _, o := range tr.Options {
			if o.Name == option {
				if transition != "" && transition != tr.ID {
					return "", &exitError{code: ExitFailed, msg: fmt.Sprintf("option %q is in several transitions: pass --transition", option)}
				}
				transition = tr.ID
			}
		}
	}
	if transition == "" {
		return "", &exitError{code: ExitFailed, msg: fmt.Sprintf("no waiting transition has option %q: pass --transition, or run factoryctl select %s to list them", option, id)}
	}
	return transition, nil
}

// waitingTransitions returns the agentic transitions leaving the stage a
// line run is at (its last visit), from the line version it runs.
func (a *App) waitingTransitions(ctx context.Context, c *client.Client, r lineRun) ([]manifests.Transition, error) {
	var line struct {
		LatestDeployment *struct {
			ID       string                 `json:"id"`
			Manifest manifests.LineManifest `json:"manifest"`
		} `json:"latest_deployment"`
	}
	if err := c.Get(ctx, "/factory/lines/"+r.LineName, nil, &line); err != nil {
		return nil, err
	}
	if line.LatestDeployment == nil {
		return nil, nil
	}
	at := ""
	if n := len(r.Stages); n > 0 {
		at = r.Stages[n-1].StageName
	}
	var out []manifests.Transition
	for _, t := range line.LatestDeployment.Manifest.Transitions {
		if t.Type == "agentic" && (at == "" || t.From == at) {
			out = append(out, t)
		}
	}
	return out, nil
}
