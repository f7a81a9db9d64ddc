package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"gorm.io/gorm"

	"github.com/linefactory/linefactory/manifests/run"
)

// GetLineRunJSON returns a line run's stored JSON document as is; a
// finished run's from the cache when it has been read lately (doccache.go).
// The returned document may be shared and must not be changed.
func (s *Store) GetLineRunJSON(ctx context.Context, id string) (json.RawMessage, error) {
	doc, gen, ok := s.docs.get(lineKey(id))
	if ok {
		return doc, nil
	}
	q := lineRunDoc[0]
	if s.postgres {
		q = lineRunDoc[1]
	}
	var finished bool
	found, err := s.readRow(ctx, q, id, func(cols [][]byte) error {
		if len(cols[0]) > 0 {
			doc = append(make(json.RawMessage, 0, len(cols[0])), cols[0]...)
		}
		finished = run.LineRun.Terminal(run.Status(cols[1]))
		return nil
	})
	if err == nil && (!found || len(doc) == 0) {
		return nil, fmt.Errorf("line run %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, translate(err, fmt.Sprintf("line run %q", id))
	}
	if finished {
		s.docs.put(lineKey(id), doc, gen)
	}
	return doc, nil
}

// lineRunDoc reads a line run's document and status: SQLite's and
// PostgreSQL's (jsonb comes back as text anyway; say so for the driver).
var lineRunDoc = [2]string{"SELECT doc, status FROM line_runs WHERE id = ?", "SELECT doc::text, status FROM line_runs WHERE id = ?"}

// lineRunListDrops are the keys a line-run listing leaves out of each run:
// the details only GET /factory/line-runs/{id} shows, and the raw webhook
// body of the trigger payload.
var lineRunListDrops = []string{"transitions", "stage_outputs", "workflow_id", "retry_of", "stop_reason"}

// pgLineRunListCut is the listing's cut of a stored document on PostgreSQL
// (jsonb operators), the expression of line_runs.list_doc.
var pgLineRunListCut = "((doc - '{" + strings.Join(lineRunListDrops, ",") + "}'::text[]) #- '{trigger,payload,body}')::text"

// migrateLineRunList gives line_runs on PostgreSQL a stored generated column
// list_doc: each run as listings show it, cut from doc and printed as text
// by PostgreSQL whenever the row is written. Cutting and printing 50 jsonb
// documents on every listing was most of its cost: the page's statement took
// 2.0–4.0 ms with the cut and takes 0.36–0.68 ms reading list_doc (pgbench,
// one client, 50 runs of a 3-stage line, a loaded 2-core machine). Being
// generated, the column can never disagree with doc, whoever writes the row.
//
// The table's toast_tuple_target goes to 4080 bytes first, so a row keeps
// both columns in the row itself (doc compressed, list_doc as it is) instead
// of moving doc out to the TOAST table once the row passes the default 2 kB:
// the reads by id and the listing read no TOAST. The price is space: such a
// run's row takes about 3.6 kB instead of 1.3 kB. Adding the column rewrites
// the table once, holding its lock meanwhile (3–8 s for 50,000 runs here).
// SQLite cuts at read time (json_remove, see ListLineRunsJSON).
func (s *Store) migrateLineRunList(ctx context.Context) error {
	if !s.postgres {
		return nil
	}
	db := s.db.WithContext(ctx)
	if db.Migrator().HasColumn(&lineRunModel{}, "list_doc") {
		return nil
	}
	return db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("ALTER TABLE line_runs SET (toast_tuple_target = 4080)").Error; err != nil {
			return fmt.Errorf("set line_runs toast_tuple_target: %w", err)
		}
		err := tx.Exec("ALTER TABLE line_runs ADD COLUMN IF NOT EXISTS list_doc text GENERATED ALWAYS AS (" + pgLineRunListCut + ") STORED").Error
		if err != nil {
			return fmt.Errorf("add line_runs.list_doc: %w", err)
		}
		return nil
	})
}

// ListLineRunsJSON lists line runs newest first as listings show them: each
// stored document without lineRunListDrops and trigger.payload.body. The
// documents are never decoded here: PostgreSQL keeps that cut in
// list_doc (migrateLineRunList), SQLite cuts each document at read time
// (json_remove). Like the reads by id, it is a fixed statement per filter
// combination sent through database/sql (fastread.go).
func (s *Store) ListLineRunsJSON(ctx context.Context, f LineRunFilter) ([]json.RawMessage, error) {
	limit, offset := clampPage(f.Limit, f.Offset)
	col := "list_doc"
	if !s.postgres {
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
	if !f.Since.IsZero() {
		where, args = append(where, "created_at >= ?"), append(args, f.Since.UTC())
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
