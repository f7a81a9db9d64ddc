package api

import (
	"context"
	"errors"
	"fmt"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/workflows"
)

// errRetrySnapshot: a line run cannot be retried as asked.
var errRetrySnapshot = errors.New("retry snapshot invalid")

// retryPlan is the start of a retried line run: the manager's state and
// what the new record carries over from the run it retries.
type retryPlan struct {
	State *workflows.LineState
	// Carried is how many of the old run's visits (the first ones) the new
	// record carries over, marked carried.
	Carried int
	// Outputs are the carried visits' outputs by stage.
	Outputs map[string]map[string]any
	// Transitions is how many of the old run's transitions (the first ones)
	// the new record carries over.
	Transitions int
}

// jobRunValues returns the outputs and the run params of a job run.
type jobRunValues func(id string) (outputs, params map[string]any, err error)

// retrySnapshot plans the retry of the failed line run old from stage from
// ("" = the failed stage): the new run re-runs the last visit of that stage,
// keeping its iteration, with the params it ran with; every visit before it
// is carried over with its outputs, the transitions taken, the visit count
// and the cost, so the line's limits keep counting. Visits after it are
// not carried. Its errors are errRetrySnapshot.
func retrySnapshot(old store.LineRun, from string, jobRun jobRunValues) (retryPlan, error) {
	if old.Status != run.Failed {
		return retryPlan{}, fmt.Errorf("only a failed line run can be retried; %s is %s: %w", old.ID, old.Status, errRetrySnapshot)
	}
	if old.LineVersionID == nil || len(old.Stages) == 0 {
		return retryPlan{}, fmt.Errorf("line run %s has no stage visit to retry from: %w", old.ID, errRetrySnapshot)
	}
	if from == "" {
		from = old.Stages[len(old.Stages)-1].StageName
		if old.Failure != nil && old.Failure.StageName != nil && *old.Failure.StageName != "" {
			from = *old.Failure.StageName
		}
	}
	cut := retryCut(old.Stages, from)
	if cut < 0 {
		return retryPlan{}, fmt.Errorf("stage %q was not visited by line run %s: %w", from, old.ID, errRetrySnapshot)
	}
	p := retryPlan{Carried: cut, Outputs: map[string]map[string]any{}, State: &workflows.LineState{Stage: from, Iterations: map[string]int{},
		Transitions: map[string]int{}, Results: map[string]manifests.StageResult{}}}
	if err := carryVisits(&p, old.Stages[:cut], jobRun); err != nil {
		return retryPlan{}, err
	}
	p.Transitions = min(p.Transitions, len(old.Transitions))
	p.State.Iterations[from] = old.Stages[cut].Iteration - 1
	if id := old.Stages[cut].JobRunID; id != nil && *id != "" {
		_, params, err := jobRun(*id)
		if err != nil {
			return retryPlan{}, fmt.Errorf("job run %s of stage %s: %v: %w", *id, from, err, errRetrySnapshot)
		}
		p.State.StageParams = params
	}
	return p, nil
}

// retryCut is the index of the first attempt of the last visit of stage
// from, or -1.
func retryCut(visits []store.LineRunStage, from string) int {
	cut := -1
	for i, v := range visits {
		if v.StageName == from && (cut < 0 || v.Iteration != visits[cut].Iteration) {
			cut = i
		}
	}
	return cut
}

// carryVisits counts the carried visits into p: iterations, stage order,
// cost, transitions taken and the latest result (with outputs) per stage.
func carryVisits(p *retryPlan, carried []store.LineRunStage, jobRun jobRunValues) error {
	st := p.State
	visits := map[string]bool{}
	for _, v := range carried {
		visits[fmt.Sprintf("%s#%d", v.StageName, v.Iteration)] = true
		st.Iterations[v.StageName] = max(st.Iterations[v.StageName], v.Iteration)
		st.StageOrder = max(st.StageOrder, v.StageOrder)
		st.CostCents += v.TotalCostCents
		if v.Outcome != nil && *v.Outcome != "" {
			st.Transitions[*v.Outcome]++
			p.Transitions++
		}
		res := manifests.StageResult{Status: string(v.Status), Iteration: v.Iteration}
		if v.JobRunID != nil {
			res.JobRunID = *v.JobRunID
		}
		if res.JobRunID != "" && v.Status == run.Succeeded {
			out, _, err := jobRun(res.JobRunID)
			if err != nil {
				return fmt.Errorf("job run %s of stage %s: %v: %w", res.JobRunID, v.StageName, err, errRetrySnapshot)
			}
			if out != nil {
				res.Outputs = out
				p.Outputs[v.StageName] = out
			}
		}
		st.Results[v.StageName] = res
	}
	st.Visits = len(visits)
	return nil
}

// jobRunValues reads the outputs and run params of job runs from the store.
func (s *Server) jobRunValues(ctx context.Context) jobRunValues {
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
