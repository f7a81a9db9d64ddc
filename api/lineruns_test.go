package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"go.temporal.io/api/serviceerror"

	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/workflows"
)

// finishLineRunOnCancel is an engine whose line runs end just before a
// stop reaches it: the cancel finds no running workflow.
func finishLineRunOnCancel(st *store.Store) func(context.Context, any) error {
	return func(ctx context.Context, id any) error {
		if _, err := st.UpdateLineRun(ctx, id.(string), func(r *store.LineRun) error { r.Status = "succeeded"; return nil }); err != nil {
			return err
		}
		return serviceerror.NewNotFound("workflow execution already completed")
	}
}

func detailType(t *testing.T, r response) string {
	t.Helper()
	expect(t, r, http.StatusUnprocessableEntity)
	var body ValidationBody
	if err := json.Unmarshal(r.Body, &body); err != nil || len(body.Detail) == 0 {
		t.Fatalf("not a validation body: %s", r.Body)
	}
	return body.Detail[0].Type
}

func (h *harness) deployLine(t *testing.T) {
	t.Helper()
	h.deployExampleJob("hello")
	h.deployExampleJob("check")
	expect(t, h.do(req{method: "POST", path: "/factory/lines/build-until-green/deploy", body: readExample(t, "lines/build-until-green.toml"), contentType: "application/toml", scope: ScopeWrite}), 201)
}

func (h *harness) startLine(t *testing.T, params map[string]any) string {
	t.Helper()
	r := h.do(req{method: "POST", path: "/factory/lines/build-until-green/runs", body: map[string]any{"params": params}, scope: ScopeWrite})
	expect(t, r, http.StatusCreated)
	return r.json(t)["id"].(string)
}

func TestLineRunControlErrors(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		h.srv.cfg.Runs = &fakeRuns{}
		h.deployLine(t)
		id := h.startLine(t, nil)
		control := func(body map[string]any) response {
			return h.do(req{method: "POST", path: "/factory/line-runs/" + id + "/control", body: body, scope: ScopeWrite})
		}
		for _, tc := range []struct {
			body map[string]any
			want string
		}{
			{map[string]any{}, "control_payload_invalid"},
			{map[string]any{"action": "select", "transition_id": "to-check", "option": 5}, "control_payload_invalid"},
			{map[string]any{"action": "select", "transition_id": "to-check", "option": "x", "extra": 1}, "control_payload_invalid"},
			{map[string]any{"action": "select"}, "control_missing_id"},
			{map[string]any{"action": "select", "transition_id": "to-check", "option": "x"}, "control_target_invalid"},
			{map[string]any{"action": "retry"}, "retry_snapshot_invalid"},
		} {
			if got := detailType(t, control(tc.body)); got != tc.want {
				t.Errorf("%v: detail type %s, want %s", tc.body, got, tc.want)
			}
		}
		// A cancelled run is not retried either.
		st := h.srv.store.(*store.Store)
		if _, err := st.UpdateLineRun(context.Background(), id, func(r *store.LineRun) error {
			r.Status = "cancelled"
			r.Stages = []store.LineRunStage{{StageName: "build", StageOrder: 1, Iteration: 1, Status: "cancelled"}}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if got := detailType(t, control(map[string]any{"action": "retry"})); got != "retry_snapshot_invalid" {
			t.Errorf("retry of a cancelled run: %s", got)
		}
	})
}

// TestLineRunStopRace: a run that ends between the status read and the
// cancel is answered 202 with the run as it ended, unchanged.
func TestLineRunStopRace(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		st := h.srv.store.(*store.Store)
		h.srv.cfg.Runs = (&fakeRuns{}).on("CancelLineRun", finishLineRunOnCancel(st))
		h.deployLine(t)
		id := h.startLine(t, nil)
		r := h.do(req{method: "POST", path: "/factory/line-runs/" + id + "/stop", body: map[string]any{"reason": "late"}, scope: ScopeWrite})
		expect(t, r, http.StatusAccepted)
		if m := r.json(t); m["status"] != "succeeded" {
			t.Fatalf("stop answer: %s", r.Body)
		}
		// A stop of a finished run changes nothing.
		r = h.do(req{method: "POST", path: "/factory/line-runs/" + id + "/stop", body: map[string]any{"reason": "later"}, scope: ScopeWrite})
		expect(t, r, http.StatusAccepted)
		if got, _ := st.GetLineRun(context.Background(), id); got.StopReason != nil && *got.StopReason == "later" {
			t.Fatalf("a finished run was changed: %+v", got.StopReason)
		}
	})
}

