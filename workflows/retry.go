package workflows

import (
	"errors"
	"fmt"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/run"
)

// ErrRetrySnapshot: a line run cannot be retried as asked.
var ErrRetrySnapshot = errors.New("retry snapshot invalid")

// RetryVisit is a stage visit of the line run a retry continues.
type RetryVisit struct {
	StageName  string
	StageOrder int
	Iteration  int
	Status     run.Status
	Outcome    string // the transition taken from it, "" when none
	JobRunID   string // "" when it made none
	CostCents  int64  // its rated total cost
}

// RetryFrom is the line run a retry continues.
type RetryFrom struct {
	RunID       string
	Status      run.Status
	Versioned   bool   // it names the line version it ran
	FailedStage string // the failure's stage, "" when none
	Visits      []RetryVisit
	Transitions int // transitions it recorded
}

// Retry is the start of a retried line run: the manager's state and what
// the new record carries over from the run it retries.
type Retry struct {
	State *LineState
	// Carried is how many of the old run's visits (the first ones) the new
	// record carries over, marked carried.
	Carried int
	// Outputs are the carried visits' outputs by stage.
	Outputs map[string]map[string]any
	// Transitions is how many of the old run's transitions (the first ones)
	// the new record carries over.
	Transitions int
}

// JobRunValues returns the outputs and the run params of a job run.
type JobRunValues func(id string) (outputs, params map[string]any, err error)

// RetrySnapshot plans the retry of a failed line run from stage from (""
// = the failed stage): the new run re-runs the last visit of that stage,
// keeping its iteration, with the params it ran with; every visit before it
// is carried over with its outputs, the transitions taken, the visit count
// and the cost, so the line's limits keep counting. Visits after it are
// not carried.
func RetrySnapshot(old RetryFrom, from string, jobRun JobRunValues) (Retry, error) {
	if old.Status != run.Failed {
		return Retry{}, fmt.Errorf("only a failed line run can be retried; %s is %s: %w", old.RunID, old.Status, ErrRetrySnapshot)
	}
	if !old.Versioned || len(old.Visits) == 0 {
		return Retry{}, fmt.Errorf("line run %s has no stage visit to retry from: %w", old.RunID, ErrRetrySnapshot)
	}
	if from == "" {
		from = old.Visits[len(old.Visits)-1].StageName
		if old.FailedStage != "" {
			from = old.FailedStage
		}
	}
	cut := retryCut(old.Visits, from)
	if cut < 0 {
		return Retry{}, fmt.Errorf("stage %q was not visited by line run %s: %w", from, old.RunID, ErrRetrySnapshot)
	}
	r := Retry{Carried: cut, Outputs: map[string]map[string]any{}, State: &LineState{Stage: from, Iterations: map[string]int{},
		Transitions: map[string]int{}, Results: map[string]manifests.StageResult{}}}
	if err := carryVisits(&r, old.Visits[:cut], jobRun); err != nil {
		return Retry{}, err
	}
	r.Transitions = min(r.Transitions, old.Transitions)
	r.State.Iterations[from] = old.Visits[cut].Iteration - 1
	if id := old.Visits[cut].JobRunID; id != "" {
		_, params, err := jobRun(id)
		if err != nil {
			return Retry{}, fmt.Errorf("job run %s of stage %s: %v: %w", id, from, err, ErrRetrySnapshot)
		}
		r.State.StageParams = params
	}
	return r, nil
}

// retryCut is the index of the first attempt of the last visit of stage
// from, or -1.
func retryCut(visits []RetryVisit, from string) int {
	cut := -1
	for i, v := range visits {
		if v.StageName == from && (cut < 0 || v.Iteration != visits[cut].Iteration) {
			cut = i
		}
	}
	return cut
}

// carryVisits counts the carried visits into r: iterations, stage order,
// cost, transitions taken and the latest result (with outputs) per stage.
func carryVisits(r *Retry, carried []RetryVisit, jobRun JobRunValues) error {
	st := r.State
	visits := map[string]bool{}
	for _, v := range carried {
		visits[fmt.Sprintf("%s#%d", v.StageName, v.Iteration)] = true
		st.Iterations[v.StageName] = max(st.Iterations[v.StageName], v.Iteration)
		st.StageOrder = max(st.StageOrder, v.StageOrder)
		st.CostCents += v.CostCents
		if v.Outcome != "" {
			st.Transitions[v.Outcome]++
			r.Transitions++
		}
		res := manifests.StageResult{Status: string(v.Status), Iteration: v.Iteration, JobRunID: v.JobRunID}
		if v.JobRunID != "" && v.Status == run.Succeeded {
			out, _, err := jobRun(v.JobRunID)
			if err != nil {
				return fmt.Errorf("job run %s of stage %s: %v: %w", v.JobRunID, v.StageName, err, ErrRetrySnapshot)
			}
			if out != nil {
				res.Outputs = out
				r.Outputs[v.StageName] = out
			}
		}
		st.Results[v.StageName] = res
	}
	st.Visits = len(visits)
	return nil
}
