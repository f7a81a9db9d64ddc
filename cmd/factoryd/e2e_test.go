package main

// End-to-end tests: factoryd serve with its embedded Temporal server, driven
// over HTTP as a user would. They are the only tests that link the Temporal
// server; keep them few.

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/linefactory/linefactory/activities/sandbox/sandboxtest"
	"github.com/linefactory/linefactory/cmd/internal/ports"
	"github.com/linefactory/linefactory/internal/testwait"
	"github.com/linefactory/linefactory/manifests/manifesttest"
	"github.com/linefactory/linefactory/workflows"
)

const e2eToken = "e2e-secret-token"

// TestMain lets the test binary act as factoryd for the restart test.
func TestMain(m *testing.M) {
	if os.Getenv("FACTORYD_E2E_CHILD") == "1" {
		// A recorder's short chains of job runs (e2e_chain_test.go).
		if n, err := strconv.Atoi(os.Getenv("FACTORYD_E2E_STEPS_PER_RUN")); err == nil && n > 0 {
			workflows.MaxStepsPerRun = n
		}
		os.Exit(runServe(nil))
	}
	if os.Getenv("FACTORYD_E2E_ATTACK") == "temporal" {
		os.Exit(temporalAttacker())
	}
	os.Exit(m.Run())
}

func freePort(t testing.TB) int {
	t.Helper()
	port, err := ports.Free()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// daemon is a factoryd child process.
type daemon struct {
	t    testing.TB
	cmd  *exec.Cmd
	base string
	env  []string
	log  *bytes.Buffer
}

func startDaemon(t testing.TB, dataDir string, env []string) *daemon {
	t.Helper()
	if env == nil {
		env = append(os.Environ(), "FACTORYD_E2E_CHILD=1",
			"FACTORY_DATA_DIR="+dataDir,
			"FACTORY_BOOTSTRAP_TOKEN="+e2eToken,
			fmt.Sprintf("FACTORY_HTTP_ADDR=127.0.0.1:%d", freePort(t)),
			fmt.Sprintf("FACTORY_TEMPORAL_PORT=%d", freePort(t)),
			fmt.Sprintf("FACTORY_TEMPORAL_UI_ADDR=127.0.0.1:%d", freePort(t)),
		)
	}
	d := &daemon{t: t, env: env, log: &bytes.Buffer{}}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "FACTORY_HTTP_ADDR="); ok {
			d.base = "http://" + v
		}
	}
	d.cmd = exec.Command(os.Args[0], "-test.run=^$")
	d.cmd.Env = env
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.kill(syscall.SIGTERM) })
	if !testwait.UntilEvery(90*time.Second, 100*time.Millisecond, func() bool {
		resp, err := http.Get(d.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}) {
		t.Fatalf("factoryd did not become ready:\n%s", d.log.String())
	}
	return d
}

func (d *daemon) kill(sig syscall.Signal) {
	if d.cmd.Process == nil || d.cmd.ProcessState != nil {
		return
	}
	_ = d.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-done
	}
}

