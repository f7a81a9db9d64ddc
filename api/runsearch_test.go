package api

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// seedRuns stores job and line runs directly (no engine): two jobs, one
// line run with two stage visits and their logs.
func seedRuns(t *testing.T, st *store.Store, base time.Time) (lineRunID string, jobRunIDs []string) {
	t.Helper()
	ctx := context.Background()
	lr, err := st.CreateLineRun(ctx, store.LineRun{ID: "lr_1", LineName: "build-until-green", Status: "succeeded", CreatedAt: base})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(id, job, status string, at time.Time, stage string) {
		r := store.JobRun{ID: id, JobName: job, JobVersionID: "jv_x", Status: run.Status(status), CreatedAt: at}
		if stage != "" {
			lid := lr.ID
			r.LineRunID, r.StageName = &lid, &stage
		}
		if _, err := st.CreateJobRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	mk("jr_a", "hello", "succeeded", base.Add(1*time.Minute), "build")
	mk("jr_b", "check", "failed", base.Add(2*time.Minute), "check")
	mk("jr_c", "hello", "running", base.Add(3*time.Minute), "")
	_, err = st.UpdateLineRun(ctx, lr.ID, func(r *store.LineRun) error {
		a, b := "jr_a", "jr_b"
		r.Stages = []store.LineRunStage{{StageName: "build", Status: "succeeded", JobRunID: &a}, {StageName: "check", Status: "failed", JobRunID: &b}}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateLineRun(ctx, store.LineRun{ID: "lr_2", LineName: "nightly", Status: "running", CreatedAt: base.Add(5 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	// Interleaved writes: the text answer groups them by visit and step.
	for _, w := range []struct{ run, step, data string }{
		{"jr_a", "t/one", "a1\n"}, {"jr_b", "t/two", "b1\n"}, {"jr_a", "t/one", "a2\n"}, {"jr_c", "t/x", "other run\n"},
	} {
		if err := st.AppendStepLog(ctx, w.run, w.step, "stdout", []byte(w.data)); err != nil {
			t.Fatal(err)
		}
	}
	return lr.ID, []string{"jr_a", "jr_b", "jr_c"}
}

func ids(t *testing.T, l []map[string]any) string {
	t.Helper()
	var out []string
	for _, m := range l {
		out = append(out, m["id"].(string))
	}
	return strings.Join(out, ",")
}

func TestRunSearch(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		st := h.srv.store.(*store.Store)
		base := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Second)
		lrID, _ := seedRuns(t, st, base)

		get := func(path string) []map[string]any {
			t.Helper()
			r := h.do(req{method: "GET", path: path, scope: ScopeRead})
			expect(t, r, http.StatusOK)
			return r.list(t)
		}
		if got := ids(t, get("/job-runs")); got != "jr_c,jr_b,jr_a" {
			t.Fatalf("all job runs newest first: %s", got)
		}
		if got := ids(t, get("/job-runs?job=hello")); got != "jr_c,jr_a" {
			t.Fatalf("job filter: %s", got)
		}
		if got := ids(t, get("/job-runs?job_name=check")); got != "jr_b" {
			t.Fatalf("job_name filter: %s", got)
		}
		if got := ids(t, get("/job-runs?status=failed")); got != "jr_b" {
			t.Fatalf("status filter: %s", got)
		}
		if got := ids(t, get("/job-runs?line_run_id="+lrID)); got != "jr_b,jr_a" {
			t.Fatalf("line run filter: %s", got)
		}
		if got := ids(t, get("/job-runs?since="+base.Add(150*time.Second).Format(time.RFC3339))); got != "jr_c" {
			t.Fatalf("since filter: %s", got)
		}
		if got := ids(t, get("/job-runs?limit=1&offset=1")); got != "jr_b" {
			t.Fatalf("page: %s", got)
		}
		if got := get("/job-runs?since=1h"); len(got) != 0 {
			t.Fatalf("since 1h: %d runs, want none (all are 2h old)", len(got))
		}
		if got := ids(t, get("/job-runs?since=1d")); got != "jr_c,jr_b,jr_a" {
			t.Fatalf("since 1d: %s", got)
		}
		expectDetail(t, h.do(req{method: "GET", path: "/job-runs?status=waiting", scope: ScopeRead}), "query", "status")
		expectDetail(t, h.do(req{method: "GET", path: "/job-runs?since=yesterday", scope: ScopeRead}), "query", "since")
		expectDetail(t, h.do(req{method: "GET", path: "/job-runs?limit=0", scope: ScopeRead}), "query", "limit")
		expectError(t, h.do(req{method: "GET", path: "/job-runs"}), http.StatusUnauthorized, CodeAuthRequired)

		lrs := get("/factory/line-runs")
		if got := ids(t, lrs); got != "lr_2,lr_1" {
			t.Fatalf("all line runs newest first: %s", got)
		}
		if _, ok := lrs[1]["transitions"]; ok {
			t.Fatalf("list items carry no transitions: %v", lrs[1])
		}
		if st, _ := lrs[1]["stages"].([]any); len(st) != 2 {
			t.Fatalf("list items keep their stages: %v", lrs[1])
		}
		if got := ids(t, get("/factory/line-runs?line=nightly")); got != "lr_2" {
			t.Fatalf("line filter: %s", got)
		}
		if got := ids(t, get("/factory/line-runs?line_name=build-until-green")); got != "lr_1" {
			t.Fatalf("line_name filter: %s", got)
		}
		if got := ids(t, get("/factory/line-runs?status=succeeded")); got != "lr_1" {
			t.Fatalf("status filter: %s", got)
		}
		if got := ids(t, get("/factory/line-runs?status=waiting")); got != "" {
			t.Fatalf("waiting: %s", got)
		}
		if got := ids(t, get("/factory/line-runs?since="+base.Add(time.Minute).Format(time.RFC3339))); got != "lr_2" {
			t.Fatalf("since filter: %s", got)
		}
		if got := ids(t, get("/factory/line-runs?since="+base.Format(time.RFC3339))); got != "lr_2,lr_1" {
			t.Fatalf("since the first run: %s", got)
		}
		if got := ids(t, get("/factory/line-runs?limit=1&offset=1&fields=summary")); got != "lr_1" {
			t.Fatalf("page of summaries: %s", got)
		}
		expectDetail(t, h.do(req{method: "GET", path: "/factory/line-runs?status=timed_out", scope: ScopeRead}), "query", "status")
	})
}

func TestLineRunLogs(t *testing.T) {
	h := newHarness(t, storetestSQLite(t))
	st := h.srv.store.(*store.Store)
	lrID, _ := seedRuns(t, st, time.Now().UTC().Add(-time.Hour))

	r := h.do(req{method: "GET", path: "/factory/line-runs/" + lrID + "/logs", scope: ScopeRead})
	expect(t, r, http.StatusOK)
	want := "==> build t/one <==\na1\na2\n==> check t/two <==\nb1\n"
	if string(r.Body) != want {
		t.Fatalf("text logs:\n%s\nwant:\n%s", r.Body, want)
	}

	// SSE: every log event has an id; Last-Event-ID resumes after it. The
	// run is final, so the stream ends.
	r = h.do(req{method: "GET", path: "/factory/line-runs/" + lrID + "/logs?follow=true", scope: ScopeRead})
	expect(t, r, http.StatusOK)
	body := string(r.Body)
	for _, s := range []string{`"stage":"build"`, `"stage":"check"`, `"data":"a2\n"`, "event:end", `"status":"succeeded"`} {
		if !strings.Contains(body, s) {
			t.Fatalf("SSE stream lacks %s:\n%s", s, body)
		}
	}
	if strings.Contains(body, "other run") {
		t.Fatalf("SSE stream has another run's logs:\n%s", body)
	}
	var eventIDs []string
	for _, line := range strings.Split(body, "\n") {
		if id, ok := strings.CutPrefix(line, "id:"); ok {
			eventIDs = append(eventIDs, id)
		}
	}
	if len(eventIDs) != 3 {
		t.Fatalf("want 3 event ids, got %v:\n%s", eventIDs, body)
	}
	r = h.do(req{method: "GET", path: "/factory/line-runs/" + lrID + "/logs", scope: ScopeRead,
		header: http.Header{"Accept": {"text/event-stream"}, "Last-Event-Id": {eventIDs[0]}}})
	expect(t, r, http.StatusOK)
	if strings.Contains(string(r.Body), `"data":"a1\n"`) || !strings.Contains(string(r.Body), `"data":"b1\n"`) {
		t.Fatalf("resume after %s:\n%s", eventIDs[0], r.Body)
	}

	// Job run logs carry event ids too and resume the same way.
	r = h.do(req{method: "GET", path: "/job-runs/jr_a/logs?follow=true", scope: ScopeRead})
	expect(t, r, http.StatusOK)
	if strings.Count(string(r.Body), "id:") != 2 {
		t.Fatalf("job run SSE ids:\n%s", r.Body)
	}

	expectError(t, h.do(req{method: "GET", path: "/factory/line-runs/lr_nope/logs", scope: ScopeRead}), http.StatusNotFound, CodeNotFound)
	expectDetail(t, h.do(req{method: "GET", path: "/factory/line-runs/" + lrID + "/logs?follow=maybe", scope: ScopeRead}), "query", "follow")
}
