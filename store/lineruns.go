package store

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/linefactory/linefactory/manifests/run"
)

// TriggerSummary says what started a line run.
type TriggerSummary struct {
	Source     string         `json:"source"`
	Provider   *string        `json:"provider"`
	EventName  *string        `json:"event_name"`
	DeliveryID *string        `json:"delivery_id"`
	Payload    map[string]any `json:"payload"`
}

// LineRunStage is one stage visit of a line run (SPEC's LineRunStageSummary).
type LineRunStage struct {
	StageName          string     `json:"stage_name"`
	StageOrder         int        `json:"stage_order"`
	Iteration          int        `json:"iteration"`
	Status             run.Status `json:"status"`
	Outcome            *string    `json:"outcome"`
	JobRunID           *string    `json:"job_run_id"`
	ComputeCostCents   int64      `json:"compute_cost_cents"`
	InferenceCostCents int64      `json:"inference_cost_cents"`
	TotalCostCents     int64      `json:"total_cost_cents"`
	CostRatedAt        *time.Time `json:"cost_rated_at"`
	StartedAt          *time.Time `json:"started_at"`
	CompletedAt        *time.Time `json:"completed_at"`
	ArtifactCount      int        `json:"artifact_count"`
	// Carried marks a visit a retried run took over from the run it
	// retries (not in SPEC's shape).
	Carried bool `json:"carried,omitempty"`
}

// LineRunFailure classifies why a line run failed and who must fix it.
type LineRunFailure struct {
	Code         *run.FailureCode `json:"code"`
	Domain       run.Domain       `json:"domain"`
	ErrorCode    *string          `json:"error_code"`
	FailureClass *string          `json:"failure_class"`
	ErrorMessage *string          `json:"error_message"`
	StageName    *string          `json:"stage_name"`
	StageStep    *string          `json:"stage_step"`
	TaskName     *string          `json:"task_name"`
	ErrorDetails map[string]any   `json:"error_details"`
}

// ManagerTurn is one Temporal run of a line's manager workflow.
type ManagerTurn struct {
	WorkflowRunID string     `json:"workflow_run_id"`
	State         string     `json:"state"`
	StartedAt     *time.Time `json:"started_at"`
}

// TakenTransition records one routing decision of a line run.
type TakenTransition struct {
	ID        string    `json:"id"`
	From      string    `json:"from"`
	To        string    `json:"to"`
	Option    *string   `json:"option,omitempty"`
	Iteration int       `json:"iteration"`
	TakenAt   time.Time `json:"taken_at"`
	// Agentic transitions only (see routing.go).
	AgenticDecision
}

// LineRun is the record of one run of a line version.
type LineRun struct {
	ID                 string                    `json:"id"`
	LineName           string                    `json:"line_name"`
	Status             run.Status                `json:"status"`
	Trigger            TriggerSummary            `json:"trigger"`
	CreatedAt          time.Time                 `json:"created_at"`
	LineVersionID      *string                   `json:"line_version_id"`
	Region             *string                   `json:"region"`
	RunParams          map[string]any            `json:"run_params"`
	Stages             []LineRunStage            `json:"stages"`
	ArtifactCount      int                       `json:"artifact_count"`
	Artifacts          []map[string]any          `json:"artifacts"`
	ComputeCostCents   int64                     `json:"compute_cost_cents"`
	InferenceCostCents int64                     `json:"inference_cost_cents"`
	TotalCostCents     int64                     `json:"total_cost_cents"`
	CostRatedAt        *time.Time                `json:"cost_rated_at"`
	ErrorMessage       *string                   `json:"error_message"`
	Failure            *LineRunFailure           `json:"failure"`
	ManagerTurns       []ManagerTurn             `json:"manager_turns"`
	TriggeredByActor   map[string]any            `json:"triggered_by_actor"`
	StartedAt          *time.Time                `json:"started_at"`
	CompletedAt        *time.Time                `json:"completed_at"`
	Transitions        []TakenTransition         `json:"transitions"`
	StageOutputs       map[string]map[string]any `json:"stage_outputs"`
	WorkflowID         string                    `json:"workflow_id,omitempty"`
	RetryOf            *string                   `json:"retry_of,omitempty"`
	StopReason         *string                   `json:"stop_reason,omitempty"`
	// Agentic routing (see routing.go).
	Routing
}