// list GETs a list endpoint.
func (d *daemon) list(path string) []map[string]any {
	d.t.Helper()
	req, _ := http.NewRequest("GET", d.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+e2eToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return out
}

func (d *daemon) call(method, path, contentType string, body []byte) (int, map[string]any) {
	d.t.Helper()
	req, _ := http.NewRequest(method, d.base+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e2eToken)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	return resp.StatusCode, m
}

func (d *daemon) deploy(name, toml string) {
	d.t.Helper()
	if code, m := d.call("POST", "/jobs/"+name+"/versions", "application/toml", []byte(toml)); code != 201 && code != 200 {
		d.t.Fatalf("deploy %s: %d %v", name, code, m)
	}
}

func (d *daemon) start(job string, params map[string]any) string {
	d.t.Helper()
	body, _ := json.Marshal(map[string]any{"params": params})
	code, m := d.call("POST", "/jobs/"+job+"/runs", "application/json", body)
	if code != 201 {
		d.t.Fatalf("start %s: %d %v", job, code, m)
	}
	return m["id"].(string)
}

// wait polls a run until its status is final.
func (d *daemon) wait(id string, limit time.Duration) map[string]any {
	d.t.Helper()
	var m map[string]any
	if !testwait.UntilEvery(limit, 100*time.Millisecond, func() bool {
		_, m = d.call("GET", "/job-runs/"+id, "", nil)
		switch m["status"] {
		case "succeeded", "failed", "cancelled", "timed_out":
			return true
		}
		return false
	}) {
		d.t.Fatalf("run %s still %v after %s", id, m["status"], limit)
	}
	return m
}

func example(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "manifests", "examples", "jobs", name, "job.toml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// processesWith lists live processes whose command line contains s.
func processesWith(s string) []int {
	return sandboxtest.Processes(func(cmdline string) bool { return strings.Contains(cmdline, s) })
}

func TestEndToEndJobRuns(t *testing.T) {
	dataDir := t.TempDir()
	d := startDaemon(t, dataDir, nil)

	// The embedded Temporal's SQLite file is in WAL mode (a file property,
	// so any connection sees it).
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dataDir, "temporal", "temporal.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	var mode string
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("embedded Temporal journal_mode = %q (%v), want wal", mode, err)
	}
	db.Close()

	// A job with several tasks and outputs finishes with the right payload.
	d.deploy("fanout-build", example(t, "fanout-build"))
	run := d.wait(d.start("fanout-build", nil), 60*time.Second)
	if run["status"] != "succeeded" {
		t.Fatalf("fanout-build: %v", run)
	}
	outputs := run["result_payload"].(map[string]any)["outputs"].(map[string]any)
	if fmt.Sprint(outputs["size"]) != "[10 20 30]" || fmt.Sprint(outputs["artifacts"]) != "[a.bin b.bin b.sym]" || outputs["last_task"] != "build-b" {
		t.Fatalf("outputs %v", outputs)
	}
	if len(run["step_timeline"].([]any)) != 3 || run["cost_rated_at"] == nil {
		t.Fatalf("record %v", run)
	}

	// Params and logs.
	d.deploy("hello", example(t, "hello"))
	id := d.start("hello", map[string]any{"who": "e2e"})
	run = d.wait(id, 60*time.Second)
	if run["result_payload"].(map[string]any)["outputs"].(map[string]any)["greeting"] != "hello e2e" {
		t.Fatalf("hello: %v", run)
	}
	resp, err := http.NewRequest("GET", d.base+"/job-runs/"+id+"/logs?step=say", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Header.Set("Authorization", "Bearer "+e2eToken)
	r, err := http.DefaultClient.Do(resp)
	if err != nil {
		t.Fatal(err)
	}
	logs, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if !strings.Contains(string(logs), "hello e2e") {
		t.Fatalf("logs %q", logs)
	}

	// Stopping a run with a long step ends it cancelled within seconds and
	// leaves no process behind.
	d.deploy("sleepy", manifesttest.OneStepJob("sleepy", "", `["sh", "-c", "sleep 6543 & sleep 6543"]`))
	id = d.start("sleepy", nil)
	if !testwait.UntilEvery(30*time.Second, 50*time.Millisecond, func() bool { return len(processesWith("sleep 6543")) >= 2 }) {
		t.Fatal("the step's processes never started")
	}
	stopAt := time.Now()
	if code, m := d.call("POST", "/jobs/sleepy/runs/"+id+"/stop", "application/json", []byte(`{"reason":"e2e"}`)); code != 202 {
		t.Fatalf("stop: %d %v", code, m)
	}
	run = d.wait(id, 30*time.Second)
	if run["status"] != "cancelled" || time.Since(stopAt) > 15*time.Second {
		t.Fatalf("after stop: %v in %s", run["status"], time.Since(stopAt))
	}
	if left := processesWith("sleep 6543"); len(left) > 0 {
		t.Fatalf("processes left after stop: %v", left)
	}
}

// A run survives its daemon being killed (SIGKILL) or stopped (SIGTERM)
// mid-step: the restarted daemon retries the step and finishes the run. The
// retry should begin within seconds of the restart (stale Temporal cluster
// membership once cost a minute); the time is logged, not asserted.
func TestEndToEndRunSurvivesKill(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) { testRunSurvives(t, sig) })
	}
}

