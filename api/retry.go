package api

import (
	"context"

	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/workflows"
)

// retrySource is what a retry plan needs of the line run it continues.
func retrySource(old store.LineRun) workflows.RetryFrom {
	from := workflows.RetryFrom{RunID: old.ID, Status: old.Status, Versioned: old.LineVersionID != nil, Transitions: len(old.Transitions)}
	if old.Failure != nil && old.Failure.StageName != nil {
		from.FailedStage = *old.Failure.StageName
	}
	for _, s := range old.Stages {
		v := workflows.RetryVisit{StageName: s.StageName, StageOrder: s.StageOrder, Iteration: s.Iteration, Status: s.Status, CostCents: s.TotalCostCents}
		if s.Outcome != nil {
			v.Outcome = *s.Outcome
		}
		if s.JobRunID != nil {
			v.JobRunID = *s.JobRunID
		}
		from.Visits = append(from.Visits, v)
	}
	return from
}

// jobRunValues reads the outputs and run params of job runs from the store.
func (s *Server) jobRunValues(ctx context.Context) workflows.JobRunValues {
	return func(id string) (map[string]any, map[string]any, error) {
		jr, err := s.store.GetJobRun(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		out, _ := jr.ResultPayload["outputs"].(map[string]any)
		return out, jr.RunParams, nil
	}
}

// carriedVisits are the first n visits of old, marked carried.
func carriedVisits(old store.LineRun, n int) []store.LineRunStage {
	out := make([]store.LineRunStage, 0, n)
	for _, s := range old.Stages[:n] {
		s.Carried = true
		out = append(out, s)
	}
	return out
}
