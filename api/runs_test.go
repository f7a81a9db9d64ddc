package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/workflows"
)

func TestJobRunEndpoints(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		runs := &fakeRuns{}
		h.srv.cfg.Runs = runs
		h.deployExampleJob("hello")
		h.deployExampleJob("agent-exec")

		r := h.do(req{method: "POST", path: "/jobs/hello/runs", body: map[string]any{"params": map[string]any{"who": "ann"}}, scope: ScopeWrite})
		expect(t, r, http.StatusCreated)
		started := r.json(t)
		id := started["id"].(string)
		if !strings.HasPrefix(id, "jr_") || started["status"] != "queued" || started["run_params"].(map[string]any)["who"] != "ann" {
			t.Fatalf("started run: %v", started)
		}
		if len(runs.started) != 1 || runs.started[0].RunID != id || runs.started[0].Params["who"] != "ann" || runs.started[0].Version != workflows.JobRunInputVersion {
			t.Fatalf("engine got %+v", runs.started)
		}
		// defaults applied
		r = h.do(req{method: "POST", path: "/jobs/hello/runs", scope: ScopeWrite})
		expect(t, r, http.StatusCreated)
		if r.json(t)["run_params"].(map[string]any)["who"] != "world" {
			t.Fatalf("default not applied: %s", r.Body)
		}

		expectDetail(t, h.do(req{method: "POST", path: "/jobs/hello/runs", body: map[string]any{"params": map[string]any{"who": 5}}, scope: ScopeWrite}), "body", "params", "who")
		expectDetail(t, h.do(req{method: "POST", path: "/jobs/hello/runs", body: map[string]any{"params": map[string]any{"nope": 1}}, scope: ScopeWrite}), "body", "params", "nope")
		expectDetail(t, h.do(req{method: "POST", path: "/jobs/hello/runs", body: map[string]any{"version_id": "jv_nope"}, scope: ScopeWrite}), "body", "version_id")
		expect(t, h.do(req{method: "POST", path: "/jobs/agent-exec/runs", body: map[string]any{"params": map[string]any{"task": "x"}}, scope: ScopeWrite}), http.StatusCreated)
		expectError(t, h.do(req{method: "POST", path: "/jobs/nope/runs", scope: ScopeWrite}), 404, CodeNotFound)

		r = h.do(req{method: "GET", path: "/job-runs/" + id, scope: ScopeRead})
		expect(t, r, http.StatusOK)
		r = h.do(req{method: "GET", path: "/jobs/hello/runs?limit=1", scope: ScopeRead})
		if l := r.list(t); len(l) != 1 {
			t.Fatalf("list: %v", l)
		}
		expectDetail(t, h.do(req{method: "GET", path: "/jobs/hello/runs?status=bogus", scope: ScopeRead}), "query", "status")
		// An unknown job is a 404, a known one without such runs an empty list.
		expectError(t, h.do(req{method: "GET", path: "/jobs/nope/runs", scope: ScopeRead}), 404, CodeNotFound)
		r = h.do(req{method: "GET", path: "/jobs/hello/runs?status=timed_out", scope: ScopeRead})
		expect(t, r, http.StatusOK)
		if l := r.list(t); len(l) != 0 {
			t.Fatalf("no timed-out runs: %v", l)
		}

		// stop a live run: the engine is asked, the reason is kept
		r = h.do(req{method: "POST", path: "/jobs/hello/runs/" + id + "/stop", body: map[string]any{"reason": "enough"}, scope: ScopeWrite})
		expect(t, r, http.StatusAccepted)
		if len(runs.cancelled) != 1 || runs.cancelled[0] != id || r.json(t)["stop_reason"] != "enough" {
			t.Fatalf("stop: cancelled %v body %s", runs.cancelled, r.Body)
		}
		// stopping a finished run changes nothing
		st := h.srv.store
		if _, err := st.UpdateJobRun(context.Background(), id, func(r *store.JobRun) error { r.Status = "succeeded"; return nil }); err != nil {
			t.Fatal(err)
		}
		r = h.do(req{method: "POST", path: "/jobs/hello/runs/" + id + "/stop", scope: ScopeWrite})
		expect(t, r, http.StatusAccepted)
		if len(runs.cancelled) != 1 || r.json(t)["status"] != "succeeded" {
			t.Fatalf("stop of a finished run changed something: %v %s", runs.cancelled, r.Body)
		}
		expectError(t, h.do(req{method: "POST", path: "/jobs/agent-exec/runs/" + id + "/stop", scope: ScopeWrite}), 404, CodeNotFound)

		// logs
		if err := st.(*store.Store).AppendStepLog(context.Background(), id, "greet/say", "stdout", []byte("hello ann\n")); err != nil {
			t.Fatal(err)
		}
		r = h.do(req{method: "GET", path: "/job-runs/" + id + "/logs", scope: ScopeRead})
		expect(t, r, http.StatusOK)
		if string(r.Body) != "==> greet/say <==\nhello ann\n" {
			t.Fatalf("logs %q", r.Body)
		}
		r = h.do(req{method: "GET", path: "/job-runs/" + id + "/logs?follow=true", scope: ScopeRead})
		expect(t, r, http.StatusOK)
		if !strings.Contains(string(r.Body), "event:log") || !strings.Contains(string(r.Body), "hello ann") || !strings.Contains(string(r.Body), "event:end") {
			t.Fatalf("SSE logs %q", r.Body)
		}
		expectError(t, h.do(req{method: "GET", path: "/job-runs/jr_nope/logs", scope: ScopeRead}), 404, CodeNotFound)
	})
}

