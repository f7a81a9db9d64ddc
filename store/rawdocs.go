package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// GetLineRunJSON returns a line run's stored JSON document as is.
func (s *Store) GetLineRunJSON(ctx context.Context, id string) (json.RawMessage, error) {
	return s.rawDoc(ctx, lineRunDoc, id, "line run")
}

// lineRunDoc reads a line run's document: SQLite's and PostgreSQL's (jsonb
// comes back as text anyway; say so for the driver).
var lineRunDoc = [2]string{"SELECT doc FROM line_runs WHERE id = ?", "SELECT doc::text FROM line_runs WHERE id = ?"}

func (s *Store) rawDoc(ctx context.Context, query [2]string, id, what string) (json.RawMessage, error) {
	q := query[0]
	if s.postgres {
		q = query[1]
	}
	var doc json.RawMessage
	found, err := s.readRow(ctx, q, id, func(cols [][]byte) error {
		if len(cols[0]) > 0 {
			doc = append(make(json.RawMessage, 0, len(cols[0])), cols[0]...)
		}
		return nil
	})
	if err == nil && (!found || len(doc) == 0) {
		return nil, fmt.Errorf("%s %q: %w", what, id, ErrNotFound)
	}
	if err != nil {
		return nil, translate(err, fmt.Sprintf("%s %q", what, id))
	}
	return doc, nil
}

// lineRunListDrops are the keys a line-run listing leaves out of each run:
// the details only GET /factory/line-runs/{id} shows, and the raw webhook
// body of the trigger payload.
var lineRunListDrops = []string{"transitions", "stage_outputs", "workflow_id", "retry_of", "stop_reason"}

// ListLineRunsJSON lists line runs newest first as listings show them: each
// stored document without lineRunListDrops and trigger.payload.body, cut
// by the database (jsonb operators on PostgreSQL, json_remove on SQLite), so
// the documents are never decoded here. Like the reads by id, it is a fixed
// statement per filter combination sent through database/sql (fastread.go).
func (s *Store) ListLineRunsJSON(ctx context.Context, f LineRunFilter) ([]json.RawMessage, error) {
	limit, offset := clampPage(f.Limit, f.Offset)
	var col string
	if s.postgres {
		col = "((doc - '{" + strings.Join(lineRunListDrops, ",") + "}'::text[]) #- '{trigger,payload,body}')::text"
	} else {
		col = "json_remove(doc, '$." + strings.Join(lineRunListDrops, "', '$.") + "', '$.trigger.payload.body')"
	}
	var (
		where []string
		args  []any
	)
	if f.LineName != "" {
		where, args = append(where, "line_name = ?"), append(args, f.LineName)
	}
	if f.Status != "" {
		where, args = append(where, "status = ?"), append(args, string(f.Status))
	}
	query := "SELECT " + col + " FROM line_runs"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?"
	rows, err := s.queryRows(ctx, query, append(args, limit, offset)...)
	if err != nil {
		return nil, translate(err, "list line runs")
	}
	defer rows.Close()
	out := make([]json.RawMessage, 0, limit)
	for rows.Next() {
		var doc []byte
		if err := rows.Scan(&doc); err != nil {
			return nil, translate(err, "list line runs")
		}
		out = append(out, doc)
	}
	return out, translate(rows.Err(), "list line runs")
}
