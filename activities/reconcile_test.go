package activities

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

type fakeEngine map[string]WorkflowState

func (e fakeEngine) DescribeWorkflow(_ context.Context, id string) (WorkflowState, error) {
	if ws, ok := e[id]; ok {
		return ws, nil
	}
	return WorkflowState{State: WorkflowMissing}, nil
}

type reconcileStore struct {
	jobs  map[string]*store.JobRun
	lines map[string]*store.LineRun
}

func (s *reconcileStore) UnfinishedJobRuns(_ context.Context, queuedBefore time.Time, _ int) ([]store.JobRun, error) {
	var out []store.JobRun
	for _, j := range s.jobs {
		if j.Status == "running" || (j.Status == "queued" && j.CreatedAt.Before(queuedBefore)) {
			out = append(out, *j)
		}
	}
	return out, nil
}

func (s *reconcileStore) UnfinishedLineRuns(_ context.Context, queuedBefore time.Time, _ int) ([]store.LineRun, error) {
	var out []store.LineRun
	for _, l := range s.lines {
		if l.Status == "running" || l.Status == "waiting" || (l.Status == "queued" && l.CreatedAt.Before(queuedBefore)) {
			out = append(out, *l)
		}
	}
	return out, nil
}

func (s *reconcileStore) UpdateJobRun(_ context.Context, id string, change func(*store.JobRun) error) (store.JobRun, error) {
	j := s.jobs[id]
	return *j, change(j)
}

func (s *reconcileStore) UpdateLineRun(_ context.Context, id string, change func(*store.LineRun) error) (store.LineRun, error) {
	l := s.lines[id]
	return *l, change(l)
}

// TestReconcile: each engine state ends an unfinished record as it should;
// a young queued record and a running workflow are left alone.
func TestReconcile(t *testing.T) {
	now := time.Date(2026, 11, 23, 17, 0, 0, 0, time.UTC)
	old, young := now.Add(-time.Minute), now.Add(-time.Second)
	stop := "stopped by ci"
	st := &reconcileStore{jobs: map[string]*store.JobRun{}, lines: map[string]*store.LineRun{}}
	job := func(id string, status run.Status, created time.Time) {
		st.jobs[id] = &store.JobRun{ID: id, Status: status, WorkflowID: "jobrun/" + id, CreatedAt: created,
			StepTimeline: []store.StepTimelineEntry{{Name: "a", Status: "running"}, {Name: "b", Status: "pending"}}}
	}
	job("never", "queued", old)
	job("young", "queued", young)
	job("lost", "running", old)
	job("terminated", "running", young)
	job("alive", "running", old)
	job("done", "running", old)
	job("stopped", "queued", old)
	st.jobs["stopped"].StopReason = &stop
	st.lines["lterm"] = &store.LineRun{ID: "lterm", Status: "waiting", WorkflowID: "linerun/lterm", CreatedAt: young,
		Stages:       []store.LineRunStage{{StageName: "a", Status: run.Succeeded}, {StageName: "b", Status: run.Running}},
		ManagerTurns: []store.ManagerTurn{{State: "visiting b"}}, Routing: store.Routing{Waiting: &store.Waiting{TransitionID: "route"}}}
	st.lines["lnever"] = &store.LineRun{ID: "lnever", Status: "queued", WorkflowID: "linerun/lnever", CreatedAt: old}
	eng := fakeEngine{
		"jobrun/young":      {State: WorkflowMissing},
		"jobrun/terminated": {State: WorkflowTerminated, Detail: "by an operator"},
		"jobrun/alive":      {State: WorkflowRunning},
		"jobrun/done": {State: WorkflowCompleted, Result: func(ptr any) error {
			*ptr.(*FinishRunResult) = FinishRunResult{Outcome: run.Outcome{Status: run.Succeeded}}
			return nil
		}},
		"linerun/lterm": {State: WorkflowTerminated},
	}
	r := &Reconciler{Store: st, Engine: eng, Now: func() time.Time { return now }, Grace: 15 * time.Second}
	n, err := r.Once(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"never": "failed/DISPATCH_FAILED", "young": "queued/", "lost": "failed/unknown",
		"terminated": "failed/unknown", "alive": "running/", "done": "succeeded/", "stopped": "cancelled/CANCELLED"}
	for id, w := range want {
		j := st.jobs[id]
		code := ""
		if j.ErrorCode != nil {
			code = *j.ErrorCode
		}
		if got := string(j.Status) + "/" + code; got != w {
			t.Errorf("job run %s: %s, want %s", id, got, w)
		}
	}
	if m := st.jobs["stopped"].ErrorMessage; m == nil || *m != "stopped: stopped by ci" {
		t.Errorf("stopped run's message %v, want %q (as when its workflow ends it)", m, "stopped: stopped by ci")
	}
	if tl := st.jobs["lost"].StepTimeline; tl[0].Status != run.Failed || tl[1].Status != run.Skipped {
		t.Errorf("lost run's steps: %s, %s; want failed, skipped", tl[0].Status, tl[1].Status)
	}
	for id, w := range map[string]string{"lterm": "failed/unknown/unknown", "lnever": "failed/dispatch_failed/platform"} {
		l := st.lines[id]
		got := string(l.Status)
		if l.Failure != nil {
			got += fmt.Sprintf("/%s/%s", *l.Failure.Code, l.Failure.Domain)
		}
		if got != w {
			t.Errorf("line run %s: %s, want %s", id, got, w)
		}
	}
	// Nothing of a reconciled line run stays live (API.md: a stage visit
	// ends succeeded, failed or cancelled; README: the last turn is completed).
	if l := st.lines["lterm"]; l.Stages[0].Status != run.Succeeded || l.Stages[1].Status != run.Failed || l.Stages[1].CompletedAt == nil ||
		l.Waiting != nil || l.ManagerTurns[0].State != "completed" {
		t.Errorf("line run lterm: stages %+v, waiting %+v, turns %+v; want b failed, no wait, the turn completed", l.Stages, l.Waiting, l.ManagerTurns)
	}
	if n != 7 {
		t.Errorf("finished %d records, want 7", n)
	}
	if n, _ := r.Once(context.Background()); n != 0 {
		t.Errorf("a second pass finished %d records, want 0", n)
	}
}
