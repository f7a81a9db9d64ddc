package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/linefactory/linefactory/manifests/run"
)

// StepTimelineEntry is one step of a job run as SPEC shows it.
type StepTimelineEntry struct {
	Name             string         `json:"name"`
	Action           string         `json:"action"`
	Status           run.Status     `json:"status"`
	TaskName         string         `json:"task_name"`
	SandboxName      *string        `json:"sandbox_name"`
	AgentSessionID   *string        `json:"agent_session_id"`
	StartedAt        *time.Time     `json:"started_at"`
	CompletedAt      *time.Time     `json:"completed_at"`
	ErrorMessage     *string        `json:"error_message"`
	ErrorCode        *string        `json:"error_code"`
	FailureClass     *string        `json:"failure_class"`
	ErrorDetails     map[string]any `json:"error_details"`
	ExitCode         *int           `json:"exit_code"`
	ComputeCommandID *string        `json:"compute_command_id"`
	// InferenceCostCents and Usage: a run_agent step's priced usage lines.
	InferenceCostCents int64        `json:"inference_cost_cents"`
	Usage              []AgentUsage `json:"usage,omitempty"`
	// Attempt is the attempt running or last run (1 for the first);
	// Attempts lists each attempt's start.
	Attempt  int           `json:"attempt,omitempty"`
	Attempts []StepAttempt `json:"attempts,omitempty"`
}

// StepAttempt is one attempt of a step: a retry after an infrastructure
// failure or a worker restart starts a new one.
type StepAttempt struct {
	Attempt   int       `json:"attempt"`
	StartedAt time.Time `json:"started_at"`
}

// JobRun is the record of one run of a job version. It is stored whole as a
// JSON document beside the columns it is queried by.
type JobRun struct {
	ID                 string              `json:"id"`
	JobName            string              `json:"job_name"`
	JobVersionID       string              `json:"job_version_id"`
	Status             run.Status          `json:"status"`
	Region             *string             `json:"region"`
	RunParams          map[string]any      `json:"run_params"`
	ResultPayload      map[string]any      `json:"result_payload"`
	StepTimeline       []StepTimelineEntry `json:"step_timeline"`
	ArtifactRefs       []map[string]any    `json:"artifact_refs"`
	StartedAt          *time.Time          `json:"started_at"`
	CompletedAt        *time.Time          `json:"completed_at"`
	ErrorMessage       *string             `json:"error_message"`
	CreatedAt          time.Time           `json:"created_at"`
	ComputeCostCents   int64               `json:"compute_cost_cents"`
	InferenceCostCents int64               `json:"inference_cost_cents"`
	TotalCostCents     int64               `json:"total_cost_cents"`
	CostRatedAt        *time.Time          `json:"cost_rated_at"`
	ErrorCode          *string             `json:"error_code"`
	FailureClass       *string             `json:"failure_class"`
	ErrorDetails       map[string]any      `json:"error_details"`
	// KnowledgeVersions are the knowledge versions the run's bindings
	// resolved to when it started.
	KnowledgeVersions []KnowledgeVersionRef `json:"knowledge_versions"`
	// Not in SPEC's shape: where the run came from and how to reach it.
	LineRunID  *string `json:"line_run_id,omitempty"`
	StageName  *string `json:"stage_name,omitempty"`
	WorkflowID string  `json:"workflow_id,omitempty"`
	StopReason *string `json:"stop_reason,omitempty"`
	// GatewayUsage is what its steps drew through the inference gateway.
	GatewayUsage *GatewayUsage `json:"gateway_usage,omitempty"`
}

// JobRunFilter selects job runs; empty fields match all.
type JobRunFilter struct {
	JobName   string
	Status    run.Status
	LineRunID string
	Limit     int
	Offset    int
	// WithoutTimeline leaves each run's StepTimeline empty, unread (a
	// listing that does not show it: a page of long runs is thousands of
	// rows otherwise).
	WithoutTimeline bool
}

type jobRunModel struct {
	ID        string    `gorm:"primaryKey;size:64"`
	JobName   string    `gorm:"index;size:255"`
	Status    string    `gorm:"index;size:32"`
	LineRunID string    `gorm:"index;size:64"`
	CreatedAt time.Time `gorm:"index"`
	Doc       jobRunDoc
}

func (jobRunModel) TableName() string { return "job_runs" }

// CreateJobRun stores a new job run; ID and CreatedAt are set when empty.
func (s *Store) CreateJobRun(ctx context.Context, r JobRun) (JobRun, error) {
	if r.ID == "" {
		r.ID = run.NewJobRunID()
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = s.now()
	}
	normalizeJobRun(&r)
	err := s.writeTx(ctx, s.jobRunQueries(), func(w *writeTxn) error {
		if err := w.exec(qInsertJobRun, r.ID, r.JobName, string(r.Status), deref(r.LineRunID), r.CreatedAt, jobRunDoc{r}); err != nil {
			return err
		}
		return s.storeTimeline(w, &r, nil)
	})
	if err != nil {
		return JobRun{}, translate(err, "create job run")
	}
	return r, nil
}