func testRunSurvives(t *testing.T, sig syscall.Signal) {
	if sig == syscall.SIGTERM {
		// A graceful stop drains (FACTORY_SHUTDOWN_GRACE, 5m by default) and
		// this step would finish there: a short drain hands it over.
		t.Setenv("FACTORY_SHUTDOWN_GRACE", "1s")
	}
	dir := t.TempDir()
	d := startDaemon(t, dir, nil)
	d.deploy("slow", manifesttest.OneStepJob("slow", "", `["sh", "-c", "sleep 6789 & sleep 10; echo 'done=true' >> $SVC_OUTPUT"]`)+
		"outputs = [\"done\"]\n[outputs.done]\ntype = \"boolean\"\n")
	id := d.start("slow", nil)
	var m map[string]any
	if !testwait.UntilEvery(30*time.Second, 50*time.Millisecond, func() bool { // stop the daemon while the step runs
		_, m = d.call("GET", "/job-runs/"+id, "", nil)
		tl, _ := m["step_timeline"].([]any)
		return len(tl) > 0 && tl[0].(map[string]any)["status"] == "running" && len(processesWith("sleep 6789")) > 0
	}) {
		t.Fatalf("the step never ran: %v", m)
	}
	orphans := processesWith("sleep 6789")
	stopAt := time.Now()
	d.kill(sig)
	t.Logf("%s: daemon exited after %s", sig, time.Since(stopAt).Round(time.Millisecond))
	// What a poller would see while the daemon is down: a worker going away
	// is not a user stop, so the step should still read running.
	if st := storedStepStatus(t, dir, id); st != "running" {
		t.Errorf("%s: while the daemon was down the step was recorded %q (want running)", sig, st)
	}

	d2 := startDaemon(t, dir, d.env)
	readyAt := time.Now()
	// The restarted worker killed what the crashed one's step left behind.
	for _, pid := range orphans {
		if syscall.Kill(pid, 0) == nil && len(processesWith("sleep 6789")) > 0 {
			if stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); !bytes.Contains(stat, []byte(") Z")) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				t.Errorf("process %d of the crashed worker's step survived the restart", pid)
			}
		}
	}
	if !testwait.UntilEvery(90*time.Second, 100*time.Millisecond, func() bool { // the step's retry starts on the new worker
		_, m = d2.call("GET", "/job-runs/"+id, "", nil)
		tl, _ := m["step_timeline"].([]any)
		if len(tl) == 0 {
			return false
		}
		e := tl[0].(map[string]any)
		at, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(e["started_at"]))
		return at.After(stopAt) || e["status"] == "succeeded"
	}) {
		t.Fatalf("the step was not retried after the restart: %v\n%s", m, d2.log.String())
	}
	t.Logf("%s: the step was retried %s after the restarted daemon was ready", sig, time.Since(readyAt).Round(time.Millisecond))
	run := d2.wait(id, 90*time.Second)
	if run["status"] != "succeeded" || run["result_payload"].(map[string]any)["outputs"].(map[string]any)["done"] != true {
		t.Fatalf("after restart: %v\n%s", run, d2.log.String())
	}
	t.Logf("%s: the run finished %s after the restarted daemon was ready", sig, time.Since(readyAt).Round(time.Millisecond))
}

// storedStepStatus reads a job run's first step status from the store of a
// stopped daemon.
func storedStepStatus(t *testing.T, dataDir, id string) string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dataDir, "factory.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var entry string
	if err := db.QueryRow("SELECT entry FROM job_run_steps WHERE run_id = ? ORDER BY pos LIMIT 1", id).Scan(&entry); err != nil {
		t.Fatalf("stored run %s: %v", id, err)
	}
	var e struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(entry), &e); err != nil {
		t.Fatalf("stored run %s: %v %s", id, err, entry)
	}
	return e.Status
}