// LineRunFilter selects line runs; empty fields match all.
type LineRunFilter struct {
	LineName string
	Status   run.Status
	// Since keeps runs created at or after it; zero keeps all
	// (ListLineRunsJSON only).
	Since  time.Time
	Limit  int
	Offset int
}

// lineRunModel is a line run's row. On PostgreSQL the row also has the
// generated column list_doc (migrateLineRunList), which the model leaves
// out: the reads of whole runs select doc alone.
type lineRunModel struct {
	ID            string    `gorm:"primaryKey;size:64"`
	LineName      string    `gorm:"index;size:255"`
	Status        string    `gorm:"index;size:32"`
	TriggerSource string    `gorm:"size:32;index:idx_line_runs_delivery,priority:1"`
	DeliveryID    string    `gorm:"size:255;index:idx_line_runs_delivery,priority:2"`
	CreatedAt     time.Time `gorm:"index"`
	Doc           JSON[LineRun]
}

func (lineRunModel) TableName() string { return "line_runs" }

func normalizeLineRun(r *LineRun) {
	if r.RunParams == nil {
		r.RunParams = map[string]any{}
	}
	if r.Stages == nil {
		r.Stages = []LineRunStage{}
	}
	if r.Artifacts == nil {
		r.Artifacts = []map[string]any{}
	}
	if r.ManagerTurns == nil {
		r.ManagerTurns = []ManagerTurn{}
	}
	if r.Transitions == nil {
		r.Transitions = []TakenTransition{}
	}
	if r.StageOutputs == nil {
		r.StageOutputs = map[string]map[string]any{}
	}
	if r.Trigger.Payload == nil {
		r.Trigger.Payload = map[string]any{}
	}
}

// lineRunRow is the row of a line run. A retry carries the trigger of the
// run it retries but was not started by that delivery, so its row has no
// delivery id: the delivery's unique index and FindLineRunsByDelivery see
// only the runs a delivery itself started.
func lineRunRow(r LineRun) lineRunModel {
	delivery := deref(r.Trigger.DeliveryID)
	if r.RetryOf != nil {
		delivery = ""
	}
	return lineRunModel{ID: r.ID, LineName: r.LineName, Status: string(r.Status), TriggerSource: r.Trigger.Source,
		DeliveryID: delivery, CreatedAt: r.CreatedAt, Doc: JSON[LineRun]{r}}
}

// migrateLineRuns makes a delivery start at most one run per line: a unique
// index over (trigger_source, line_name, delivery_id) for the runs a
// delivery started (manual runs and retries have no delivery id). Duplicates
// recorded before the index existed keep their doc but lose the delivery id
// of all but the earliest, so the index can be built.
func (s *Store) migrateLineRuns(ctx context.Context) error {
	db := s.db.WithContext(ctx)
	err := db.Exec(`UPDATE line_runs SET delivery_id = '' WHERE delivery_id <> '' AND EXISTS (
		SELECT 1 FROM line_runs o WHERE o.trigger_source = line_runs.trigger_source AND o.line_name = line_runs.line_name
		AND o.delivery_id = line_runs.delivery_id
		AND (o.created_at < line_runs.created_at OR (o.created_at = line_runs.created_at AND o.id < line_runs.id)))`).Error
	if err != nil {
		return fmt.Errorf("clear duplicate line run deliveries: %w", err)
	}
	err = db.Exec(`CREATE UNIQUE INDEX IF NOT EXISTS idx_line_runs_line_delivery
		ON line_runs (trigger_source, line_name, delivery_id) WHERE delivery_id <> ''`).Error
	if err != nil {
		return fmt.Errorf("create line run delivery index: %w", err)
	}
	return nil
}

// CreateLineRun stores a new line run; ID and CreatedAt are set when empty.
// ErrConflict if the id is taken, or if the run's trigger delivery already
// started a run of the same line (a repeated delivery).
func (s *Store) CreateLineRun(ctx context.Context, r LineRun) (LineRun, error) {
	if r.ID == "" {
		r.ID = run.NewLineRunID()
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = s.now()
	}
	normalizeLineRun(&r)
	m := lineRunRow(r)
	if err := s.db.WithContext(ctx).Create(&m).Error; err != nil {
		return LineRun{}, translate(err, "create line run")
	}
	return r, nil
}

