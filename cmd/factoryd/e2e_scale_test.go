package main

// The scaled-out topology end to end: the test process hosts a Temporal
// server, and real factoryd processes (the test binary acting as factoryd)
// share it and one store: one --roles api and three --roles worker, each
// worker with its own data directory, as containers have.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/linefactory/linefactory/cmd/internal/embedded"
	"github.com/linefactory/linefactory/internal/testwait"
	"github.com/linefactory/linefactory/manifests/manifesttest"
	"github.com/linefactory/linefactory/store/storetest"
)

// scaleCluster is one API process and some worker processes sharing a
// Temporal server (hosted by the test process) and a store.
type scaleCluster struct {
	t        testing.TB
	temporal string // frontend host:port
	// temporalKeyFile holds the server's API key: the processes read it
	// as another factoryd's embedded server would have them.
	temporalKeyFile string
	dsn             string
	snapshot        string // FACTORY_SNAPSHOT_URL shared by the workers
	api             *daemon
	workers         []*scaleWorker
}

// scaleWorker is a --roles worker process and its data directory, which
// outlives the process (a restart keeps the worker's identity).
type scaleWorker struct {
	dataDir string
	ops     string // FACTORY_OPS_ADDR
	d       *daemon
}

// scaleStore is the store every process of the cluster shares: a fresh
// PostgreSQL schema when FACTORY_TEST_POSTGRES_DSN is set, else a SQLite file.
func scaleStore(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("FACTORY_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Log("FACTORY_TEST_POSTGRES_DSN is unset: the processes share a SQLite file")
		return filepath.Join(t.TempDir(), "factory.db")
	}
	return storetest.FreshSchema(t, dsn, "scale")
}

func startScaleCluster(t testing.TB, workers int, extraEnv ...string) *scaleCluster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	serverDir := t.TempDir()
	srv, err := embedded.Start(ctx, embedded.Config{DataDir: serverDir, FrontendPort: freePort(t), UIAddr: "off"})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	// Cleanups run last-in first-out: the processes stop before the server.
	t.Cleanup(func() { _ = srv.Stop(); cancel() })
	c := &scaleCluster{t: t, temporal: srv.FrontendAddr(), temporalKeyFile: filepath.Join(serverDir, embedded.APIKeyFile), dsn: scaleStore(t),
		snapshot: "file://" + filepath.Join(t.TempDir(), "snapshots")}
	env := append(c.env(t.TempDir()), "FACTORY_ROLES=api", fmt.Sprintf("FACTORY_HTTP_ADDR=127.0.0.1:%d", freePort(t)))
	c.api = startDaemon(t, "", append(env, extraEnv...))
	var wg sync.WaitGroup
	c.workers = make([]*scaleWorker, workers)
	for i := range c.workers {
		c.workers[i] = &scaleWorker{dataDir: t.TempDir(), ops: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	}
	for _, w := range c.workers {
		wg.Add(1)
		go func() { defer wg.Done(); c.startWorker(w, extraEnv...) }()
	}
	wg.Wait()
	for i, w := range c.workers {
		if w.d == nil {
			t.Fatalf("worker %d did not start", i)
		}
	}
	return c
}

func (c *scaleCluster) env(dataDir string) []string {
	return append(os.Environ(), "FACTORYD_E2E_CHILD=1", "FACTORY_DATA_DIR="+dataDir, "FACTORY_BOOTSTRAP_TOKEN="+e2eToken,
		"FACTORY_DATABASE_URL="+c.dsn, "TEMPORAL_ADDRESS="+c.temporal,
		"FACTORY_TEMPORAL_API_KEY_FILE="+c.temporalKeyFile, "FACTORY_SNAPSHOT_URL="+c.snapshot,
		"FACTORY_LOG_LEVEL=warn",
		// Steps report their working directory on the host (an isolated
		// step sees /workspace): that is how the test tells the workers
		// apart. Isolation has tests of its own.
		"FACTORY_SANDBOX_ISOLATION=none")
}

// startWorker starts (or restarts) a worker on its data directory and waits
// until its ops endpoint says it is ready.
func (c *scaleCluster) startWorker(w *scaleWorker, extraEnv ...string) {
	env := append(c.env(w.dataDir), "FACTORY_ROLES=worker", "FACTORY_OPS_ADDR="+w.ops, "FACTORY_HTTP_ADDR="+w.ops)
	w.d = startDaemon(c.t, "", append(env, extraEnv...))
}