func normalizeJobRun(r *JobRun) {
	if r.RunParams == nil {
		r.RunParams = map[string]any{}
	}
	if r.StepTimeline == nil {
		r.StepTimeline = []StepTimelineEntry{}
	}
	if r.ArtifactRefs == nil {
		r.ArtifactRefs = []map[string]any{}
	}
	if r.KnowledgeVersions == nil {
		r.KnowledgeVersions = []KnowledgeVersionRef{}
	}
}

// GetJobRun returns a job run by id.
func (s *Store) GetJobRun(ctx context.Context, id string) (JobRun, error) {
	var m jobRunModel
	if err := s.db.WithContext(ctx).Where("id = ?", id).Take(&m).Error; err != nil {
		return JobRun{}, translate(err, fmt.Sprintf("job run %q", id))
	}
	out := []JobRun{m.Doc.V}
	if err := s.withTimelines(ctx, out); err != nil {
		return JobRun{}, translate(err, fmt.Sprintf("job run %q", id))
	}
	return out[0], nil
}

// ListJobRuns lists job runs newest first.
func (s *Store) ListJobRuns(ctx context.Context, f JobRunFilter) ([]JobRun, error) {
	limit, offset := clampPage(f.Limit, f.Offset)
	q := s.db.WithContext(ctx).Model(&jobRunModel{})
	if f.JobName != "" {
		q = q.Where("job_name = ?", f.JobName)
	}
	if f.Status != "" {
		q = q.Where("status = ?", string(f.Status))
	}
	if f.LineRunID != "" {
		q = q.Where("line_run_id = ?", f.LineRunID)
	}
	var rows []jobRunModel
	if err := q.Order("created_at desc, id desc").Limit(limit).Offset(offset).Find(&rows).Error; err != nil {
		return nil, translate(err, "list job runs")
	}
	return s.jobRuns(ctx, rows, !f.WithoutTimeline, "list job runs")
}

// UpdateJobRun changes a job run by a read-modify-write in one transaction
// (the row and its timeline entries are locked on PostgreSQL), so
// concurrent updates are never lost. Only the timeline entries the change
// touched are written back.
func (s *Store) UpdateJobRun(ctx context.Context, id string, change func(*JobRun) error) (JobRun, error) {
	defer s.docs.forget(jobKey(id))
	var out JobRun
	err := s.writeTx(ctx, s.jobRunQueries(), func(w *writeTxn) error {
		var doc jobRunDoc
		if err := w.row(qReadJobRun, []any{id}, &doc); err != nil {
			return err
		}
		var old []string
		err := w.rows(qReadTimeline, []any{id}, func(rows *sql.Rows) error {
			var e string
			err := rows.Scan(&e)
			old = append(old, e)
			return err
		})
		if err != nil {
			return err
		}
		r := doc.V
		if r.StepTimeline, err = decodeTimeline(id, old); err != nil {
			return err
		}
		if err := change(&r); err != nil {
			return err
		}
		r.ID = id
		normalizeJobRun(&r)
		out = r
		if err := w.exec(qUpdateJobRun, string(r.Status), deref(r.LineRunID), jobRunDoc{r}, id); err != nil {
			return err
		}
		return s.storeTimeline(w, &r, old)
	})
	return out, translate(err, fmt.Sprintf("update job run %q", id))
}

// The statements of a job run's writes below GORM (writeTx), by index in
// jobRunQueries.
const (
	qReadJobRun = iota
	qReadTimeline
	qUpdateJobRun
	qRewriteEntry
	qCutTimeline
	qInsertJobRun
)

// jobRunQueries are CreateJobRun's and UpdateJobRun's statements (the
// reads lock the rows on PostgreSQL).
func (s *Store) jobRunQueries() []string {
	lock := ""
	if s.postgres {
		lock = " FOR UPDATE"
	}
	return []string{
		qReadJobRun:   "SELECT doc FROM job_runs WHERE id = ?" + lock,
		qReadTimeline: "SELECT entry FROM job_run_steps WHERE run_id = ? ORDER BY pos" + lock,
		qUpdateJobRun: "UPDATE job_runs SET status = ?, line_run_id = ?, doc = ? WHERE id = ?",
		qRewriteEntry: "UPDATE job_run_steps SET task_name = ?, name = ?, entry = ? WHERE run_id = ? AND pos = ?",
		qCutTimeline:  "DELETE FROM job_run_steps WHERE run_id = ? AND pos >= ?",
		qInsertJobRun: "INSERT INTO job_runs (id, job_name, status, line_run_id, created_at, doc) VALUES (?, ?, ?, ?, ?, ?)",
	}
}