func TestJobRunWithoutEngine(t *testing.T) {
	h := newHarness(t, storetestSQLite(t))
	h.deployExampleJob("hello")
	expectError(t, h.do(req{method: "POST", path: "/jobs/hello/runs", scope: ScopeWrite}), 503, CodeResourceUnavailable)
}

func TestLineRunEndpoints(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		runs := &fakeRuns{}
		h.srv.cfg.Runs = runs
		h.deployExampleJob("hello")
		h.deployExampleJob("check")
		expect(t, h.do(req{method: "POST", path: "/factory/lines/build-until-green/deploy", body: readExample(t, "lines/build-until-green.toml"), contentType: "application/toml", scope: ScopeWrite}), 201)

		expectDetail(t, h.do(req{method: "POST", path: "/factory/lines/build-until-green/runs", body: map[string]any{"params": map[string]any{"who": 1}}, scope: ScopeWrite}), "body", "params", "who")
		expectDetail(t, h.do(req{method: "POST", path: "/factory/lines/build-until-green/runs", body: map[string]any{"params": map[string]any{"nope": 1}}, scope: ScopeWrite}), "body", "params", "nope")
		expectError(t, h.do(req{method: "POST", path: "/factory/lines/nope/runs", scope: ScopeWrite}), 404, CodeNotFound)

		r := h.do(req{method: "POST", path: "/factory/lines/build-until-green/runs", body: map[string]any{"params": map[string]any{"who": "ann"}}, scope: ScopeWrite})
		expect(t, r, http.StatusCreated)
		started := r.json(t)
		id := started["id"].(string)
		if !strings.HasPrefix(id, "lr_") || started["status"] != "queued" || started["trigger"].(map[string]any)["source"] != "manual" ||
			started["triggered_by_actor"].(map[string]any)["name"] != "test-write" {
			t.Fatalf("started line run: %v", started)
		}
		if len(runs.lines) != 1 || len(runs.lines[0].Jobs) != 3 || runs.lines[0].Jobs["check"].JobName != "check" || runs.lines[0].Params["who"] != "ann" {
			t.Fatalf("engine got %+v", runs.lines)
		}
		r = h.do(req{method: "GET", path: "/factory/lines/build-until-green/runs", scope: ScopeRead})
		expect(t, r, http.StatusOK)
		if l := r.list(t); len(l) != 1 || l[0]["transitions"] != nil {
			t.Fatalf("list (without details): %v", l)
		}
		// An unknown line is a 404, a page past the end an empty list.
		expectError(t, h.do(req{method: "GET", path: "/factory/lines/nope/runs", scope: ScopeRead}), 404, CodeNotFound)
		r = h.do(req{method: "GET", path: "/factory/lines/build-until-green/runs?offset=1", scope: ScopeRead})
		expect(t, r, http.StatusOK)
		if l := r.list(t); len(l) != 0 {
			t.Fatalf("page past the end: %v", l)
		}
		r = h.do(req{method: "GET", path: "/factory/line-runs/" + id, scope: ScopeRead})
		expect(t, r, http.StatusOK)
		if r.json(t)["transitions"] == nil {
			t.Fatalf("single run lacks transitions: %s", r.Body)
		}
		expectError(t, h.do(req{method: "GET", path: "/factory/line-runs/lr_nope", scope: ScopeRead}), 404, CodeNotFound)

		// control: invalid payloads, and a retry of a run that did not fail
		expectDetail(t, h.do(req{method: "POST", path: "/factory/line-runs/" + id + "/control", body: map[string]any{}, scope: ScopeWrite}), "body", "action")
		expectDetail(t, h.do(req{method: "POST", path: "/factory/line-runs/" + id + "/control", body: map[string]any{"action": "select"}, scope: ScopeWrite}), "body")
		expectDetail(t, h.do(req{method: "POST", path: "/factory/line-runs/" + id + "/control", body: map[string]any{"action": "retry"}, scope: ScopeWrite}), "body", "action")

		// stop: the engine is asked; stopping a finished run changes nothing
		r = h.do(req{method: "POST", path: "/factory/line-runs/" + id + "/stop", body: map[string]any{"reason": "enough"}, scope: ScopeWrite})
		expect(t, r, http.StatusAccepted)
		if len(runs.cancelled) != 1 || r.json(t)["stop_reason"] != "enough" {
			t.Fatalf("stop: %v %s", runs.cancelled, r.Body)
		}

		// retry of a failed run starts a new run at the failed stage
		st := h.srv.store.(*store.Store)
		jr, err := st.CreateJobRun(context.Background(), store.JobRun{JobName: "check", Status: "failed", RunParams: map[string]any{"strict": true}})
		if err != nil {
			t.Fatal(err)
		}
		stage, code := "check", run.StageFailed
		if _, err := st.UpdateLineRun(context.Background(), id, func(r *store.LineRun) error {
			r.Status = "failed"
			r.Stages = []store.LineRunStage{{StageName: "build", StageOrder: 1, Iteration: 1, Status: "succeeded"}, {StageName: "check", StageOrder: 2, Iteration: 1, Status: "failed", JobRunID: &jr.ID}}
			r.Failure = &store.LineRunFailure{Code: &code, Domain: run.DomainConfig, StageName: &stage}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		expectDetail(t, h.do(req{method: "POST", path: "/factory/line-runs/" + id + "/control", body: map[string]any{"action": "retry", "from_stage": "announce"}, scope: ScopeWrite}), "body", "from_stage")
		r = h.do(req{method: "POST", path: "/factory/line-runs/" + id + "/control", body: map[string]any{"action": "retry"}, scope: ScopeWrite})
		expect(t, r, http.StatusAccepted)
		retry := r.json(t)
		if retry["retry_of"] != id || len(runs.lines) != 2 {
			t.Fatalf("retry: %v", retry)
		}
		state := runs.lines[1].State
		if state == nil || state.Stage != "check" || state.StageParams["strict"] != true || state.Results["build"].Status != "succeeded" {
			t.Fatalf("retry snapshot %+v", state)
		}
	})
}

