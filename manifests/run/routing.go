package run

import "time"

// Wait is an agentic transition of a line run waiting for a person's
// select (the line run's waiting, API.md; its status is Waiting).
type Wait struct {
	TransitionID string       `json:"transition_id"`
	From         string       `json:"from"`
	Options      []WaitOption `json:"options"`
	Since        time.Time    `json:"since"`
	ExpiresAt    time.Time    `json:"expires_at"`
	RouterError  *string      `json:"router_error"` // null when a person decides without a router
}

// WaitOption is one option a waiting run may be answered with.
type WaitOption struct {
	Name  string  `json:"name"`
	Label *string `json:"label"`
	To    string  `json:"to"`
}

// Decision is how an agentic transition was decided: the option taken,
// why, by whom (`router`, or the name of the token that selected it) and
// when. RouterError says why the router could not decide when a person
// did.
type Decision struct {
	Reason      *string    `json:"reason,omitempty"`
	DecidedBy   *string    `json:"decided_by,omitempty"`
	DecidedAt   *time.Time `json:"decided_at,omitempty"`
	RouterError *string    `json:"router_error,omitempty"`
}