// storeTimeline stores r's timeline in a writeTx of jobRunQueries given
// the entries stored now (old, as JSON by position; nil for a new run):
// changed entries rewritten, those past the timeline's end deleted, new
// ones in multi-row inserts.
func (s *Store) storeTimeline(w *writeTxn, r *JobRun, old []string) error {
	p, err := planTimeline(r, old)
	if err != nil {
		return err
	}
	for _, e := range p.rewrite {
		if err := w.exec(qRewriteEntry, e.TaskName, e.Name, e.Entry, e.RunID, e.Pos); err != nil {
			return err
		}
	}
	if p.cut >= 0 {
		if err := w.exec(qCutTimeline, r.ID, p.cut); err != nil {
			return err
		}
	}
	for rows := p.insert; len(rows) > 0; {
		n := min(len(rows), stepInsertBatch)
		q := "INSERT INTO job_run_steps (run_id, pos, task_name, name, entry) VALUES " +
			strings.Repeat(", (?, ?, ?, ?, ?)", n)[2:]
		if s.postgres {
			q = pgQuery(q) // not pgQueries.of: one text per batch size
		}
		args := make([]any, 0, 5*n)
		for _, e := range rows[:n] {
			args = append(args, e.RunID, e.Pos, e.TaskName, e.Name, e.Entry)
		}
		if err := w.execText(q, args...); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

// jobRuns returns the runs of rows, with their timelines unless timelines
// is false (then each is empty).
func (s *Store) jobRuns(ctx context.Context, rows []jobRunModel, timelines bool, what string) ([]JobRun, error) {
	out := make([]JobRun, len(rows))
	for i, r := range rows {
		out[i] = r.Doc.V
		normalizeJobRun(&out[i])
	}
	if !timelines {
		return out, nil
	}
	if err := s.withTimelines(ctx, out); err != nil {
		return nil, translate(err, what)
	}
	return out, nil
}

// ---------------------------------------------------------------- logs

// MaxStepLogBytes caps what is kept of one stream of one step; beyond it a
// single truncation marker is stored.
const MaxStepLogBytes = 1 << 20

// TruncationMarker is stored once when a step stream passes MaxStepLogBytes.
const TruncationMarker = "\n[... output truncated ...]\n"

// LogChunk is a piece of a step's stdout or stderr.
type LogChunk struct {
	Seq       int64
	Step      string
	Stream    string
	Data      []byte
	CreatedAt time.Time
}

type stepLogModel struct {
	Seq       int64  `gorm:"primaryKey;autoIncrement"`
	RunID     string `gorm:"index:idx_step_logs_run;size:64;not null"`
	Step      string `gorm:"size:255"`
	Stream    string `gorm:"size:8"`
	Data      []byte
	Truncated bool
	CreatedAt time.Time
}

func (stepLogModel) TableName() string { return "step_logs" }

// AppendStepLog stores a chunk of a step's output. Past MaxStepLogBytes per
// step stream the rest is dropped and TruncationMarker is stored once.
func (s *Store) AppendStepLog(ctx context.Context, runID, step, stream string, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var agg struct {
			Size      int64
			Truncated int64
		}
		err := tx.Model(&stepLogModel{}).Where("run_id = ? AND step = ? AND stream = ?", runID, step, stream).
			Select("COALESCE(SUM(LENGTH(data)), 0) AS size, COALESCE(SUM(CASE WHEN truncated THEN 1 ELSE 0 END), 0) AS truncated").
			Scan(&agg).Error
		if err != nil {
			return err
		}
		if agg.Truncated > 0 {
			return nil
		}
		room := MaxStepLogBytes - agg.Size
		chunk := stepLogModel{RunID: runID, Step: step, Stream: stream, Data: data, CreatedAt: s.now()}
		if int64(len(data)) > room {
			if room < 0 {
				room = 0
			}
			chunk.Data = append(append([]byte{}, data[:room]...), TruncationMarker...)
			chunk.Truncated = true
		}
		return tx.Create(&chunk).Error
	})
	return translate(err, "append step log")
}

// ReadStepLogs returns the chunks of a run after sequence number afterSeq, in
// order; step "" means every step.
func (s *Store) ReadStepLogs(ctx context.Context, runID, step string, afterSeq int64) ([]LogChunk, error) {
	q := s.db.WithContext(ctx).Where("run_id = ? AND seq > ?", runID, afterSeq)
	if step != "" {
		q = q.Where("step = ?", step)
	}
	var rows []stepLogModel
	if err := q.Order("seq asc").Limit(1000).Find(&rows).Error; err != nil {
		return nil, translate(err, "read step logs")
	}
	out := make([]LogChunk, len(rows))
	for i, r := range rows {
		out[i] = LogChunk{Seq: r.Seq, Step: r.Step, Stream: r.Stream, Data: r.Data, CreatedAt: r.CreatedAt.UTC()}
	}
	return out, nil
}