func TestSchedulesReachTheEngine(t *testing.T) {
	h := newHarness(t, storetestSQLite(t))
	runs := &fakeRuns{}
	h.srv.cfg.Runs = runs
	h.deployExampleJob("nightly-report")
	// A line whose trigger is a schedule gets that schedule at deploy.
	expect(t, h.do(req{method: "POST", path: "/factory/lines/nightly/deploy", body: readExample(t, "lines/nightly.toml"), contentType: "application/toml", scope: ScopeWrite}), 201)
	if len(runs.schedules) != 1 || runs.schedules[0].Cron != "30 2 * * 1-5" || runs.schedules[0].Timezone != "America/New_York" || runs.schedules[0].ScheduleGeneration != 1 {
		t.Fatalf("engine schedules after deploy: %+v", runs.schedules)
	}
	r := h.do(req{method: "GET", path: "/factory/lines/nightly/schedule", scope: ScopeRead})
	expect(t, r, http.StatusOK)
	if r.json(t)["inputs"].(map[string]any)["days"] != 7.0 {
		t.Fatalf("schedule from the trigger: %s", r.Body)
	}
	expect(t, h.do(req{method: "PUT", path: "/factory/lines/nightly/schedule", body: map[string]any{"cron": "0 5 * * *", "enabled": false}, scope: ScopeWrite}), 200)
	if last := runs.schedules[len(runs.schedules)-1]; last.ScheduleGeneration != 2 || last.Enabled {
		t.Fatalf("engine schedule after PUT: %+v", last)
	}
	expect(t, h.do(req{method: "DELETE", path: "/factory/lines/nightly/schedule", scope: ScopeWrite}), 204)
	if len(runs.deleted) != 1 || runs.deleted[0] != "nightly" {
		t.Fatalf("engine deletes: %v", runs.deleted)
	}
}

