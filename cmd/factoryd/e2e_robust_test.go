package main

// End-to-end tests of "no run left behind": records reach a final state
// whatever happens to the engine or the process.

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/linefactory/linefactory/internal/testwait"
	"github.com/linefactory/linefactory/manifests/manifesttest"
	"github.com/linefactory/linefactory/manifests/run"
)

// robustEnv is the default daemon environment with a fast reconciler.
func robustEnv(t *testing.T, dataDir string) []string {
	return append(os.Environ(), "FACTORYD_E2E_CHILD=1",
		"FACTORY_DATA_DIR="+dataDir,
		"FACTORY_BOOTSTRAP_TOKEN="+e2eToken,
		fmt.Sprintf("FACTORY_HTTP_ADDR=127.0.0.1:%d", freePort(t)),
		fmt.Sprintf("FACTORY_TEMPORAL_PORT=%d", freePort(t)),
		fmt.Sprintf("FACTORY_TEMPORAL_UI_ADDR=127.0.0.1:%d", freePort(t)),
		"FACTORY_RECONCILE_INTERVAL=1s", "FACTORY_RECONCILE_GRACE=3s",
	)
}

// waitFor polls get until ok says the value is what is wanted.
func waitFor(t *testing.T, what string, limit time.Duration, get func() map[string]any, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	var m map[string]any
	if !testwait.UntilEvery(limit, 100*time.Millisecond, func() bool { m = get(); return ok(m) }) {
		t.Fatalf("%s: not within %s: %v", what, limit, m)
	}
	return m
}

// TestEndToEndReconcileTerminated: a job workflow and a line workflow
// terminated in Temporal leave their records failed with unknown within the
// reconcile period, and logs?follow ends.
func TestEndToEndReconcileTerminated(t *testing.T) {
	d := startDaemon(t, t.TempDir(), robustEnv(t, t.TempDir()))
	d.deploy("sleepy", manifesttest.OneStepJob("sleepy", "", `["sh", "-c", "echo started; sleep 4321"]`))
	line := manifesttest.OneStageLine("nap", manifesttest.Manual, "nap", "sleepy")
	if code, m := d.call("POST", "/factory/lines/nap/deploy", "application/toml", []byte(line)); code != 201 {
		t.Fatalf("deploy nap: %d %v", code, m)
	}
	jobID := d.start("sleepy", nil)
	code, m := d.call("POST", "/factory/lines/nap/runs", "application/json", nil)
	if code != 201 {
		t.Fatalf("start nap: %d %v", code, m)
	}
	lineID := m["id"].(string)
	getJob := func() map[string]any { _, m := d.call("GET", "/job-runs/"+jobID, "", nil); return m }
	getLine := func() map[string]any { _, m := d.call("GET", "/factory/line-runs/"+lineID, "", nil); return m }
	waitFor(t, "job run running", 60*time.Second, getJob, func(m map[string]any) bool { return m["status"] == "running" })
	waitFor(t, "line run running", 60*time.Second, getLine, func(m map[string]any) bool { return m["status"] == "running" })

	c := temporalClient(t, d)
	ctx := context.Background()
	for _, id := range []string{run.JobRunWorkflowID(jobID), run.LineRunWorkflowID(lineID)} {
		if err := c.TerminateWorkflow(ctx, id, "", "e2e: terminated behind the API's back"); err != nil {
			t.Fatalf("terminate %s: %v", id, err)
		}
	}
	terminatedAt := time.Now()
	job := waitFor(t, "terminated job run final", 15*time.Second, getJob, func(m map[string]any) bool { return m["status"] != "running" })
	if job["status"] != "failed" || job["error_code"] != "unknown" || !strings.Contains(fmt.Sprint(job["error_message"]), "terminated") || job["completed_at"] == nil {
		t.Fatalf("terminated job run: status %v, error_code %v, error_message %v, completed_at %v", job["status"], job["error_code"], job["error_message"], job["completed_at"])
	}
	ln := waitFor(t, "terminated line run final", 15*time.Second, getLine, func(m map[string]any) bool { return m["status"] != "running" })
	f, _ := ln["failure"].(map[string]any)
	if ln["status"] != "failed" || f == nil || f["code"] != "unknown" || ln["completed_at"] == nil {
		t.Fatalf("terminated line run: status %v, failure %v", ln["status"], f)
	}
	t.Logf("both records final %s after the terminations", time.Since(terminatedAt).Round(time.Millisecond))

	// A followed log of the ended run ends.
	req, _ := http.NewRequest("GET", d.base+"/job-runs/"+jobID+"/logs?follow=true", nil)
	req.Header.Set("Authorization", "Bearer "+e2eToken)
	hc := &http.Client{Timeout: 15 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("follow the ended run's log: %v", err)
	}
	var body bytes.Buffer
	_, err = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("the followed log of an ended run did not end: %v", err)
	}
}