// workerOf tells which worker's data directory a step's working directory
// is in (-1: none).
func (c *scaleCluster) workerOf(dir string) int {
	for i, w := range c.workers {
		if strings.HasPrefix(dir, w.dataDir+string(filepath.Separator)) {
			return i
		}
	}
	return -1
}

// holder tells which worker holds a sandbox on its disk (-1: none).
func (c *scaleCluster) holder(sandbox string) int {
	for i, w := range c.workers {
		if _, err := os.Stat(filepath.Join(w.dataDir, "sandboxes", "sandboxes", sandbox)); err == nil {
			return i
		}
	}
	return -1
}

// where is the worker a run's "where" output names.
func (c *scaleCluster) where(run map[string]any) int {
	c.t.Helper()
	out, _ := run["result_payload"].(map[string]any)["outputs"].(map[string]any)
	dir, _ := out["where"].(string)
	i := c.workerOf(dir)
	if i < 0 {
		c.t.Fatalf("run %v: output where = %q is in no worker's data directory", run["id"], dir)
	}
	return i
}

var scaleMultiJob = manifesttest.Job("scale-multi")

var scaleKeepJob = manifesttest.Job("scale-keep")

var scaleReuseJob = manifesttest.Job("read-kept", map[string]any{"name": "again", "param": "box", "sandbox": "mode = \"reuse\"\nname = \"{{box}}\""})

var scaleRestoreJob = manifesttest.Job("read-kept", map[string]any{"name": "restore", "param": "snap", "sandbox": "image = \"debian:bookworm\"\nsnapshot_name = \"{{snap}}\""})

var scaleSlowJob = manifesttest.Job("scale-slow")

// startMany starts n runs of a job at once.
func startMany(d *daemon, job string, n int) []string {
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() { defer wg.Done(); ids[i] = d.start(job, nil) }()
	}
	wg.Wait()
	return ids
}

