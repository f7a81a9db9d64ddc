package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

// GetJobRunJSON returns a job run's stored JSON document as is: the same
// object GetJobRun decodes, for callers that only pass it on.
func (s *Store) GetJobRunJSON(ctx context.Context, id string) (json.RawMessage, error) {
	return s.rawDoc(ctx, "job_runs", id, "job run")
}

// GetLineRunJSON returns a line run's stored JSON document as is.
func (s *Store) GetLineRunJSON(ctx context.Context, id string) (json.RawMessage, error) {
	return s.rawDoc(ctx, "line_runs", id, "line run")
}

func (s *Store) rawDoc(ctx context.Context, table, id, what string) (json.RawMessage, error) {
	var doc []byte
	col := "doc"
	if s.postgres {
		col = "doc::text" // jsonb comes back as text anyway; say so for the driver
	}
	err := s.db.WithContext(ctx).Table(table).Select(col).Where("id = ?", id).Limit(1).Row().Scan(&doc)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && len(doc) == 0) {
		return nil, fmt.Errorf("%s %q: %w", what, id, ErrNotFound)
	}
	if err != nil {
		return nil, translate(err, fmt.Sprintf("%s %q", what, id))
	}
	return json.RawMessage(doc), nil
}
