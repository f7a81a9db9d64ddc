package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
)

// ListJobRunsJSON lists job runs newest first as the job-run listings
// answer them (GET /jobs/{name}/runs, GET /job-runs), from the stored JSON
// as is, like GetJobRunJSON: each run's document with its timeline entries
// spliced in as "step_timeline", joined by the database in the same
// statement. Decoding 50 documents and their timeline entries (a
// thousand for 20-step runs) and encoding them again was most of such a
// page's cost. With f.WithoutTimeline the documents come without
// "step_timeline" and the entries are not read (the summary shape leaves
// them out). It is a fixed statement per filter combination sent through
// database/sql (fastread.go), and filters as SearchJobRuns does.
func (s *Store) ListJobRunsJSON(ctx context.Context, f RunSearch) ([]json.RawMessage, error) {
	limit, offset := clampPage(f.Limit, f.Offset)
	var (
		where []string
		args  []any
	)
	if f.Name != "" {
		where, args = append(where, "j.job_name = ?"), append(args, f.Name)
	}
	if f.Status != "" {
		where, args = append(where, "j.status = ?"), append(args, string(f.Status))
	}
	if f.LineRunID != "" {
		where, args = append(where, "j.line_run_id = ?"), append(args, f.LineRunID)
	}
	if !f.Since.IsZero() {
		where, args = append(where, "j.created_at >= ?"), append(args, f.Since.UTC())
	}
	doc, steps := "j.doc", "(SELECT group_concat(s.entry, ',' ORDER BY s.pos) FROM job_run_steps s WHERE s.run_id = j.id)"
	if s.postgres {
		doc, steps = "j.doc::text", "(SELECT string_agg(s.entry, ',' ORDER BY s.pos) FROM job_run_steps s WHERE s.run_id = j.id)"
	}
	if f.WithoutTimeline {
		steps = "NULL"
	}
	query := "SELECT j.id, " + doc + ", " + steps + " FROM job_runs j"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY j.created_at DESC, j.id DESC LIMIT ? OFFSET ?"
	rows, err := s.queryRows(ctx, query, append(args, limit, offset)...)
	if err != nil {
		return nil, translate(err, "list job runs")
	}
	defer rows.Close()
	out := make([]json.RawMessage, 0, limit)
	for rows.Next() {
		var (
			id      string
			doc     []byte
			entries sql.NullString
		)
		if err := rows.Scan(&id, &doc, &entries); err != nil {
			return nil, translate(err, "list job runs")
		}
		if f.WithoutTimeline {
			out = append(out, doc)
			continue
		}
		item, ok := spliceTimeline(doc, []byte(entries.String))
		if !ok {
			return nil, fmt.Errorf("job run %q: stored document is not an object", id)
		}
		out = append(out, item)
	}
	return out, translate(rows.Err(), "list job runs")
}