// TestLineRunStartUsesEntryJobVersion: run params are checked against the
// entry job's version at run start, not the deployment's input_params.
func TestLineRunStartUsesEntryJobVersion(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		runs := &fakeRuns{}
		h.srv.cfg.Runs = runs
		h.deployLine(t)
		hello := readExample(t, "jobs/hello/job.toml")
		v2 := strings.Replace(hello, "[[run.tasks]]", "[job.params.times]\ntype = \"integer\"\ndefault = 1\n\n[[run.tasks]]", 1)
		expect(t, h.do(req{method: "POST", path: "/jobs/hello/versions", body: v2, contentType: "application/toml", scope: ScopeWrite}), http.StatusCreated)
		h.startLine(t, map[string]any{"times": 2})
		expectDetail(t, h.do(req{method: "POST", path: "/factory/lines/build-until-green/runs", body: map[string]any{"params": map[string]any{"times": "x"}}, scope: ScopeWrite}),
			"body", "params", "times")
		if runs.lines[0].Version != workflows.LineRunInputVersion {
			t.Fatalf("a line run starts with Version %d, want %d", runs.lines[0].Version, workflows.LineRunInputVersion)
		}
		if got := runs.lines[0].Jobs["build"].Manifest.Job.Params; got["times"].Type != "integer" {
			t.Fatalf("the run does not use the new entry job version: %v", got)
		}
	})
}

// TestLineRunRetryCarries: a retry carries the visits before the retried
// one (marked carried, with their outputs), and none after it.
func TestLineRunRetryCarries(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		runs := &fakeRuns{}
		h.srv.cfg.Runs = runs
		h.deployLine(t)
		id := h.startLine(t, nil)
		st := h.srv.store.(*store.Store)
		ctx := context.Background()
		mk := func(status run.Status, params, outputs map[string]any) *string {
			jr, err := st.CreateJobRun(ctx, store.JobRun{JobName: "x", Status: status, RunParams: params, ResultPayload: map[string]any{"outputs": outputs}})
			if err != nil {
				t.Fatal(err)
			}
			return &jr.ID
		}
		out := func(s string) *string { return &s }
		b1 := mk("succeeded", nil, map[string]any{"greeting": "b1"})
		c1 := mk("failed", map[string]any{"strict": true}, nil)
		b2 := mk("succeeded", nil, map[string]any{"greeting": "b2"})
		c2 := mk("failed", map[string]any{"strict": false}, nil)
		code, stage := run.StageFailed, "check"
		if _, err := st.UpdateLineRun(ctx, id, func(r *store.LineRun) error {
			r.Status = "failed"
			r.Stages = []store.LineRunStage{
				{StageName: "build", StageOrder: 1, Iteration: 1, Status: "succeeded", JobRunID: b1, Outcome: out("to-check"), TotalCostCents: 2, ComputeCostCents: 2},
				{StageName: "check", StageOrder: 2, Iteration: 1, Status: "failed", JobRunID: c1, Outcome: out("retry-build"), TotalCostCents: 3, ComputeCostCents: 3},
				{StageName: "build", StageOrder: 3, Iteration: 2, Status: "succeeded", JobRunID: b2, Outcome: out("to-check"), TotalCostCents: 5, ComputeCostCents: 5},
				{StageName: "check", StageOrder: 4, Iteration: 2, Status: "failed", JobRunID: c2, TotalCostCents: 7, ComputeCostCents: 7},
			}
			r.Transitions = []store.TakenTransition{{ID: "to-check", From: "build", To: "check", Iteration: 1}, {ID: "retry-build", From: "check", To: "build", Iteration: 1},
				{ID: "to-check", From: "build", To: "check", Iteration: 2}}
			r.StageOutputs = map[string]map[string]any{"build": {"greeting": "b2"}}
			r.Failure = &store.LineRunFailure{Code: &code, Domain: run.DomainConfig, StageName: &stage}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		// From the second build: only the first build and check are carried.
		r := h.do(req{method: "POST", path: "/factory/line-runs/" + id + "/control", body: map[string]any{"action": "retry", "from_stage": "build"}, scope: ScopeWrite})
		expect(t, r, http.StatusAccepted)
		var got store.LineRun
		if err := json.Unmarshal(r.Body, &got); err != nil {
			t.Fatal(err)
		}
		if got.RetryOf == nil || *got.RetryOf != id || len(got.Stages) != 2 || !got.Stages[0].Carried || *got.Stages[1].JobRunID != *c1 ||
			got.StageOutputs["build"]["greeting"] != "b1" || len(got.Transitions) != 2 || got.TotalCostCents != 5 {
			t.Fatalf("retried record: %s", r.Body)
		}
		state := runs.lines[len(runs.lines)-1].State
		if state.Stage != "build" || state.Iterations["build"] != 1 || state.Visits != 2 || state.CostCents != 5 || state.StageOrder != 2 ||
			state.Transitions["to-check"] != 1 || state.Results["build"].Outputs["greeting"] != "b1" || state.Turn != 0 {
			t.Fatalf("snapshot %+v", state)
		}
		// The default: the failed stage's last visit, with its params.
		r = h.do(req{method: "POST", path: "/factory/line-runs/" + id + "/control", body: map[string]any{"action": "retry"}, scope: ScopeWrite})
		expect(t, r, http.StatusAccepted)
		state = runs.lines[len(runs.lines)-1].State
		if state.Stage != "check" || state.Iterations["check"] != 1 || state.StageParams["strict"] != false || state.Visits != 3 {
			t.Fatalf("snapshot %+v", state)
		}
	})
}