// TestEndToEndKillDuringBurst: factoryd killed (SIGKILL) during a burst of
// 100 starts; after a restart every record is final within 60 s, every
// run answered 201 is among them, and the counts add up.
func TestEndToEndKillDuringBurst(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir, robustEnv(t, dir))
	d.deploy("quick", manifesttest.OneStepJob("quick", "", `["true"]`))

	const n = 100
	var (
		mu       sync.Mutex
		answered []string
		wg       sync.WaitGroup
	)
	hc := &http.Client{Timeout: 30 * time.Second}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", d.base+"/jobs/quick/runs", strings.NewReader(`{}`))
			req.Header.Set("Authorization", "Bearer "+e2eToken)
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				return // the daemon died under the request
			}
			defer resp.Body.Close()
			if resp.StatusCode == http.StatusCreated {
				var buf bytes.Buffer
				_, _ = buf.ReadFrom(resp.Body)
				if i := strings.Index(buf.String(), `"id":"`); i >= 0 {
					id := buf.String()[i+6:]
					mu.Lock()
					answered = append(answered, id[:strings.IndexByte(id, '"')])
					mu.Unlock()
				}
			}
		}()
	}
	// The kill lands in the middle of the burst: once its first run is
	// answered.
	testwait.Until(30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(answered) > 0
	})
	d.kill(syscall.SIGKILL)
	wg.Wait()

	d2 := startDaemon(t, dir, d.env)
	readyAt := time.Now()
	var runs []map[string]any
	waitFor(t, "every record final", 60*time.Second, func() map[string]any {
		runs = d2.list("/jobs/quick/runs?limit=200")
		open := 0
		for _, r := range runs {
			switch r["status"] {
			case "queued", "running":
				open++
			}
		}
		return map[string]any{"records": len(runs), "unfinished": open}
	}, func(m map[string]any) bool { return m["unfinished"] == 0 })
	count := map[string]int{}
	ids := map[string]bool{}
	for _, r := range runs {
		count[fmt.Sprint(r["status"])]++
		ids[r["id"].(string)] = true
	}
	total := 0
	for _, c := range count {
		total += c
	}
	if total != len(runs) || len(runs) > n || len(runs) < len(answered) {
		t.Fatalf("%d records (%v) for %d starts, %d answered 201", len(runs), count, n, len(answered))
	}
	for _, id := range answered {
		if !ids[id] {
			t.Errorf("run %s was answered 201 but has no record", id)
		}
	}
	t.Logf("%d starts, %d answered 201 before the kill, %d records: %v; all final %s after the restart",
		n, len(answered), len(runs), count, time.Since(readyAt).Round(time.Millisecond))
}

// TestEndToEndRollingRestarts: three SIGTERM restarts during one long step
// (as a rolling deploy does, with a short drain so the step is handed over
// each time): the run succeeds, each attempt is marked in the log and the
// timeline. Before, the third restart failed the run HEARTBEAT_TIMEOUT.
func TestEndToEndRollingRestarts(t *testing.T) {
	dir := t.TempDir()
	env := append(robustEnv(t, dir), "FACTORY_SHUTDOWN_GRACE=1s")
	d := startDaemon(t, dir, env)
	d.deploy("long", manifesttest.OneStepJob("long", "s", `["sh", "-c", "echo begin; sleep 8; echo end"]`))
	id := d.start("long", nil)
	for restart := 1; restart <= 3; restart++ {
		attempt := float64(restart)
		waitFor(t, fmt.Sprintf("attempt %d running", restart), 90*time.Second, func() map[string]any {
			_, m := d.call("GET", "/job-runs/"+id, "", nil)
			return m
		}, func(m map[string]any) bool {
			tl, _ := m["step_timeline"].([]any)
			if len(tl) == 0 {
				return false
			}
			e := tl[0].(map[string]any)
			return e["status"] == "running" && e["attempt"] == attempt
		})
		d.kill(syscall.SIGTERM)
		d = startDaemon(t, dir, d.env)
	}
	run := d.wait(id, 120*time.Second)
	e := run["step_timeline"].([]any)[0].(map[string]any)
	if run["status"] != "succeeded" || e["attempt"] != 4.0 || len(e["attempts"].([]any)) != 4 {
		t.Fatalf("after three restarts: status %v, error %v %v, attempt %v, attempts %v", run["status"], run["error_code"], run["error_message"], e["attempt"], e["attempts"])
	}
	req, _ := http.NewRequest("GET", d.base+"/job-runs/"+id+"/logs?step=s", nil)
	req.Header.Set("Authorization", "Bearer "+e2eToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	_, _ = log.ReadFrom(resp.Body)
	resp.Body.Close()
	for n := 2; n <= 4; n++ {
		if !strings.Contains(log.String(), fmt.Sprintf("--- attempt %d ---\n", n)) {
			t.Errorf("the log has no marker of attempt %d:\n%s", n, log.String())
		}
	}
	if !strings.HasSuffix(log.String(), "end\n") {
		t.Errorf("the log does not end with the last attempt's output:\n%s", log.String())
	}
}