// finishJobRunOnCancel is an engine whose workflow completes just as the
// stop arrives: it finishes the run in the store, then fails the cancel
// with err as Temporal does for a completed workflow.
func finishJobRunOnCancel(st RunStore, err error) func(context.Context, any) error {
	return func(ctx context.Context, id any) error {
		_, _ = st.UpdateJobRun(ctx, id.(string), func(r *store.JobRun) error {
			r.Status, r.StopReason = "succeeded", nil // what FinishRun writes
			return nil
		})
		return err
	}
}

func TestJobRunStopRace(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		st := h.srv.store.(RunStore)
		h.srv.cfg.Runs = (&fakeRuns{}).on("CancelJobRun", finishJobRunOnCancel(st, errors.New("workflow execution already completed")))
		h.deployExampleJob("hello")
		r := h.do(req{method: "POST", path: "/jobs/hello/runs", scope: ScopeWrite})
		expect(t, r, http.StatusCreated)
		id := r.json(t)["id"].(string)

		r = h.do(req{method: "POST", path: "/jobs/hello/runs/" + id + "/stop", body: map[string]any{"reason": "late"}, scope: ScopeWrite})
		expect(t, r, http.StatusAccepted)
		if got := r.json(t); got["status"] != "succeeded" || got["stop_reason"] != nil {
			t.Fatalf("stop that lost the race: %s", r.Body)
		}
		// A finished run is never modified, not even its stop_reason.
		before, _ := st.GetJobRun(context.Background(), id)
		r = h.do(req{method: "POST", path: "/jobs/hello/runs/" + id + "/stop", body: map[string]any{"reason": "again"}, scope: ScopeWrite})
		expect(t, r, http.StatusAccepted)
		after, _ := st.GetJobRun(context.Background(), id)
		if after.StopReason != nil || after.Status != before.Status {
			t.Fatalf("stop of a finished run changed it: %+v", after)
		}

		// An engine failure on a live run is still a 502.
		h.srv.cfg.Runs = (&fakeRuns{}).on("CancelJobRun", func(context.Context, any) error { return errors.New("unavailable") })
		r = h.do(req{method: "POST", path: "/jobs/hello/runs", scope: ScopeWrite})
		id = r.json(t)["id"].(string)
		expectError(t, h.do(req{method: "POST", path: "/jobs/hello/runs/" + id + "/stop", scope: ScopeWrite}), http.StatusBadGateway, CodeBadGateway)
	})
}

// goneRuns is an engine whose workflows are all gone (lost, never started).
type goneRuns struct{ fakeRuns }

func (g *goneRuns) DescribeWorkflow(context.Context, string) (run.WorkflowState, error) {
	return run.WorkflowState{State: run.WorkflowMissing}, nil
}

