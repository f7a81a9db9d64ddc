package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"

	"github.com/linefactory/linefactory/manifests/run"
)

// A job run's step timeline is stored beside its document, one row per
// entry in job_run_steps keyed by the run and the entry's position, so a
// step's start and end write one small row instead of rewriting a document
// that grows with the number of steps. The run's document (job_runs.doc)
// holds everything else; reads put the two together, and GetJobRunJSON
// splices the rows' JSON into the document without decoding either.

type jobRunStepModel struct {
	RunID    string `gorm:"primaryKey;size:64"`
	Pos      int    `gorm:"primaryKey;autoIncrement:false"`
	TaskName string `gorm:"size:255;not null"`
	Name     string `gorm:"size:255;not null"`
	// Entry is the StepTimelineEntry as JSON text, served as is.
	Entry string `gorm:"type:text;not null"`
}

func (jobRunStepModel) TableName() string { return "job_run_steps" }

// jobRunDoc is job_runs.doc: the run without its step timeline.
type jobRunDoc struct {
	V JobRun
}

// storedJobRun leaves the timeline out of the encoded run: its own
// step_timeline field, always empty, hides JobRun's.
type storedJobRun struct {
	*JobRun
	StepTimeline []json.RawMessage `json:"step_timeline,omitempty"`
}

// Value encodes the run without its timeline.
func (d jobRunDoc) Value() (driver.Value, error) {
	b, err := json.Marshal(storedJobRun{JobRun: &d.V})
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// Scan decodes the run; its timeline is read from job_run_steps.
func (d *jobRunDoc) Scan(src any) error {
	var j JSON[JobRun]
	if err := j.Scan(src); err != nil {
		return err
	}
	d.V = j.V
	return nil
}

// GormDBDataType picks the column type per database.
func (jobRunDoc) GormDBDataType(db *gorm.DB, f *schema.Field) string {
	return JSON[JobRun]{}.GormDBDataType(db, f)
}

// jobRunStepsMigrationLock is the PostgreSQL advisory lock key of
// migrateJobRunSteps (any constant no other code of the database uses).
const jobRunStepsMigrationLock = 0x6c665f737465707 // "lf_step"

// migrateJobRunSteps creates job_run_steps and, the first time, moves the
// timelines of the runs stored before it out of their documents, in one
// transaction.
func (s *Store) migrateJobRunSteps(ctx context.Context) error {
	if s.db.WithContext(ctx).Migrator().HasTable(&jobRunStepModel{}) {
		return nil
	}
	var move, strip string
	if s.postgres {
		move = `INSERT INTO job_run_steps (run_id, pos, task_name, name, entry)
			SELECT j.id, e.i - 1, COALESCE(e.elem->>'task_name', ''), COALESCE(e.elem->>'name', ''), e.elem::text
			FROM job_runs j, jsonb_array_elements(j.doc->'step_timeline') WITH ORDINALITY AS e(elem, i)
			WHERE jsonb_typeof(j.doc->'step_timeline') = 'array'`
		strip = `UPDATE job_runs SET doc = doc - 'step_timeline' WHERE doc->'step_timeline' IS NOT NULL`
	} else {
		move = `INSERT INTO job_run_steps (run_id, pos, task_name, name, entry)
			SELECT j.id, CAST(e.key AS INTEGER), COALESCE(json_extract(e.value, '$.task_name'), ''),
				COALESCE(json_extract(e.value, '$.name'), ''), e.value
			FROM job_runs j, json_each(j.doc, '$.step_timeline') e
			WHERE json_type(j.doc, '$.step_timeline') = 'array'`
		strip = `UPDATE job_runs SET doc = json_remove(doc, '$.step_timeline') WHERE json_type(doc, '$.step_timeline') IS NOT NULL`
	}
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		// Several workers upgraded at once: one moves, the others wait and
		// find the table (SQLite's write transaction serializes already).
		if s.postgres {
			if err := tx.Exec("SELECT pg_advisory_xact_lock(?)", jobRunStepsMigrationLock).Error; err != nil {
				return err
			}
		}
		if tx.Migrator().HasTable(&jobRunStepModel{}) {
			return nil
		}
		if err := tx.AutoMigrate(&jobRunStepModel{}); err != nil {
			return err
		}
		err := tx.Exec("CREATE INDEX IF NOT EXISTS idx_job_run_steps_task_step ON job_run_steps (run_id, task_name, name)").Error
		if err != nil {
			return err
		}
		if err := tx.Exec(move).Error; err != nil {
			return fmt.Errorf("move step timelines: %w", err)
		}
		if err := tx.Exec(strip).Error; err != nil {
			return fmt.Errorf("move step timelines: %w", err)
		}
		return nil
	})
}

