package store

import (
	"maps"

	"github.com/linefactory/linefactory/manifests/run"
)

// SetOutcome records how the step ended: its status and, where set, its
// error code, message, failure class and details (the rest stay null).
func (e *StepTimelineEntry) SetOutcome(o run.Outcome) {
	e.Status = o.Status
	e.ErrorCode, e.ErrorMessage, e.FailureClass = nullable(o.ErrorCode), nullable(o.ErrorMessage), nullable(string(o.FailureClass))
	if o.ErrorDetails != nil {
		e.ErrorDetails = o.ErrorDetails
	}
}

// Outcome is how the step ended, as recorded.
func (e StepTimelineEntry) Outcome() run.Outcome {
	return run.Outcome{Status: e.Status, ErrorCode: deref(e.ErrorCode), ErrorMessage: deref(e.ErrorMessage),
		FailureClass: run.FailureClass(deref(e.FailureClass)), ErrorDetails: e.ErrorDetails}
}

// SetOutcome records how the job run ended: its status and, where set, its
// error code, message, failure class and details (the rest stay null).
func (r *JobRun) SetOutcome(o run.Outcome) {
	r.Status = o.Status
	r.ErrorCode, r.ErrorMessage, r.FailureClass = nullable(o.ErrorCode), nullable(o.ErrorMessage), nullable(string(o.FailureClass))
	if o.ErrorDetails != nil {
		r.ErrorDetails = o.ErrorDetails
	}
}

// Outcome is how the job run ended, as recorded.
func (r JobRun) Outcome() run.Outcome {
	return run.Outcome{Status: r.Status, ErrorCode: deref(r.ErrorCode), ErrorMessage: deref(r.ErrorMessage),
		FailureClass: run.FailureClass(deref(r.FailureClass)), ErrorDetails: r.ErrorDetails}
}

// nullable is s, or nil (JSON null) when s is empty.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// NewLineRunFailure is the record of a classified line-run failure: its
// code, domain and message, and where set its stage, the failing job's
// error code and class, and a copy of its details.
func NewLineRunFailure(f run.Failure) *LineRunFailure {
	lf := &LineRunFailure{Code: new(f.Code), Domain: f.Domain, ErrorMessage: new(f.ErrorMessage), StageName: nullable(f.StageName),
		ErrorCode: nullable(f.ErrorCode), FailureClass: nullable(string(f.FailureClass))}
	if f.Details != nil {
		lf.ErrorDetails = maps.Clone(f.Details)
	}
	return lf
}

// Failure is the classified failure the record holds.
func (f LineRunFailure) Failure() run.Failure {
	var code run.FailureCode
	if f.Code != nil {
		code = *f.Code
	}
	return run.Failure{Code: code, Domain: f.Domain, ErrorMessage: deref(f.ErrorMessage), StageName: deref(f.StageName),
		ErrorCode: deref(f.ErrorCode), FailureClass: run.FailureClass(deref(f.FailureClass)), Details: f.ErrorDetails}
}