// GetLineRun returns a line run by id.
func (s *Store) GetLineRun(ctx context.Context, id string) (LineRun, error) {
	var m lineRunModel
	if err := s.db.WithContext(ctx).Select("doc").Where("id = ?", id).Take(&m).Error; err != nil {
		return LineRun{}, translate(err, fmt.Sprintf("line run %q", id))
	}
	return m.Doc.V, nil
}

// ListLineRuns lists line runs newest first.
func (s *Store) ListLineRuns(ctx context.Context, f LineRunFilter) ([]LineRun, error) {
	limit, offset := clampPage(f.Limit, f.Offset)
	q := s.db.WithContext(ctx).Model(&lineRunModel{}).Select("doc")
	if f.LineName != "" {
		q = q.Where("line_name = ?", f.LineName)
	}
	if f.Status != "" {
		q = q.Where("status = ?", string(f.Status))
	}
	var rows []lineRunModel
	if err := q.Order("created_at desc, id desc").Limit(limit).Offset(offset).Find(&rows).Error; err != nil {
		return nil, translate(err, "list line runs")
	}
	out := make([]LineRun, len(rows))
	for i, r := range rows {
		out[i] = r.Doc.V
	}
	return out, nil
}

// FindLineRunsByDelivery returns the runs a trigger delivery started.
func (s *Store) FindLineRunsByDelivery(ctx context.Context, source, deliveryID string) ([]LineRun, error) {
	var rows []lineRunModel
	err := s.db.WithContext(ctx).Select("doc").Where("trigger_source = ? AND delivery_id = ?", source, deliveryID).Order("created_at asc").Find(&rows).Error
	if err != nil {
		return nil, translate(err, "find line runs by delivery")
	}
	out := make([]LineRun, len(rows))
	for i, r := range rows {
		out[i] = r.Doc.V
	}
	return out, nil
}

// UpdateLineRun changes a line run by a read-modify-write in one transaction
// (the row locked on PostgreSQL), with fixed statements (writeTx): a line
// manager makes one such write per stage (activities.LineWrites; four for
// runs started before input Version 2).
func (s *Store) UpdateLineRun(ctx context.Context, id string, change func(*LineRun) error) (LineRun, error) {
	defer s.docs.forget(lineKey(id))
	read := "SELECT doc FROM line_runs WHERE id = ?"
	if s.postgres {
		read += " FOR UPDATE"
	}
	var out LineRun
	err := s.writeTx(ctx, []string{read, "UPDATE line_runs SET status = ?, doc = ? WHERE id = ?"}, func(w *writeTxn) error {
		var doc JSON[LineRun]
		if err := w.row(0, []any{id}, &doc); err != nil {
			return err
		}
		r := doc.V
		if err := change(&r); err != nil {
			return err
		}
		r.ID = id
		normalizeLineRun(&r)
		out = r
		return w.exec(1, string(r.Status), JSON[LineRun]{r}, id)
	})
	return out, translate(err, fmt.Sprintf("update line run %q", id))
}

// ---------------------------------------------------------------- schedules

// LineSchedule is the cron schedule of a line. ScheduleGeneration grows by
// one on every change, deletes and re-creates included, so stale firings can
// be told apart.
type LineSchedule struct {
	LineName           string
	Cron               string
	Timezone           string
	Enabled            bool
	ScheduleGeneration int64
	Inputs             map[string]any
	UpdatedAt          time.Time
}

// lineScheduleModel is a line's schedule row. A deleted schedule stays as a
// tombstone (Deleted) so that its generation survives a delete and the next
// schedule of the line continues the count.
type lineScheduleModel struct {
	LineName           string `gorm:"primaryKey;size:255"`
	Cron               string `gorm:"size:255"`
	Timezone           string `gorm:"size:64"`
	Enabled            bool
	ScheduleGeneration int64
	Inputs             JSON[map[string]any]
	UpdatedAt          time.Time
	Deleted            bool `gorm:"not null;default:false"`
}

