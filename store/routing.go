package store

import (
	"context"
	"fmt"
	"time"

	"github.com/linefactory/linefactory/manifests/run"
)

// AgenticDecision is how an agentic transition was decided (the run
// vocabulary's Decision, recorded in a taken transition).
type AgenticDecision = run.Decision

// Routing is what a line run records of its agentic transitions: the
// knowledge versions its instructions resolved to at start, the wait it is
// in, and the router's calls with their cost.
type Routing struct {
	KnowledgeVersions []InstructionsVersion `json:"knowledge_versions,omitempty"`
	// Waiting is set while the run waits for a person's select (always
	// rendered: a record decoded over an older one must lose it).
	Waiting *Waiting `json:"waiting"`
	// RouterCalls are the router's calls, one per decision; their tokens
	// are priced into the run's inference cost (RouterCostCents, rounded
	// up over all calls).
	RouterCalls     []RouterCall `json:"router_calls,omitempty"`
	RouterCostCents int64        `json:"router_cost_cents,omitempty"`
}

// InstructionsVersion is a knowledge version a line run's routing
// instructions used (knowledge_versions of the line run).
type InstructionsVersion struct {
	Slug          string `json:"slug"`
	VersionID     string `json:"version_id"`
	VersionNumber int    `json:"version_number"`
	ContentHash   string `json:"content_hash"`
	// Use says what it was bound to: "agent.instructions" or
	// "transitions.<id>.instructions".
	Use string `json:"use,omitempty"`
}

// Waiting is an agentic transition waiting for a person's select; a
// WaitingOption one of its options (the run vocabulary's types).
type (
	Waiting       = run.Wait
	WaitingOption = run.WaitOption
)

// RouterCall is one call of the router for a decision.
type RouterCall struct {
	TransitionID string    `json:"transition_id"`
	Iteration    int       `json:"iteration"`
	Model        string    `json:"model"`
	InputTokens  int64     `json:"input_tokens"`
	OutputTokens int64     `json:"output_tokens"`
	MicroCents   int64     `json:"micro_cents"`
	Unpriced     bool      `json:"unpriced,omitempty"`
	Option       *string   `json:"option,omitempty"`
	Error        *string   `json:"error,omitempty"`
	At           time.Time `json:"at"`
}

// GatewayUsage is the token usage a job run's steps drew through the
// inference gateway, as the service measured it.
type GatewayUsage struct {
	Requests     int64 `json:"requests"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// MicroCents is the priced usage in millionths of a cent; the job run's
	// inference cost holds it rounded up to whole cents.
	MicroCents int64    `json:"micro_cents"`
	Unpriced   []string `json:"unpriced_models,omitempty"`
}

// InferenceToken is a token of the inference gateway: valid for one job
// run while it runs. Only its SHA-256 is stored.
type InferenceToken struct {
	Hash      string
	JobRunID  string
	Step      string
	CreatedAt time.Time
}

type inferenceTokenModel struct {
	Hash      string `gorm:"primaryKey;size:64"`
	JobRunID  string `gorm:"index;size:64"`
	Step      string `gorm:"size:255"`
	CreatedAt time.Time
}

func (inferenceTokenModel) TableName() string { return "inference_tokens" }

// CreateInferenceToken stores a gateway token's hash for a job run's step.
func (s *Store) CreateInferenceToken(ctx context.Context, t InferenceToken) error {
	if t.CreatedAt.IsZero() {
		t.CreatedAt = s.now()
	}
	m := inferenceTokenModel(t)
	return translate(s.db.WithContext(ctx).Create(&m).Error, "create inference token")
}

// FindInferenceToken returns the gateway token with this hash.
func (s *Store) FindInferenceToken(ctx context.Context, hash string) (InferenceToken, error) {
	var m inferenceTokenModel
	if err := s.db.WithContext(ctx).Where("hash = ?", hash).Take(&m).Error; err != nil {
		return InferenceToken{}, translate(err, fmt.Sprintf("inference token %.8s…", hash))
	}
	return InferenceToken{Hash: m.Hash, JobRunID: m.JobRunID, Step: m.Step, CreatedAt: m.CreatedAt.UTC()}, nil
}