// stepRows encodes a timeline as the rows of run id from position from on.
func stepRows(id string, timeline []StepTimelineEntry, from int) ([]jobRunStepModel, error) {
	rows := make([]jobRunStepModel, 0, len(timeline)-from)
	for i := from; i < len(timeline); i++ {
		b, err := json.Marshal(timeline[i])
		if err != nil {
			return nil, err
		}
		rows = append(rows, jobRunStepModel{RunID: id, Pos: i, TaskName: timeline[i].TaskName, Name: timeline[i].Name, Entry: string(b)})
	}
	return rows, nil
}

// stepInsertBatch keeps a multi-row insert under PostgreSQL's 65,535
// parameters.
const stepInsertBatch = 1000

// timelineWrites is what storing a run's timeline over the entries stored
// now takes: the entries to rewrite (changed), the position from which the
// stored rows go (cut, -1 for none) and the new rows to insert.
type timelineWrites struct {
	rewrite []jobRunStepModel
	cut     int
	insert  []jobRunStepModel
}

// planTimeline compares r's timeline with the entries stored now (old, as
// JSON by position).
func planTimeline(r *JobRun, old []string) (timelineWrites, error) {
	p := timelineWrites{cut: -1}
	keep := min(len(old), len(r.StepTimeline))
	for i := 0; i < keep; i++ {
		b, err := json.Marshal(r.StepTimeline[i])
		if err != nil {
			return p, err
		}
		if string(b) != old[i] {
			e := r.StepTimeline[i]
			p.rewrite = append(p.rewrite, jobRunStepModel{RunID: r.ID, Pos: i, TaskName: e.TaskName, Name: e.Name, Entry: string(b)})
		}
	}
	if len(old) > len(r.StepTimeline) {
		p.cut = len(r.StepTimeline)
	}
	var err error
	p.insert, err = stepRows(r.ID, r.StepTimeline, keep)
	return p, err
}

// decodeTimeline decodes stored entries.
func decodeTimeline(id string, entries []string) ([]StepTimelineEntry, error) {
	out := make([]StepTimelineEntry, len(entries))
	for i, e := range entries {
		if err := json.Unmarshal([]byte(e), &out[i]); err != nil {
			return nil, fmt.Errorf("step %d of job run %q: %w", i, id, err)
		}
	}
	return out, nil
}

// withTimelines reads the timelines of runs in one query.
func (s *Store) withTimelines(ctx context.Context, runs []JobRun) error {
	if len(runs) == 0 {
		return nil
	}
	ids := make([]string, len(runs))
	at := make(map[string]int, len(runs))
	for i := range runs {
		ids[i], at[runs[i].ID] = runs[i].ID, i
	}
	var rows []jobRunStepModel
	err := s.db.WithContext(ctx).Select("run_id", "entry").Where("run_id IN ?", ids).Order("run_id, pos").Find(&rows).Error
	if err != nil {
		return err
	}
	for _, row := range rows {
		i, ok := at[row.RunID]
		if !ok {
			continue
		}
		var e StepTimelineEntry
		if err := json.Unmarshal([]byte(row.Entry), &e); err != nil {
			return fmt.Errorf("step of job run %q: %w", row.RunID, err)
		}
		runs[i].StepTimeline = append(runs[i].StepTimeline, e)
	}
	for i := range runs {
		normalizeJobRun(&runs[i])
	}
	return nil
}

