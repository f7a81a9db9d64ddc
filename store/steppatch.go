package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

// UpdateJobRunStep changes one entry of a job run's step timeline, the one
// of task and step, as a small write: the entry is read alone and written
// back into the stored document in place (jsonb_set on PostgreSQL, json_set
// on SQLite), instead of the whole run being decoded, locked and rewritten
// as UpdateJobRun does. A run without that entry is left unchanged.
// Changes of different entries may run concurrently; each statement
// replaces one entry atomically, so none is lost. The entry's position must
// not move (the timeline is laid out when the run starts).
func (s *Store) UpdateJobRunStep(ctx context.Context, runID, task, step string, change func(*StepTimelineEntry)) error {
	var find, patch string
	if s.postgres {
		find = `SELECT e.i - 1, e.elem::text FROM job_runs j,
			jsonb_array_elements(j.doc->'step_timeline') WITH ORDINALITY AS e(elem, i)
			WHERE j.id = ? AND e.elem->>'task_name' = ? AND e.elem->>'name' = ? LIMIT 1`
		patch = `UPDATE job_runs SET doc = jsonb_set(doc, ARRAY['step_timeline', ?::text], ?::jsonb) WHERE id = ?`
	} else {
		find = `SELECT e.key, e.value FROM job_runs j, json_each(j.doc, '$.step_timeline') e
			WHERE j.id = ? AND json_extract(e.value, '$.task_name') = ? AND json_extract(e.value, '$.name') = ? LIMIT 1`
		patch = `UPDATE job_runs SET doc = json_set(doc, '$.step_timeline[' || ? || ']', json(?)) WHERE id = ?`
	}
	var (
		idx int
		raw []byte
	)
	err := s.db.WithContext(ctx).Raw(find, runID, task, step).Row().Scan(&idx, &raw)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return translate(err, fmt.Sprintf("step %s/%s of job run %q", task, step, runID))
	}
	var e StepTimelineEntry
	if err := json.Unmarshal(raw, &e); err != nil {
		return fmt.Errorf("step %s/%s of job run %q: %w", task, step, runID, err)
	}
	change(&e)
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	err = s.db.WithContext(ctx).Exec(patch, fmt.Sprint(idx), string(b), runID).Error
	return translate(err, fmt.Sprintf("update step %s/%s of job run %q", task, step, runID))
}
