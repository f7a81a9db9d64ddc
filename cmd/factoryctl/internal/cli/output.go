package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/linefactory/linefactory/manifests/run"
)

// printJSON prints a value as indented JSON with a trailing newline; raw
// JSON bytes are re-indented.
func printJSON(w io.Writer, v any) error {
	if raw, ok := v.([]byte); ok {
		v = json.RawMessage(raw)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// table prints aligned columns.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

func (t *table) row(cols ...string) { fmt.Fprintln(t.tw, strings.Join(cols, "\t")) }

func (t *table) flush() { _ = t.tw.Flush() }

// cents renders a cost in cents as dollars.
func cents(c int64) string { return fmt.Sprintf("$%d.%02d", c/100, c%100) }

// span renders how long something ran: until end, or until now while it
// runs; "-" before it starts.
func span(start, end *time.Time) string {
	if start == nil {
		return "-"
	}
	stop := time.Now()
	if end != nil {
		stop = *end
	}
	d := stop.Sub(*start)
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return t.Local().Format("2006-01-02 15:04")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ---------------------------------------------------------------- API shapes

type jobRun struct {
	ID             string          `json:"id"`
	JobName        string          `json:"job_name"`
	JobVersionID   string          `json:"job_version_id"`
	Status         string          `json:"status"`
	StepTimeline   []timelineEntry `json:"step_timeline"`
	StartedAt      *time.Time      `json:"started_at"`
	CompletedAt    *time.Time      `json:"completed_at"`
	CreatedAt      time.Time       `json:"created_at"`
	ErrorMessage   *string         `json:"error_message"`
	ErrorCode      *string         `json:"error_code"`
	FailureClass   *string         `json:"failure_class"`
	TotalCostCents int64           `json:"total_cost_cents"`
	ResultPayload  map[string]any  `json:"result_payload"`
	LineRunID      *string         `json:"line_run_id"`
	StageName      *string         `json:"stage_name"`
}

type timelineEntry struct {
	Name         string     `json:"name"`
	TaskName     string     `json:"task_name"`
	Status       string     `json:"status"`
	StartedAt    *time.Time `json:"started_at"`
	CompletedAt  *time.Time `json:"completed_at"`
	ErrorMessage *string    `json:"error_message"`
	ErrorCode    *string    `json:"error_code"`
	ExitCode     *int       `json:"exit_code"`
}

type lineRun struct {
	ID             string          `json:"id"`
	LineName       string          `json:"line_name"`
	Status         string          `json:"status"`
	CreatedAt      time.Time       `json:"created_at"`
	StartedAt      *time.Time      `json:"started_at"`
	CompletedAt    *time.Time      `json:"completed_at"`
	Stages         []lineRunStage  `json:"stages"`
	TotalCostCents int64           `json:"total_cost_cents"`
	ErrorMessage   *string         `json:"error_message"`
	Failure        *lineRunFailure `json:"failure"`
	LineVersionID  *string         `json:"line_version_id"`
	Transitions    []struct {
		ID   string `json:"id"`
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"transitions"`
	StopReason *string `json:"stop_reason"`
}

type lineRunStage struct {
	StageName      string     `json:"stage_name"`
	Iteration      int        `json:"iteration"`
	Status         string     `json:"status"`
	JobRunID       *string    `json:"job_run_id"`
	TotalCostCents int64      `json:"total_cost_cents"`
	StartedAt      *time.Time `json:"started_at"`
	CompletedAt    *time.Time `json:"completed_at"`
	Carried        bool       `json:"carried"`
}

type lineRunFailure struct {
	Code         *string `json:"code"`
	Domain       string  `json:"domain"`
	ErrorCode    *string `json:"error_code"`
	FailureClass *string `json:"failure_class"`
	ErrorMessage *string `json:"error_message"`
	StageName    *string `json:"stage_name"`
	StageStep    *string `json:"stage_step"`
}

// finalJob and finalLine tell whether a job run's or line run's status is
// final (manifests/run's terminal sets).
func finalJob(status string) bool  { return run.JobRun.Terminal(run.Status(status)) }
func finalLine(status string) bool { return run.LineRun.Terminal(run.Status(status)) }

// statusNames are the statuses a run listing can filter on: a job run's
// and a line run's.
func statusNames() []string {
	statuses := []run.Status{run.Queued, run.Running, run.Waiting, run.Succeeded, run.Failed, run.Cancelled, run.TimedOut}
	names := make([]string, len(statuses))
	for i, s := range statuses {
		names[i] = string(s)
	}
	return names
}

// statusExit maps a final run status to the exit code of --wait.
func statusExit(status string) int {
	switch run.Status(status) {
	case run.Succeeded:
		return ExitOK
	case run.Cancelled, run.TimedOut:
		return ExitCancelled
	}
	return ExitFailed
}

// runKind tells a run id's kind by its prefix.
func runKind(id string) string {
	switch {
	case strings.HasPrefix(id, "jr_"):
		return "job"
	case strings.HasPrefix(id, "lr_"):
		return "line"
	}
	return ""
}

// path renders the stages a line run visited, in order.
func (r lineRun) path() string {
	var names []string
	for _, s := range r.Stages {
		names = append(names, s.StageName)
	}
	return strings.Join(names, " → ")
}