func (lineScheduleModel) TableName() string { return "line_schedules" }

func (m lineScheduleModel) domain() LineSchedule {
	in := m.Inputs.V
	if in == nil {
		in = map[string]any{}
	}
	return LineSchedule{LineName: m.LineName, Cron: m.Cron, Timezone: m.Timezone, Enabled: m.Enabled,
		ScheduleGeneration: m.ScheduleGeneration, Inputs: in, UpdatedAt: m.UpdatedAt.UTC()}
}

// UpsertLineSchedule creates or replaces a line's schedule; the generation
// grows by one on every call that changes it, and a schedule re-created
// after a delete continues from the deleted one's generation.
func (s *Store) UpsertLineSchedule(ctx context.Context, sc LineSchedule) (LineSchedule, error) {
	var out LineSchedule
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var cur lineScheduleModel
		res := s.forUpdate(tx).Where("line_name = ?", sc.LineName).Limit(1).Find(&cur)
		if res.Error != nil {
			return res.Error
		}
		m := lineScheduleModel{LineName: sc.LineName, Cron: sc.Cron, Timezone: sc.Timezone, Enabled: sc.Enabled,
			Inputs: JSON[map[string]any]{sc.Inputs}, UpdatedAt: s.now()}
		if res.RowsAffected == 0 {
			m.ScheduleGeneration = 1
			if err := tx.Create(&m).Error; err != nil {
				return err
			}
			out = m.domain()
			return nil
		}
		same := !cur.Deleted && cur.Cron == m.Cron && cur.Timezone == m.Timezone && cur.Enabled == m.Enabled && jsonEqual(cur.Inputs, m.Inputs)
		if same {
			out = cur.domain()
			return nil
		}
		m.ScheduleGeneration = cur.ScheduleGeneration + 1
		if err := tx.Model(&lineScheduleModel{}).Where("line_name = ?", sc.LineName).Updates(map[string]any{
			"cron": m.Cron, "timezone": m.Timezone, "enabled": m.Enabled, "inputs": m.Inputs,
			"schedule_generation": m.ScheduleGeneration, "updated_at": m.UpdatedAt, "deleted": false,
		}).Error; err != nil {
			return err
		}
		out = m.domain()
		return nil
	})
	return out, translate(err, fmt.Sprintf("upsert schedule of line %q", sc.LineName))
}

func jsonEqual(a, b JSON[map[string]any]) bool {
	va, err1 := a.Value()
	vb, err2 := b.Value()
	return err1 == nil && err2 == nil && va == vb
}

// GetLineSchedule returns a line's schedule.
func (s *Store) GetLineSchedule(ctx context.Context, line string) (LineSchedule, error) {
	var m lineScheduleModel
	if err := s.db.WithContext(ctx).Where("line_name = ? AND deleted = ?", line, false).Take(&m).Error; err != nil {
		return LineSchedule{}, translate(err, fmt.Sprintf("schedule of line %q", line))
	}
	return m.domain(), nil
}

// DeleteLineSchedule removes a line's schedule. Its row stays as a
// tombstone carrying the generation, bumped so that any firing of the
// deleted schedule is stale.
func (s *Store) DeleteLineSchedule(ctx context.Context, line string) error {
	res := s.db.WithContext(ctx).Model(&lineScheduleModel{}).Where("line_name = ? AND deleted = ?", line, false).
		Updates(map[string]any{"deleted": true, "schedule_generation": gorm.Expr("schedule_generation + 1"), "updated_at": s.now()})
	if res.Error != nil {
		return translate(res.Error, "delete schedule")
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("schedule of line %q: %w", line, ErrNotFound)
	}
	return nil
}

// ListLineSchedules lists every schedule.
func (s *Store) ListLineSchedules(ctx context.Context) ([]LineSchedule, error) {
	var rows []lineScheduleModel
	if err := s.db.WithContext(ctx).Where("deleted = ?", false).Order("line_name asc").Find(&rows).Error; err != nil {
		return nil, translate(err, "list schedules")
	}
	out := make([]LineSchedule, len(rows))
	for i, r := range rows {
		out[i] = r.domain()
	}
	return out, nil
}
