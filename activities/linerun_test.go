package activities

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// lineStore is an in-memory Store for the line-run activities.
type lineStore struct {
	jobs  map[string]store.JobRun
	lines map[string]store.LineRun
}

func (s *lineStore) GetJobRun(_ context.Context, id string) (store.JobRun, error) {
	r, ok := s.jobs[id]
	if !ok {
		return store.JobRun{}, store.ErrNotFound
	}
	return r, nil
}

func (s *lineStore) UpdateJobRun(_ context.Context, id string, change func(*store.JobRun) error) (store.JobRun, error) {
	r, ok := s.jobs[id]
	if !ok {
		return store.JobRun{}, store.ErrNotFound
	}
	if err := change(&r); err != nil {
		return store.JobRun{}, err
	}
	s.jobs[id] = r
	return r, nil
}

func (s *lineStore) AppendStepLog(context.Context, string, string, string, []byte) error { return nil }

func (s *lineStore) CreateJobRun(_ context.Context, r store.JobRun) (store.JobRun, error) {
	if _, ok := s.jobs[r.ID]; ok {
		return store.JobRun{}, store.ErrConflict
	}
	s.jobs[r.ID] = r
	return r, nil
}

func (s *lineStore) UpdateLineRun(_ context.Context, id string, change func(*store.LineRun) error) (store.LineRun, error) {
	r, ok := s.lines[id]
	if !ok {
		return store.LineRun{}, store.ErrNotFound
	}
	if r.StageOutputs == nil {
		r.StageOutputs = map[string]map[string]any{}
	}
	r.Stages = append([]store.LineRunStage(nil), r.Stages...)
	if err := change(&r); err != nil {
		return store.LineRun{}, err
	}
	s.lines[id] = r
	return r, nil
}

// TestRecordStageCosts: compute and inference costs are summed separately
// from the job runs, with their rating time; the visit is updated in place.
func TestRecordStageCosts(t *testing.T) {
	ctx := context.Background()
	rated := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	st := &lineStore{jobs: map[string]store.JobRun{}, lines: map[string]store.LineRun{"lr_1": {ID: "lr_1", Status: run.Running}}}
	a := &Activities{Store: st, Now: func() time.Time { return rated.Add(time.Hour) }}
	for i, id := range []string{"jr_a", "jr_b"} {
		if _, err := a.CreateStageRun(ctx, CreateStageRunInput{JobRunID: id, LineRunID: "lr_1", Stage: "s", Iteration: i + 1, Order: i + 1, At: rated}); err != nil {
			t.Fatal(err)
		}
		if r := st.lines["lr_1"]; len(r.Stages) != i+1 || r.Stages[i].Status != run.Running || r.Stages[i].StartedAt == nil {
			t.Fatalf("running visit not recorded: %+v", r.Stages)
		}
		jr := st.jobs[id]
		jr.Status, jr.ComputeCostCents, jr.InferenceCostCents, jr.TotalCostCents, jr.CostRatedAt = run.Succeeded, 3, 5, 8, &rated
		st.jobs[id] = jr
		res, err := a.RecordStage(ctx, RecordStageInput{RunID: "lr_1", Visit: StageVisit{Stage: "s", JobRunID: id, Iteration: i + 1, Order: i + 1,
			Outcome: run.Outcome{Status: run.Succeeded}, CostCents: 3}})
		if err != nil {
			t.Fatal(err)
		}
		var visit store.LineRunStage
		if err := json.Unmarshal(res.Visit, &visit); err != nil || visit.JobRunID == nil || *visit.JobRunID != id || visit.Status != run.Succeeded {
			t.Fatalf("result visit %s: %v", res.Visit, err)
		}
		r := st.lines["lr_1"]
		if res.TotalCostCents != r.TotalCostCents {
			t.Fatalf("result cost %d, record %d", res.TotalCostCents, r.TotalCostCents)
		}
		s := r.Stages[i]
		if len(r.Stages) != i+1 || s.Status != run.Succeeded || s.ComputeCostCents != 3 || s.InferenceCostCents != 5 || s.TotalCostCents != 8 || !s.CostRatedAt.Equal(rated) {
			t.Fatalf("stage %+v", s)
		}
	}
	r := st.lines["lr_1"]
	if r.ComputeCostCents != 6 || r.InferenceCostCents != 10 || r.TotalCostCents != 16 || !r.CostRatedAt.Equal(rated) {
		t.Fatalf("line costs %d/%d/%d rated %v", r.ComputeCostCents, r.InferenceCostCents, r.TotalCostCents, r.CostRatedAt)
	}
	// FinishLineRun returns the final record and never changes a finished run.
	fin, err := a.FinishLineRun(ctx, FinishLineRunInput{RunID: "lr_1", Status: run.Succeeded})
	var final store.LineRun
	if err != nil || fin.Status != run.Succeeded || json.Unmarshal(fin.Record, &final) != nil || final.CompletedAt == nil {
		t.Fatalf("finish: %v %+v", err, fin)
	}
	again, err := a.FinishLineRun(ctx, FinishLineRunInput{RunID: "lr_1", Status: run.Failed, Failure: &run.Failure{Code: run.UnknownFailure}})
	if err != nil || again.Status != run.Succeeded || again.Failure != nil {
		t.Fatalf("a finished run changed: %v %+v", err, again)
	}
}

// TestEnrichFailure: the failing step's and the job run's diagnostics.
func TestEnrichFailure(t *testing.T) {
	code, class, msg, exit := "EXEC_FAILED", "config", "exit 3", 3
	jr := &store.JobRun{ErrorDetails: map[string]any{"task_name": "t", "step_name": "boom"}, StepTimeline: []store.StepTimelineEntry{
		{Name: "ok", TaskName: "t", Status: run.Succeeded},
		{Name: "boom", TaskName: "t", Status: run.Failed, ErrorCode: &code, FailureClass: &class, ErrorMessage: &msg, ExitCode: &exit,
			ErrorDetails: map[string]any{"stderr_tail": "no"}},
	}}
	f := enrichFailure(&run.Failure{Code: run.StageFailed, Domain: run.DomainConfig, Details: map[string]any{"job_run_id": "jr_1"}}, jr, nil)
	d := f.ErrorDetails
	if *f.StageStep != "boom" || *f.TaskName != "t" || *f.ErrorCode != code || *f.FailureClass != class || d["exit_code"] != 3 ||
		d["step_error"] != msg || d["step_error_code"] != code || d["step_failure_class"] != class || d["job_run_id"] != "jr_1" ||
		d["step_error_details"].(map[string]any)["stderr_tail"] != "no" || d["job_error_details"].(map[string]any)["step_name"] != "boom" {
		t.Fatalf("failure %+v details %v", f, d)
	}
}
