package api

import (
	"errors"
	"reflect"
	"testing"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/workflows"
)

// failedAtSecond is a line run that visited "first" (succeeded, took
// transition "next") and then failed in "second" after two attempts.
func failedAtSecond() store.LineRun {
	vid, next, stage := "lv_1", "next", "second"
	jr := func(id string) *string { return &id }
	code := run.StageFailed
	return store.LineRun{ID: "lr_old", Status: run.Failed, LineVersionID: &vid,
		Stages: []store.LineRunStage{
			{StageName: "first", StageOrder: 1, Iteration: 1, Status: run.Succeeded, Outcome: &next, JobRunID: jr("jr_1"), TotalCostCents: 5},
			{StageName: "second", StageOrder: 2, Iteration: 1, Status: run.Failed, JobRunID: jr("jr_2"), TotalCostCents: 3},
			{StageName: "second", StageOrder: 2, Iteration: 1, Status: run.Failed, JobRunID: jr("jr_3"), TotalCostCents: 4},
		},
		Transitions: []store.TakenTransition{{}},
		Failure:     &store.LineRunFailure{Code: &code, StageName: &stage},
	}
}

// fakeJobRuns serves the outputs and params of jr_1..jr_3.
func fakeJobRuns(id string) (map[string]any, map[string]any, error) {
	switch id {
	case "jr_1":
		return map[string]any{"greeting": "hi"}, map[string]any{"who": "one"}, nil
	case "jr_2", "jr_3":
		return nil, map[string]any{"who": "two"}, nil
	}
	return nil, nil, errors.New("no such job run")
}

func TestRetrySnapshot(t *testing.T) {
	t.Run("from the failed stage", func(t *testing.T) {
		p, err := retrySnapshot(failedAtSecond(), "", fakeJobRuns)
		if err != nil {
			t.Fatal(err)
		}
		// The state workflows' TestLineRunRetryThroughWorkflow starts from.
		want := &workflows.LineState{Stage: "second", StageParams: map[string]any{"who": "two"}, Visits: 1, StageOrder: 1,
			Iterations: map[string]int{"first": 1, "second": 0}, Transitions: map[string]int{"next": 1}, CostCents: 5,
			Results: map[string]manifests.StageResult{"first": {Status: "succeeded", Iteration: 1, JobRunID: "jr_1", Outputs: map[string]any{"greeting": "hi"}}}}
		if !reflect.DeepEqual(p.State, want) {
			t.Errorf("state %+v\nwant  %+v", p.State, want)
		}
		if p.Carried != 1 || p.Transitions != 1 || !reflect.DeepEqual(p.Outputs, map[string]map[string]any{"first": {"greeting": "hi"}}) {
			t.Errorf("carried %d transitions %d outputs %v", p.Carried, p.Transitions, p.Outputs)
		}
	})
	t.Run("from an earlier stage", func(t *testing.T) {
		p, err := retrySnapshot(failedAtSecond(), "first", fakeJobRuns)
		if err != nil || p.Carried != 0 || p.State.Stage != "first" || p.State.Iterations["first"] != 0 || p.State.Visits != 0 ||
			p.State.StageParams["who"] != "one" || p.Transitions != 0 || len(p.Outputs) != 0 {
			t.Fatalf("plan %+v state %+v: %v", p, p.State, err)
		}
	})
	t.Run("without a failure's stage, from the last visit", func(t *testing.T) {
		old := failedAtSecond()
		old.Failure = nil
		if p, err := retrySnapshot(old, "", fakeJobRuns); err != nil || p.State.Stage != "second" || p.Carried != 1 {
			t.Fatalf("plan %+v: %v", p, err)
		}
	})
	refused := map[string]func(*store.LineRun) string{
		"a run that did not fail":     func(r *store.LineRun) string { r.Status = run.Succeeded; return "" },
		"a run without a version":     func(r *store.LineRun) string { r.LineVersionID = nil; return "" },
		"a run without visits":        func(r *store.LineRun) string { r.Stages = nil; return "" },
		"a stage it did not visit":    func(*store.LineRun) string { return "third" },
		"a carried job run not found": func(r *store.LineRun) string { r.Stages[0].JobRunID = new("jr_gone"); return "" },
		"the retried job run not found": func(r *store.LineRun) string {
			r.Stages[1].JobRunID = new("jr_gone")
			return ""
		},
	}
	for name, change := range refused {
		t.Run(name, func(t *testing.T) {
			old := failedAtSecond()
			from := change(&old)
			if _, err := retrySnapshot(old, from, fakeJobRuns); !errors.Is(err, errRetrySnapshot) {
				t.Fatalf("got %v, want errRetrySnapshot", err)
			}
		})
	}
}