// UpdateJobRunStep changes one entry of a job run's step timeline, the
// first one of task and step, as a small write: that entry's row is read
// and rewritten only if it still holds what was read (compare and swap),
// whatever the number of steps; a row changed meanwhile is read again and
// change applied again to it, so change may be called more than once and
// must only change the entry it is given. A run without that entry is left
// unchanged. Concurrent changes, of this entry or others, and UpdateJobRun
// (which locks the entries it reads) all keep each other's. Two statements
// without a transaction around them: on PostgreSQL two round trips instead
// of four (BEGIN, SELECT FOR UPDATE, UPDATE, COMMIT); on SQLite, fixed
// statements prepared once instead of GORM's.
func (s *Store) UpdateJobRunStep(ctx context.Context, runID, task, step string, change func(*StepTimelineEntry)) error {
	defer s.docs.forget(jobKey(runID))
	what := fmt.Sprintf("step %s/%s of job run %q", task, step, runID)
	for {
		var (
			pos int
			old string
		)
		row, err := s.queryRow(ctx, `SELECT pos, entry FROM job_run_steps WHERE run_id = ? AND task_name = ? AND name = ? ORDER BY pos LIMIT 1`,
			runID, task, step)
		if err == nil {
			err = row.Scan(&pos, &old)
		}
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return translate(err, what)
		}
		var e StepTimelineEntry
		if err := json.Unmarshal([]byte(old), &e); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		change(&e)
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if string(b) == old {
			return nil
		}
		n, err := s.write(ctx, `UPDATE job_run_steps SET entry = ? WHERE run_id = ? AND pos = ? AND entry = ?`, string(b), runID, pos, old)
		if err != nil {
			return translate(err, what)
		}
		if n > 0 {
			return nil
		}
	}
}

// StepChange is a change of one entry of a job run's step timeline, the
// first one of Task and Step (UpdateJobRunSteps).
type StepChange struct {
	Task, Step string
	Change     func(*StepTimelineEntry)
}

// maxStepChanges is how many changes one statement of UpdateJobRunSteps
// makes (3 placeholders each).
const maxStepChanges = 16

// UpdateJobRunSteps makes several UpdateJobRunStep changes with one read of
// their entries and one statement that rewrites them, each row only if it
// still holds what was read (compare and swap, as UpdateJobRunStep): the
// entries the statement changes become visible together, and on
// PostgreSQL one commit makes them durable. An entry changed meanwhile is
// read again and its change applied again to it; a change whose entry the
// run lacks is skipped. Each change must only change the entry it is given.
func (s *Store) UpdateJobRunSteps(ctx context.Context, runID string, changes []StepChange) error {
	for len(changes) > 0 {
		n := min(len(changes), maxStepChanges)
		if err := s.updateJobRunSteps(ctx, runID, changes[:n], false); err != nil {
			return err
		}
		changes = changes[n:]
	}
	return nil
}

// updateJobRunSteps is UpdateJobRunSteps of at most maxStepChanges
// changes; lazy (PostgreSQL only) commits them without waiting for the
// disk.
func (s *Store) updateJobRunSteps(ctx context.Context, runID string, changes []StepChange, lazy bool) error {
	defer s.docs.forget(jobKey(runID))
	what := fmt.Sprintf("steps of job run %q", runID)
	for {
		got, err := s.readStepEntries(ctx, runID, changes)
		if err != nil {
			return translate(err, what)
		}
		rewrites, err := planStepRewrites(runID, changes, got)
		if err != nil || len(rewrites) == 0 {
			return err
		}
		q, args := stepRewriteStatement(runID, rewrites, lazy)
		done, err := s.writeReturning(ctx, q, args...)
		if err != nil {
			return translate(err, what)
		}
		// Rows changed meanwhile are changed again from what they hold now.
		changes = changes[:0:0]
		for _, w := range rewrites {
			if !done[w.pos] {
				changes = append(changes, w.changes...)
			}
		}
		if len(changes) == 0 {
			return nil
		}
	}
}

// storedEntry is a timeline entry as stored: its position and JSON.
type storedEntry struct {
	pos   int
	entry string
}

// stepRewrite is an entry's new JSON, with the changes that made it.
type stepRewrite struct {
	changes  []StepChange
	pos      int
	old, new string
}