func TestEndToEndScaleOut(t *testing.T) {
	if testing.Short() {
		t.Skip("starts five processes")
	}
	began := time.Now()
	c := startScaleCluster(t, 3)
	api := c.api
	for name, job := range map[string]string{"multi": scaleMultiJob, "keep": scaleKeepJob, "again": scaleReuseJob,
		"restore": scaleRestoreJob, "slow": scaleSlowJob, "hello": example(t, "hello")} {
		api.deploy(name, job)
	}
	t.Logf("cluster up in %s", time.Since(began).Round(time.Millisecond))

	// 1. Thirty runs of two tasks of two steps each: every step of a task
	// must see what the task's earlier steps left in its sandbox.
	phase := time.Now()
	ids := startMany(api, "multi", 30)
	perWorker := make([]int, len(c.workers))
	var failed []string
	for _, id := range ids {
		run := api.wait(id, 3*time.Minute)
		if run["status"] != "succeeded" {
			failed = append(failed, fmt.Sprintf("%s: %v %v", id, run["error_code"], run["error_message"]))
			continue
		}
		perWorker[c.where(run)]++
	}
	t.Logf("30 multi-step runs in %s; runs per worker: %v", time.Since(phase).Round(time.Millisecond), perWorker)
	if len(failed) > 0 {
		t.Fatalf("%d of 30 runs failed:\n%s", len(failed), strings.Join(failed, "\n"))
	}

	// 2. ensure then reuse: both land on the worker that holds the sandbox.
	kept := api.wait(api.start("keep", map[string]any{"box": "box-1"}), time.Minute)
	if kept["status"] != "succeeded" {
		t.Fatalf("ensure run: %v", kept)
	}
	home := c.where(kept)
	for i := 0; i < 4; i++ {
		again := api.wait(api.start("again", map[string]any{"box": "box-1"}), time.Minute)
		if again["status"] != "succeeded" {
			t.Fatalf("reuse run %d: %v %v", i, again["error_code"], again["error_message"])
		}
		if got := c.where(again); got != home {
			t.Fatalf("reuse run %d ran on worker %d, the sandbox is on worker %d", i, got, home)
		}
	}
	t.Logf("ensure and 4 reuse runs all on worker %d", home)

	// 3. A snapshot taken on one worker is restored on another: the worker
	// that took it is stopped meanwhile, so the restore must run elsewhere.
	c.workers[home].d.kill(syscall.SIGTERM)
	restored := api.wait(api.start("restore", map[string]any{"snap": "box-1-snap"}), time.Minute)
	if restored["status"] != "succeeded" {
		t.Fatalf("restore run: %v %v", restored["error_code"], restored["error_message"])
	}
	if got := c.where(restored); got == home {
		t.Fatalf("restore ran on worker %d, which was stopped", got)
	}
	// The stopped worker comes back with the same identity: its sandbox is
	// reachable again.
	c.startWorker(c.workers[home])
	if again := api.wait(api.start("again", map[string]any{"box": "box-1"}), time.Minute); again["status"] != "succeeded" || c.where(again) != home {
		t.Fatalf("reuse after the worker's restart: %v %v", again["error_code"], again["error_message"])
	}
	t.Logf("snapshot taken on worker %d restored on worker %d; the restarted worker serves its sandbox again", home, c.where(restored))

	// 4. SIGKILL a worker mid-run: its provision runs are retried elsewhere
	// or fail as infra; the other workers' runs succeed; none stays running.
	slow := startMany(api, "slow", 6)
	// Wait until every run's step runs, then kill a worker running some.
	victim := -1
	onVictim := map[string]bool{}
	if !testwait.UntilEvery(time.Minute, 50*time.Millisecond, func() bool {
		holders := map[string]int{}
		for _, id := range slow {
			_, run := api.call("GET", "/job-runs/"+id, "", nil)
			tl, _ := run["step_timeline"].([]any)
			if len(tl) == 0 || tl[0].(map[string]any)["status"] != "running" {
				break
			}
			name, _ := tl[0].(map[string]any)["sandbox_name"].(string)
			if h := c.holder(name); name != "" && h >= 0 {
				holders[id] = h
			}
		}
		if len(holders) == len(slow) {
			// The ensured sandbox's worker when it runs one of them, so
			// that a reuse of its sandbox is tried after the kill.
			victim = holders[slow[0]]
			for _, h := range holders {
				if h == home {
					victim = home
				}
			}
			for id, h := range holders {
				onVictim[id] = h == victim
			}
		}
		return victim >= 0
	}) {
		t.Fatal("the slow runs did not all start their step within a minute")
	}
	n := 0
	for _, on := range onVictim {
		if on {
			n++
		}
	}
	c.workers[victim].d.kill(syscall.SIGKILL)
	killedAt := time.Now()
	outcome := map[string]int{}
	for _, id := range slow {
		run := api.wait(id, 2*time.Minute)
		switch {
		case run["status"] == "succeeded":
			outcome["succeeded"]++
			if c.where(run) == victim {
				t.Errorf("run %s reports success on the killed worker %d", id, victim)
			}
		case onVictim[id] && run["status"] == "failed" && run["failure_class"] == "infra":
			outcome["failed infra"]++
			if msg, _ := run["error_message"].(string); !strings.Contains(msg, "worker") {
				t.Errorf("run %s: the error does not name the worker: %v %v", id, run["error_code"], msg)
			}
		default:
			t.Errorf("run %s (on the killed worker: %v): %v %v %v %v", id, onVictim[id], run["status"], run["failure_class"], run["error_code"], run["error_message"])
		}
	}
	t.Logf("SIGKILL of worker %d with %d of 6 runs on it: %v, all final %s after the kill", victim, n, outcome,
		time.Since(killedAt).Round(time.Millisecond))
	if victim == home {
		// The ensured sandbox went with its worker: a reuse fails clearly.
		again := api.wait(api.start("again", map[string]any{"box": "box-1"}), 2*time.Minute)
		if again["status"] != "failed" || again["failure_class"] != "infra" || !strings.Contains(fmt.Sprint(again["error_message"]), "worker") {
			t.Errorf("reuse of a sandbox whose worker is gone: %v %v %v %v", again["status"], again["failure_class"], again["error_code"], again["error_message"])
		}
		t.Logf("reuse of the sandbox on the killed worker: %v %v", again["error_code"], again["error_message"])
	}
	ids = startMany(api, "hello", 6)
	for _, id := range ids {
		if run := api.wait(id, time.Minute); run["status"] != "succeeded" {
			t.Errorf("hello after the kill: %v %v", run["error_code"], run["error_message"])
		}
	}
	t.Logf("scale-out test took %s", time.Since(began).Round(time.Millisecond))
}
