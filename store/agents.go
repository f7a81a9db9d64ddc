package store

import (
	"context"
	"errors"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// KnowledgeVersionRef is a knowledge version a run used (AGENTS.md).
type KnowledgeVersionRef struct {
	Slug          string `json:"slug"`
	VersionID     string `json:"version_id"`
	VersionNumber int    `json:"version_number"`
	ContentHash   string `json:"content_hash"`
}

// AgentUsage is one usage line of a run_agent step.
type AgentUsage struct {
	Model        string `json:"model"`
	InputTokens  int64  `json:"input_tokens"`
	OutputTokens int64  `json:"output_tokens"`
}

// sandboxSessionModel keeps agent session ids with their sandbox: a named
// session resumes in a later step or run that uses the same sandbox.
type sandboxSessionModel struct {
	Sandbox   string `gorm:"primaryKey;size:255"`
	Name      string `gorm:"primaryKey;size:255"`
	SessionID string `gorm:"size:1024"`
	UpdatedAt time.Time
}

func (sandboxSessionModel) TableName() string { return "sandbox_sessions" }

// GetSandboxSession returns the session id recorded for a named session in
// a sandbox (sandbox is the sandbox's identity), or ErrNotFound.
func (s *Store) GetSandboxSession(ctx context.Context, sandbox, name string) (string, error) {
	var m sandboxSessionModel
	err := s.db.WithContext(ctx).Where("sandbox = ? AND name = ?", sandbox, name).First(&m).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", translate(err, "get sandbox session")
	}
	return m.SessionID, nil
}

// PutSandboxSession records (or replaces) a named session's id in a sandbox.
func (s *Store) PutSandboxSession(ctx context.Context, sandbox, name, sessionID string) error {
	m := sandboxSessionModel{Sandbox: sandbox, Name: name, SessionID: sessionID, UpdatedAt: time.Now().UTC()}
	err := s.db.WithContext(ctx).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "sandbox"}, {Name: "name"}},
		DoUpdates: clause.AssignmentColumns([]string{"session_id", "updated_at"}),
	}).Create(&m).Error
	return translate(err, "put sandbox session")
}