// readStepEntries reads the entries changes name, the first of each task
// and step, by task and step.
func (s *Store) readStepEntries(ctx context.Context, runID string, changes []StepChange) (map[[2]string]storedEntry, error) {
	q := "SELECT pos, task_name, name, entry FROM job_run_steps WHERE run_id = ? AND name IN (?" +
		strings.Repeat(", ?", len(changes)-1) + ") ORDER BY pos"
	args := []any{runID}
	for _, c := range changes {
		args = append(args, c.Step)
	}
	rows, err := s.queryRows(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	got := map[[2]string]storedEntry{}
	for rows.Next() {
		var st storedEntry
		var task, name string
		if err := rows.Scan(&st.pos, &task, &name, &st.entry); err != nil {
			return nil, err
		}
		if _, ok := got[[2]string{task, name}]; !ok {
			got[[2]string{task, name}] = st
		}
	}
	return got, rows.Err()
}

// planStepRewrites applies changes to the entries read, all of an entry's
// changes in order, and returns the entries they changed.
func planStepRewrites(runID string, changes []StepChange, got map[[2]string]storedEntry) ([]stepRewrite, error) {
	var rewrites []stepRewrite
	at := map[[2]string]int{}
	for _, c := range changes {
		key := [2]string{c.Task, c.Step}
		if i, ok := at[key]; ok {
			rewrites[i].changes = append(rewrites[i].changes, c)
			continue
		}
		if st, ok := got[key]; ok {
			at[key] = len(rewrites)
			rewrites = append(rewrites, stepRewrite{changes: []StepChange{c}, pos: st.pos, old: st.entry})
		}
	}
	n := 0
	for _, w := range rewrites {
		var e StepTimelineEntry
		err := json.Unmarshal([]byte(w.old), &e)
		if err == nil {
			for _, c := range w.changes {
				c.Change(&e)
			}
			var b []byte
			b, err = json.Marshal(e)
			w.new = string(b)
		}
		if err != nil {
			return nil, fmt.Errorf("step %s/%s of job run %q: %w", w.changes[0].Task, w.changes[0].Step, runID, err)
		}
		if w.new != w.old {
			rewrites[n] = w
			n++
		}
	}
	return rewrites[:n], nil
}

// stepRewriteStatement is the one statement that rewrites the entries, each
// only if it still holds what was read, returning the positions rewritten
// (VALUES columns are column1..3 on both databases). lazy (PostgreSQL only)
// joins a one-row subquery that turns synchronous_commit off for the
// statement's own transaction (set_config's is_local), so its commit does
// not wait for the disk and the session keeps its setting.
func stepRewriteStatement(runID string, rewrites []stepRewrite, lazy bool) (string, []any) {
	var q strings.Builder
	q.WriteString("UPDATE job_run_steps AS s SET entry = v.column3 FROM ")
	if lazy {
		q.WriteString("(SELECT set_config('synchronous_commit', 'off', true)) AS lazy, ")
	}
	q.WriteString("(VALUES ")
	args := make([]any, 0, 3*len(rewrites)+1)
	for i, w := range rewrites {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(CAST(? AS INTEGER), CAST(? AS TEXT), CAST(? AS TEXT))")
		args = append(args, w.pos, w.old, w.new)
	}
	q.WriteString(") AS v WHERE s.run_id = ? AND s.pos = v.column1 AND s.entry = v.column2 RETURNING pos")
	return q.String(), append(args, runID)
}

// writeReturning runs a fixed statement that changes rows and returns the
// integer its RETURNING clause gives for each row changed (on the writer,
// as write).
func (s *Store) writeReturning(ctx context.Context, query string, args ...any) (map[int]bool, error) {
	w, err := s.writer(ctx, query)
	if err != nil {
		return nil, err
	}
	rows, err := w.query(ctx, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	got := map[int]bool{}
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		got[n] = true
	}
	return got, rows.Err()
}

// write runs a fixed statement that changes rows (? placeholders, as
// queryRow's) on the writer and returns how many it changed.
func (s *Store) write(ctx context.Context, query string, args ...any) (int64, error) {
	w, err := s.writer(ctx, query)
	if err != nil {
		return 0, err
	}
	res, err := w.exec(ctx, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// writerStmt is a fixed statement on the writer: on SQLite prepared once
// for the writer's connection, on PostgreSQL the query in its placeholders.
type writerStmt struct {
	db      *sql.DB
	stmt    *sql.Stmt // SQLite
	pgQuery string    // PostgreSQL
}

func (s *Store) writer(ctx context.Context, query string) (writerStmt, error) {
	db, err := s.db.DB()
	if err != nil {
		return writerStmt{}, err
	}
	if s.postgres {
		return writerStmt{db: db, pgQuery: pgQuery(query)}, nil
	}
	stmt, err := s.wstmts.prepare(ctx, db, query)
	return writerStmt{db: db, stmt: stmt}, err
}

func (w writerStmt) exec(ctx context.Context, args ...any) (sql.Result, error) {
	if w.stmt != nil {
		return w.stmt.ExecContext(ctx, args...)
	}
	return w.db.ExecContext(ctx, w.pgQuery, args...)
}

func (w writerStmt) query(ctx context.Context, args ...any) (*sql.Rows, error) {
	if w.stmt != nil {
		return w.stmt.QueryContext(ctx, args...)
	}
	return w.db.QueryContext(ctx, w.pgQuery, args...)
}

// MarkJobRunStep is UpdateJobRunStep for a change whose loss in a database
// crash is no worse than its not having been made, such as a step's start
// (the step is then seen as not started yet, as if the crash had come a
// moment earlier): it is MarkJobRunSteps of that one change.
func (s *Store) MarkJobRunStep(ctx context.Context, runID, task, step string, change func(*StepTimelineEntry)) error {
	return s.MarkJobRunSteps(ctx, runID, []StepChange{{Task: task, Step: step, Change: change}})
}

// MarkJobRunSteps is UpdateJobRunSteps for changes that a database crash
// may lose, because the caller can make them again (a job run carries its
// steps' ends until a durable write, see activities.StepEnd) or because
// their loss is no worse than their not having been made: on PostgreSQL
// the statement's commit does not wait for the WAL to reach the disk
// (stepRewriteStatement sets synchronous_commit off for its own
// transaction only, which works through a pooler too), which saves a flush
// per step. The database stays consistent, and the next commit that waits,
// anyone's, makes it durable with everything before it. SQLite in WAL mode
// with synchronous=NORMAL never waits for one: there it is
// UpdateJobRunSteps.
func (s *Store) MarkJobRunSteps(ctx context.Context, runID string, changes []StepChange) error {
	for len(changes) > 0 {
		n := min(len(changes), maxStepChanges)
		if err := s.updateJobRunSteps(ctx, runID, changes[:n], s.postgres); err != nil {
			return err
		}
		changes = changes[n:]
	}
	return nil
}

// splicedJobRun is the query GetJobRunJSON reads a run with: its document
// and its entries' JSON joined by commas, in order.
func (s *Store) splicedJobRun() string {
	if s.postgres {
		return `SELECT j.doc::text, (SELECT string_agg(s.entry, ',' ORDER BY s.pos) FROM job_run_steps s WHERE s.run_id = j.id), j.status
			FROM job_runs j WHERE j.id = ?`
	}
	return `SELECT j.doc, (SELECT group_concat(s.entry, ',' ORDER BY s.pos) FROM job_run_steps s WHERE s.run_id = j.id), j.status
		FROM job_runs j WHERE j.id = ?`
}

// GetJobRunJSON returns a job run as GetJobRun would encode it, from the
// stored JSON as is: the document with its timeline entries spliced in as
// "step_timeline" (the document never holds that key). The response is
// built from the row as read, in one allocation. A finished run's comes
// from the cache when it has been read lately (doccache.go); the returned
// document may be shared and must not be changed.
func (s *Store) GetJobRunJSON(ctx context.Context, id string) (json.RawMessage, error) {
	out, gen, ok := s.docs.get(jobKey(id))
	if ok {
		return out, nil
	}
	var finished bool
	found, err := s.readRow(ctx, s.splicedJobRun(), id, func(cols [][]byte) error {
		out, ok = spliceTimeline(cols[0], cols[1])
		finished = run.JobRun.Terminal(run.Status(cols[2]))
		return nil
	})
	if err == nil && !found {
		return nil, fmt.Errorf("job run %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, translate(err, fmt.Sprintf("job run %q", id))
	}
	if !ok {
		return nil, fmt.Errorf("job run %q: stored document is not an object", id)
	}
	if finished {
		s.docs.put(jobKey(id), out, gen)
	}
	return out, nil
}

// spliceTimeline adds "step_timeline":[entries] as the last key of the
// JSON object doc.
func spliceTimeline(doc, entries []byte) (json.RawMessage, bool) {
	end := len(doc)
	for end > 0 && (doc[end-1] == ' ' || doc[end-1] == '\n' || doc[end-1] == '\t' || doc[end-1] == '\r') {
		end--
	}
	if end < 2 || doc[0] != '{' || doc[end-1] != '}' {
		return nil, false
	}
	body := doc[:end-1]
	out := make([]byte, 0, len(body)+len(entries)+20)
	out = append(out, body...)
	empty := true
	for _, c := range body[1:] {
		if c != ' ' && c != '\n' && c != '\t' && c != '\r' {
			empty = false
			break
		}
	}
	if !empty {
		out = append(out, ',')
	}
	out = append(out, `"step_timeline":[`...)
	out = append(out, entries...)
	return append(out, "]}"...), true
}