// TestStopOrphanedRun: a stop of a run whose workflow is gone ends it
// cancelled at once (README "No run left behind"), with the message a stop
// gives every run: "stopped: <reason>" (the line run's failure user_cancelled).
func TestStopOrphanedRun(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		h.srv.cfg.Runs = &goneRuns{}
		h.deployExampleJob("hello")
		r := h.do(req{method: "POST", path: "/jobs/hello/runs", scope: ScopeWrite})
		expect(t, r, http.StatusCreated)
		id := r.json(t)["id"].(string)
		r = h.do(req{method: "POST", path: "/jobs/hello/runs/" + id + "/stop", body: map[string]any{"reason": "late"}, scope: ScopeWrite})
		expect(t, r, http.StatusAccepted)
		if m := r.json(t); m["status"] != "cancelled" || m["error_message"] != "stopped: late" || m["error_code"] != run.CodeCancelled {
			t.Fatalf("stopped orphan job run: status %v, message %v, code %v; want cancelled, \"stopped: late\", CANCELLED", m["status"], m["error_message"], m["error_code"])
		}
		h.deployLine(t)
		lid := h.startLine(t, nil)
		r = h.do(req{method: "POST", path: "/factory/line-runs/" + lid + "/stop", body: map[string]any{"reason": "late"}, scope: ScopeWrite})
		expect(t, r, http.StatusAccepted)
		m := r.json(t)
		f, _ := m["failure"].(map[string]any)
		if m["status"] != "cancelled" || m["error_message"] != "stopped: late" || f == nil || f["code"] != "user_cancelled" || f["error_message"] != "stopped: late" {
			t.Fatalf("stopped orphan line run: %s", r.Body)
		}
	})
}

func TestJobRunLogStepFilter(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		h.srv.cfg.Runs = &fakeRuns{}
		h.deployExampleJob("hello")
		r := h.do(req{method: "POST", path: "/jobs/hello/runs", scope: ScopeWrite})
		id := r.json(t)["id"].(string)
		ctx := context.Background()
		st := h.srv.store.(*store.Store)
		if _, err := st.UpdateJobRun(ctx, id, func(r *store.JobRun) error {
			r.StepTimeline = []store.StepTimelineEntry{{Name: "say", TaskName: "greet"}, {Name: "build", TaskName: "a"}, {Name: "build", TaskName: "b"}}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, l := range [][2]string{{"greet/say", "hello\n"}, {"a/build", "from a\n"}, {"b/build", "from b\n"}} {
			if err := st.AppendStepLog(ctx, id, l[0], "stdout", []byte(l[1])); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range []struct{ query, want string }{
			{"?step=greet/say", "hello\n"},
			{"?step=say", "hello\n"}, // a bare name, unambiguous
			{"?step=b/build", "from b\n"},
		} {
			r := h.do(req{method: "GET", path: "/job-runs/" + id + "/logs" + tc.query, scope: ScopeRead})
			expect(t, r, http.StatusOK)
			if string(r.Body) != tc.want {
				t.Errorf("logs%s = %q, want %q", tc.query, r.Body, tc.want)
			}
		}
		expectDetail(t, h.do(req{method: "GET", path: "/job-runs/" + id + "/logs?step=build", scope: ScopeRead}), "query", "step")
		// A step the run does not have, and a follow that is no boolean.
		expectDetail(t, h.do(req{method: "GET", path: "/job-runs/" + id + "/logs?step=nope", scope: ScopeRead}), "query", "step")
		expectDetail(t, h.do(req{method: "GET", path: "/job-runs/" + id + "/logs?step=greet/nope", scope: ScopeRead}), "query", "step")
		expectDetail(t, h.do(req{method: "GET", path: "/job-runs/" + id + "/logs?follow=maybe", scope: ScopeRead}), "query", "follow")
		expect(t, h.do(req{method: "GET", path: "/job-runs/" + id + "/logs?follow=false", scope: ScopeRead}), http.StatusOK)
	})
}
